"""Benchmark: a slow simulated user or judge must not hold other episodes back (issue 16).

``python -m measurements.bench_throughput --models gold,embedded --out bench.json`` runs the same
10 episodes (``--episodes``), 8 in flight (``--max-in-flight``), through
:class:`unified.agent.loop.AgentLoop` three times per model:

- ``no latency``: the simulated user and the judge answer at once;
- ``user 2 s``: every user request takes ``--latency`` seconds;
- ``judge 2 s``: every score takes ``--latency`` seconds.

The user and the judge are a real HTTP server on loopback (:class:`SlowServer`, one thread per
request) that sleeps before it answers; the environment's ``next_user_turn`` and the adapter's
``score`` call it with ``urllib``, as a benchmark's simulated user or LLM judge calls its
endpoint. Each episode: the user asks for ``echo(N)``; the agent calls it; when the agent
answers without a call, the user is asked for its next turn (``--user-calls`` requests per
episode: a follow-up asking for the call again, then the end of the conversation); the judge
scores the episode.

The issue's target for each latency scenario: wall time within 1.5x the no-latency time plus
the latency (``bound``). ``floor`` is the least time the latency alone needs with
``--max-in-flight`` places (each place runs its episodes' user requests one after another): with
more episodes than places and a policy without a model (no-latency time near zero) the bound
lies below the floor, so there the figure to read is the time over the floor. It prints a table
and writes the figures as JSON to ``--out``.
Models: ``gold`` (the ground-truth replay, no model: the time is the harness's own), a
scripted streaming replay (``scripted``, the same replay through continuous batching), and any
checkpoint spec (``embedded``: the in-process model, greedy, continuous batching; run it under
the heavy-job lock). A model is loaded once and warmed up before the timed runs; its prefix
cache is emptied before each run so every run starts cold alike.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from unified.benchmarks.contract import Adapter, AgentLimits, Environment, RunContext, Task
from unified.types import EpisodeResult, Message, Observation, ToolCall, ToolSpec

FOLLOW_UP = "Thanks. Please call echo with text {n} once more, then tell me you are done."


class SlowServer:
    """A loopback HTTP server answering ``POST /user`` and ``POST /judge`` after ``latency`` seconds.

    ``/user`` reads ``{"task", "turn", "text"}`` and answers ``{"message": str | null}``: a
    follow-up for the first ``user_calls - 1`` requests of a task, then null (the conversation
    ends). ``/judge`` reads ``{"task", "seen", "n"}`` and answers ``{"passed": bool}``.
    """

    def __init__(self, user_calls: int) -> None:
        self.user_latency = self.judge_latency = 0.0
        self.user_calls = user_calls
        self.requests = {"user": 0, "judge": 0}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                route = self.path.strip("/")
                if route not in server.requests:
                    self.send_error(404)
                    return
                server.requests[route] += 1
                time.sleep(server.user_latency if route == "user" else server.judge_latency)
                if route == "user":
                    last = body["turn"] >= server.user_calls - 1
                    answer = {"message": None if last else FOLLOW_UP.format(n=body["n"])}
                else:
                    answer = {"passed": str(body["n"]) in body["seen"]}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the default backlog of 5 drops connections past it (1 s SYN retry)

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def post(self, route: str, payload: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}/{route}", data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    def __enter__(self) -> "SlowServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class EchoUserEnv(Environment):
    """``echo(text)`` tool; ``next_user_turn`` asks the simulated user on the server."""

    def __init__(self, task: Task, server: SlowServer) -> None:
        super().__init__()
        self.task, self.server, self.seen, self.user_turns = task, server, [], 0
        self.tools = [ToolSpec(name="echo", description="Echo text back.",
                               parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                           "required": ["text"]})]
        self.system_prompt = "You are a helpful agent. Use the tools when asked."
        self.first_user_message = f"Call echo with text {task.payload['n']}."

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        self.seen += [str(c.arguments.get("text")) for c in tool_calls]
        return [Observation(call_id=c.id, content=f"echo: {c.arguments.get('text')}") for c in tool_calls]

    def next_user_turn(self, episode) -> str | None:
        text = episode.messages[-1].content if episode.messages else ""
        answer = self.server.post("user", {"task": self.task.id, "turn": self.user_turns, "n": self.task.payload["n"],
                                           "text": text})
        self.user_turns += 1
        return answer["message"]


class EchoUserAdapter(Adapter):
    """``--episodes`` echo tasks with a simulated user and a judge on :class:`SlowServer`."""

    name = "bench_echo_user"

    def __init__(self, server: SlowServer, episodes: int, user_calls: int) -> None:
        super().__init__()
        self.server, self.episodes, self.user_calls = server, episodes, user_calls

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        return [Task(id=f"echo_{i}", benchmark=self.name, payload={"n": i}) for i in range(self.episodes)]

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        return EchoUserEnv(task, self.server)

    def score(self, task: Task, episode, env: Environment) -> EpisodeResult:
        verdict = self.server.post("judge", {"task": task.id, "n": task.payload["n"], "seen": env.seen})
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=float(verdict["passed"]),
                             passed=bool(verdict["passed"]))

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        call = ToolCall(name="echo", arguments={"text": str(task.payload["n"])})
        return [[call] for _ in range(self.user_calls)]


@dataclass
class ScenarioResult:
    """One timed run."""

    model: str
    scenario: str
    user_latency: float
    judge_latency: float
    episodes: int
    max_in_flight: int
    scheduling: str
    wall_seconds: float
    bound_seconds: float | None
    """1.5 x the no-latency wall time + the latency (None for the no-latency run itself)."""
    floor_seconds: float
    """The least any schedule needs for the latency alone with ``max_in_flight`` places: each place
    runs its episodes' user requests one after another (``ceil(episodes / max_in_flight) *
    user_calls * latency``); the judges of the last episodes take ``latency`` after their end."""
    within_bound: bool | None
    passed: int
    errors: int
    policy_calls: int
    completion_tokens: int
    user_requests: int
    judge_requests: int


def _policy(spec: str, max_in_flight: int, max_new_tokens: int):
    from unified.agent.replay import replayer_for
    from unified.inference.base import SamplingConfig, make_chat_model

    sampling = SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens, thinking=False)
    if spec == "gold":  # the loop's replayer, no model (make_chat_model refuses the spec)
        return replayer_for(spec)
    if spec == "scripted":  # a scripted model behind submit's futures, so the continuous schedule runs without weights
        import re

        from unified.chatformat.toolcalls import render_tool_call
        from unified.inference.base import ChatModel, PolicyOutput

        class StreamingEcho(ChatModel):
            """Each user turn: ``echo(text=N)`` (N from "Call echo with text N."), then "Done."."""

            supports_continuous_batching = True

            def __init__(self) -> None:
                super().__init__("scripted", sampling)
                self.pool = ThreadPoolExecutor(1, thread_name_prefix="streaming-echo")

            @staticmethod
            def _answer(messages) -> PolicyOutput:
                users = [i for i, m in enumerate(messages) if m["role"] == "user"]
                n = re.search(r"Call echo with text (\S+?)\.", messages[users[0]]["content"])
                acted = any(m["role"] == "assistant" for m in messages[users[-1] + 1:])
                text = (render_tool_call(ToolCall(name="echo", arguments={"text": n.group(1)}))
                        if n and not acted else "Done.")
                return PolicyOutput(text="</think>\n\n" + text, finish_reason="stop")

            def generate(self, requests):
                return [self._answer(r.messages) for r in requests]

            def submit(self, request, *, continuous=None):
                return self.pool.submit(self._step, request)

            def _step(self, request):
                time.sleep(0.001)  # one "decode step"
                return self._answer(request.messages)

        return StreamingEcho()
    return make_chat_model(spec, sampling, concurrency=max_in_flight)


def _run(adapter: EchoUserAdapter, policy, args: argparse.Namespace) -> tuple[float, list, list]:
    from unified.agent.loop import AgentLoop, Job

    if getattr(policy, "prefix_cache", None) is not None:
        policy.prefix_cache.clear()
    results, episodes = [], []
    loop = AgentLoop(adapter, policy, limits=AgentLimits(max_turns=args.max_turns), max_in_flight=args.max_in_flight,
                     scheduling=args.scheduling, on_result=lambda r, e: (results.append(r), episodes.append(e)))
    started = time.perf_counter()
    loop.run([Job(t) for t in adapter.tasks()])
    return time.perf_counter() - started, results, episodes


def bench_model(spec: str, args: argparse.Namespace) -> list[ScenarioResult]:
    """The three scenarios for one model (after one untimed warm-up run)."""
    from unified.agent.loop import AgentLoop

    rows: list[ScenarioResult] = []
    with SlowServer(args.user_calls) as server:
        adapter = EchoUserAdapter(server, args.episodes, args.user_calls)
        policy = _policy(spec, args.max_in_flight, args.max_new_tokens)
        scheduling = "continuous" if AgentLoop(adapter, policy, scheduling=args.scheduling).uses_continuous_batching \
            else "rounds"
        _run(adapter, policy, args)  # warm-up: allocations, kernels, first-call imports
        baseline = None
        for scenario, user, judge in (("no latency", 0.0, 0.0), (f"user {args.latency:g} s", args.latency, 0.0),
                                      (f"judge {args.latency:g} s", 0.0, args.latency)):
            server.user_latency, server.judge_latency = user, judge
            before = dict(server.requests)
            seconds, results, episodes = _run(adapter, policy, args)
            if baseline is None:
                baseline, bound = seconds, None
            else:
                bound = 1.5 * baseline + max(user, judge)
            rows.append(ScenarioResult(
                model=spec, scenario=scenario, user_latency=user, judge_latency=judge, episodes=len(results),
                max_in_flight=args.max_in_flight, scheduling=scheduling, wall_seconds=round(seconds, 2),
                bound_seconds=None if bound is None else round(bound, 2),
                floor_seconds=round(-(-args.episodes // args.max_in_flight) * args.user_calls * user + judge, 2),
                within_bound=None if bound is None else seconds <= bound,
                passed=sum(r.passed for r in results), errors=sum(r.error is not None for r in results),
                policy_calls=sum(len(e.steps) for e in episodes),
                completion_tokens=sum(s.completion_tokens for e in episodes for s in e.steps),
                user_requests=server.requests["user"] - before["user"],
                judge_requests=server.requests["judge"] - before["judge"]))
            print(_table_line(rows[-1]), file=sys.stderr, flush=True)
        policy.close()
    return rows


def _table_line(row: ScenarioResult) -> str:
    bound = "-" if row.bound_seconds is None else f"{row.bound_seconds:.2f}"
    verdict = "-" if row.within_bound is None else ("pass" if row.within_bound else "FAIL")
    return (f"| {row.model} ({row.scheduling}) | {row.scenario} | {row.wall_seconds:.2f} | {bound} | {verdict} | "
            f"{row.floor_seconds:.2f} | {row.wall_seconds - row.floor_seconds:.2f} | "
            f"{row.passed}/{row.episodes} passed, {row.errors} errors, {row.policy_calls} policy calls, "
            f"{row.completion_tokens} tokens, {row.user_requests} user / {row.judge_requests} judge requests |")


def table(rows: list[ScenarioResult]) -> str:
    header = ("| model (schedule) | scenario | wall s | bound s | within bound | floor s | over floor s | work |\n"
              "|---|---|---|---|---|---|---|---|")
    return "\n".join([header] + [_table_line(r) for r in rows])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m measurements.bench_throughput", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--models", default="gold,scripted", help="comma-separated: gold, scripted, or a checkpoint "
                        "spec (embedded ...)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per user request / per judge call")
    parser.add_argument("--user-calls", type=int, default=2, help="user requests per episode (a follow-up, then the end)")
    parser.add_argument("--scheduling", default="auto", choices=["auto", "continuous", "rounds"])
    parser.add_argument("--max-new-tokens", type=int, default=48, help="per policy call (model policies)")
    parser.add_argument("--max-turns", type=int, default=6, help="policy calls per episode")
    parser.add_argument("--out", default=None, help="write the figures to this JSON file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows: list[ScenarioResult] = []
    for spec in [m.strip() for m in args.models.split(",") if m.strip()]:
        rows += bench_model(spec, args)
    print(table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": [asdict(r) for r in rows]}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
