"""Shared by the AgentWorldBench tests: records written in the published format (a fixture, not the
data set), a loopback OpenAI-compatible server with scripted world-model and judge answers, and a
reader of the official eval.py's printed scores."""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

OBS = "**Environment Observation:**\n"


def _evaluation(scores: dict, *, fence: bool = True, trailing_comma: bool = False) -> str:
    body = json.dumps({"strengths": ["s"], "weaknesses": ["w"], "scores": scores}, indent=1)
    if trailing_comma:
        body = body[:-1].rstrip() + ",\n}"
    if fence:
        body = f"```json\n{body}\n```"
    return f"Step by step: fine.\n<final_evaluation>\n{body}\n</final_evaluation>"


def _five(f, fa, c, r, q) -> dict:
    return {"format": f, "factuality": fa, "consistency": c, "realism": r, "quality": q}


# sample tag -> (domain, id, turn_idx, total_turns, world-model reply {content, reasoning}, judge answers per attempt)
SAMPLES = {
    "S1": ("mcp", 145256090131919, 1, 2,
           {"content": "<think>draft <predicted_observation>fake</predicted_observation></think>\n"
                       "<predicted_observation>\n" + OBS + '{"PRED": "S1"}\n</predicted_observation>'},
           [_evaluation(_five(4, 5, 3, 4, 4))]),
    "S2": ("mcp", 145256090131919, 2, 2,
           {"content": "<predicted_observation>PRED-S2 result</predicted_observation>", "reasoning": "I reason."},
           ["I think it is fine, no verdict.", _evaluation(_five(5, 5, 5, 4, 4))]),
    "S3": ("mcp", 7, 1, 1, {"content": "", "reasoning": "ran out of tokens while thinking"}, []),
    "S4": ("terminal", 31, 2, 3, {"content": "PRED-S4 plain output\n$ "},
           ["<final_evaluation>not json at all</final_evaluation>"] * 3),
    "S5": ("terminal", 32, 1, 1, {"content": "<predicted_observation>PRED-S5 unclosed"},
           [_evaluation({"format": "4/5", "factuality": 3.6, "consistency": 0, "quality": 7}, fence=False)]),
    "S6": ("terminal", 33, 3, 3, {"content": "<think>x</think>" + OBS + "PRED-S6"},
           ["<think>maybe " + _evaluation(_five(1, 1, 1, 1, 1)) + "</think>\n" + _evaluation(_five(2, 3, 2, 3, 2))]),
    "S7": ("web", "w-1", 1, 2, {"content": "<predicted_observation>PRED-S7</predicted_observation>"},
           [_evaluation(_five(3, 3, 3, 3, 3), trailing_comma=True)]),
    "S8": ("web", 900, 2, 2, {"content": "<predicted_observation>PRED-S8</predicted_observation>"},
           [_evaluation(_five(0, 0, 0, 0, 0))]),
}


def write_published_fixture(directory: Path, samples: dict | None = None) -> dict[str, str]:
    """One ``{domain}_test.jsonl`` per domain in the published layout (integer ids, the trajectory's
    whole prompt/response lists); returns action text -> sample tag. ``samples``: SAMPLES' shape (default SAMPLES)."""
    directory.mkdir(parents=True, exist_ok=True)
    by_domain: dict[str, list[str]] = defaultdict(list)
    actions: dict[str, str] = {}
    for tag, (domain, traj, t, total, _, _) in (samples or SAMPLES).items():
        prompts = [f"### Turn {i}\n**Action:**\nact {traj}-{i} ({tag if i == t else 'history'})"
                   for i in range(1, total + 1)]
        responses = [f"{OBS}real observation {traj}-{i}" for i in range(1, total + 1)]
        record = {"task": domain, "id": traj, "prompt": prompts, "response": responses,
                  "current_prompt": prompts[t - 1], "system_str": f"You simulate {domain}." if tag != "S7" else "",
                  "turn_idx": t, "total_turns": total}
        by_domain[domain].append(json.dumps(record))
        actions[prompts[t - 1]] = tag
    for domain, lines in by_domain.items():
        (directory / f"{domain}_test.jsonl").write_text("\n".join(lines) + "\n")
    return actions


class ScriptedServer:
    """Loopback chat-completions server: model ``wm`` answers by the current action, ``judge`` by the
    prediction's tag, the k-th judge request of a sample getting its k-th scripted answer (or, with
    ``own_judge_answer``, always that answer: our own judge prompt's format)."""

    def __init__(self, actions: dict[str, str], own_judge_answer: str = "", samples: dict | None = None) -> None:
        self.actions, self.own_judge_answer = actions, own_judge_answer
        self.samples = samples or SAMPLES
        self.requests: list[dict] = []
        self.attempts: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                message = outer.answer(body)
                data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
                                   "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def answer(self, body: dict) -> dict:
        messages = body.get("messages", [])
        with self.lock:
            self.requests.append(body)  # the whole body: every field a client sends is compared
            if body.get("model") == "wm":
                reply = self.samples[self.actions[messages[-1]["content"]]][4]
                out = {"role": "assistant", "content": reply["content"]}
                if reply.get("reasoning"):
                    out["reasoning_content"] = reply["reasoning"]
                return out
            if self.own_judge_answer:
                return {"role": "assistant", "content": self.own_judge_answer}
            found = re.search(r"PRED[-\" :]+(S\d)", messages[-1]["content"])
            tags = [t for t in re.findall(r"\((\w+)\)", messages[-1]["content"]) if t in self.samples]
            assert found or tags, "a judge request without a scripted prediction"
            tag = found.group(1) if found else tags[0]  # a prediction without its tag ('No output'): the action's
            answers = self.samples[tag][5]
            k = self.attempts[tag]
            self.attempts[tag] += 1
            return {"role": "assistant", "content": answers[min(k, len(answers) - 1)]}

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.attempts.clear()

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


DISPLAY = {"MCP": "mcp", "Search": "search", "Terminal": "terminal", "SWE": "swe", "Android": "android",
           "Web": "web", "OS": "os"}


def parse_eval_py_scores(text: str) -> dict:
    """The numbers official ``eval.py`` prints (``aggregate_scores``): per domain valid/failed counts and
    dimension scores, and Overall with its sample counts."""
    out: dict = {"domains": {}}
    current = None
    for line in text.splitlines():
        head = re.match(r"--- (.+) \((\d+)/(\d+) valid, (\d+) failed\) ---", line)
        if head:
            current = DISPLAY.get(head.group(1), head.group(1).lower())
            out["domains"][current] = {"valid": int(head.group(2)), "n": int(head.group(3)),
                                       "failed": int(head.group(4)), "dimensions": {}}
            continue
        dim = re.match(r"\s+(\w+): (-?\d+\.\d+)$", line)
        if dim and current:
            out["domains"][current]["dimensions"][dim.group(1)] = float(dim.group(2))
        overall = re.match(r"Overall: (-?\d+\.\d+)", line)
        if overall:
            out["overall"] = float(overall.group(1))
        counts = re.match(r"Total samples: (\d+), Valid: (\d+), Failed: (\d+)", line)
        if counts:
            out["n"], out["valid"], out["failed"] = map(int, counts.groups())
    return out
