"""Our request bodies against the official clients', captured by one loopback server.

- Terminus-2: harbor 0.25.0's own ``LiteLLM`` client (in ``.venv-harbor``) and our policy request for
  a Terminus-2 turn; without ``.venv-harbor`` the comparison is with the fields harbor's source
  declares (model, messages: no sampling field is set by default), and the test says so.
- AgentWorldBench: the official protocol's world-model and judge requests against the fields of
  eval.py's ``chat.completions.create`` calls (``EVAL_PY_REQUEST_FIELDS``); with a checkout
  (``AGENTWORLD_ROOT``) ``test_lwm_agentworld_official.py`` compares whole bodies with eval.py's own.
- QwenClawBench: the judge request our grading path sends and the one the checkout's
  ``_call_llm_judge_api`` sends by itself (``$QWENCLAWBENCH_ROOT``'s, else the fixture checkout's).
- Claw-Eval: the checkout's ``LLMJudge.evaluate`` called directly and the same judgement made by a
  task's grader in our sandbox through the relay (``$CLAW_EVAL_ROOT``'s ``src``, else the fixture's).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from _fake_chat import FakeChat

from unified.inference.base import PolicyRequest, SamplingConfig
from unified.inference.openai_backend import OpenAIPolicy

REPO = Path(__file__).resolve().parents[1]
HARBOR_PYTHON = REPO / ".venv-harbor" / "bin" / "python"
MESSAGES = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]


class RecordingServer(FakeChat):
    """The tests' loopback chat endpoint (:class:`FakeChat`) answering ``content`` under each request's own
    model name, and keeping every request body whole (``take()`` hands them over and starts afresh)."""

    def __init__(self) -> None:
        self.content = "final score: 0.5"
        super().__init__(lambda request, n: self.content, model=None)

    def take(self) -> list[dict]:
        out, self.asked = self.asked, []
        return out


@pytest.fixture(scope="module")
def server():
    with RecordingServer() as s:
        yield s


def _ours(url: str, request_fields, sampling=SamplingConfig(), **options) -> dict:
    policy = OpenAIPolicy(f"openai:{url}#policy", sampling, **options)
    try:
        out = policy.generate([PolicyRequest(messages=MESSAGES, request_fields=request_fields)])[0]
    finally:
        policy.close()
    assert not isinstance(out, Exception), out
    return out


def _harbor_body(url: str) -> dict | None:
    """What harbor's LiteLLM client (Terminus-2's default, no temperature set) sends; None without harbor."""
    if not HARBOR_PYTHON.is_file():
        return None
    code = ("import asyncio, json, sys\nfrom harbor.llms.lite_llm import LiteLLM\n"
            f"llm = LiteLLM(model_name='openai/policy', api_base={url!r})\n"
            "m = json.loads(sys.argv[1])\n"
            "asyncio.run(llm.call(prompt=m[-1]['content'], message_history=m[:-1]))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="unused", NO_PROXY="127.0.0.1")
    done = subprocess.run([str(HARBOR_PYTHON), "-c", code, json.dumps(MESSAGES)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {}


def test_terminus_2_requests_are_harbors(server):
    from evaluators.terminal_bench.terminus import differences, user_sampling

    server.take()
    harbor = _harbor_body(server.url)
    if harbor is not None:
        (official,) = server.take()
    else:  # harbor's source: LiteLLM.call sends model + messages (+ temperature/reasoning_effort only when set)
        official = {"model": "policy", "messages": MESSAGES}
    # the run's default sampling: nothing is added, the body is harbor's byte for byte
    _ours(server.url, tuple(user_sampling(SamplingConfig())))
    (ours,) = server.take()
    assert ours == official, (ours, official)
    assert set(ours) == {"model", "messages"}
    # a user's sampling is sent and named with its values
    chosen = SamplingConfig(max_new_tokens=2048, temperature=0.7)
    extras = user_sampling(chosen)
    assert extras == {"max_tokens": 2048, "temperature": 0.7}
    _ours(server.url, tuple(extras), chosen)
    (sent,) = server.take()
    assert {k: v for k, v in sent.items() if k not in official} == extras
    reasons = differences([{"agent": "terminus_2", "request_extras": extras, "harbor_version": "0.25.0"}])
    assert any('"max_tokens": 2048' in r and '"temperature": 0.7' in r for r in reasons), reasons
    assert not any("request" in r for r in differences([{"agent": "terminus_2", "request_extras": {}}]))


def test_agentworldbench_official_requests_are_eval_pys(server):
    from unified.lwm import official
    from unified.lwm.evaluation import WorldModel
    from unified.inference.judge import make_judge

    server.take()
    options = official.eval_py_endpoint_options()
    assert options["timeout_s"] == 600.0 and options["max_retries"] == 2  # the openai SDK's defaults eval.py gets
    world = WorldModel(f"openai:{server.url}#wm", official_request=True)
    assert world.predict([MESSAGES]) == ["final score: 0.5"]
    judge = make_judge(f"openai:{server.url}#judge", max_tokens=32768, temperature=0.6, **options)
    judge.complete([MESSAGES])
    bodies = server.take()
    assert [sorted(b) for b in bodies] == [["max_tokens", "messages", "model", "temperature"]] * 2
    assert all(b["max_tokens"] == 32768 and b["temperature"] == 0.6 and b["messages"] == MESSAGES for b in bodies)
    # the own protocol (no checkout) keeps our fields; an explicit --thinking is sent and named
    WorldModel(f"openai:{server.url}#wm", official_request=True, thinking=False).predict([MESSAGES])
    (thought,) = server.take()
    assert thought["chat_template_kwargs"] == {"enable_thinking": False}


def test_qwenclawbench_judge_request_is_the_checkouts(server):
    from evaluators.qwenclawbench import official

    checkout = Path(os.environ.get("QWENCLAWBENCH_ROOT") or REPO / "tests" / "fixtures" / "qwenclawbench" / "fixture_checkout")
    if not (checkout / "scripts" / "lib_grading.py").is_file():
        checkout = REPO / "tests" / "fixtures" / "qwenclawbench" / "fixture_checkout"
    lib = official.load_lib_grading(checkout)
    server.take()
    lib._call_llm_judge_api(prompt="PROMPT", model="judge", base_url=server.url, api_key="k")
    (theirs,) = server.take()
    verdict = official.judge(lib, "PROMPT", base_url=server.url, model="judge", api_key="k")
    (ours,) = server.take()
    assert verdict["total"] == 0.5 and ours == theirs


def _claw_checkout(tmp_path: Path) -> Path:
    """A real Claw-Eval checkout's ``src`` when ``$CLAW_EVAL_ROOT`` has one, else the fixture checkout's
    stand-in (our own code with the same module paths), with one judged task of ours added."""
    import shutil

    from security.test_claw_judge_echo import CLAW_CHECKOUT, JUDGED_GRADER

    root = Path(os.environ.get("CLAW_EVAL_ROOT") or CLAW_CHECKOUT)
    if not (root / "src" / "claw_eval" / "graders" / "llm_judge.py").is_file():
        root = CLAW_CHECKOUT
    checkout = tmp_path / "checkout"
    shutil.copytree(root / "src", checkout / "src")
    task_dir = checkout / "tasks" / "fixture_T90_judged"
    task_dir.mkdir(parents=True)
    (task_dir / "task.yaml").write_text("task_id: fixture_T90_judged\ntask_name: Fixture judged haiku\n"
                                        "category: writing\nprompt: {text: 'Write a haiku about rain.', language: en}\n"
                                        "environment: {timeout_seconds: 60, max_turns: 2}\n")
    (task_dir / "grader.py").write_text(JUDGED_GRADER)
    return checkout


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="the grader's sandbox needs bubblewrap")
def test_claw_eval_judge_request_is_the_checkouts(server, tmp_path):
    """The checkout's ``LLMJudge.evaluate`` called directly (its own OpenAI client) and the same judgement
    made by the task's grader in our sandbox, through the relay: one body, byte for byte."""
    import sys
    import types

    from evaluators.claw_eval.grading import build_trace, run_grader
    from unified.types import Episode, Message

    checkout = _claw_checkout(tmp_path)
    answer = "A haiku: rain on the roof"
    server.take()
    server.content = '{"score": 0.5, "reasoning": "a haiku"}'  # parsed at once by the checkout's judge
    code = ("import sys; sys.path.insert(0, sys.argv[1] + '/src')\n"
            "from claw_eval.graders.llm_judge import LLMJudge\n"
            "LLMJudge(model_id='judge', api_key='k', base_url=sys.argv[2]).evaluate("
            "'Write a haiku about rain.', sys.argv[3], '', 'Score 1.0 only for a haiku.')\n")
    conversation = f"[user] Write a haiku about rain.\n[assistant] {answer}"
    done = subprocess.run([sys.executable, "-c", code, str(checkout), server.url, conversation], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_PROXY": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-2000:]
    official = server.take()[0]
    episode = Episode(benchmark="claw_eval", task_id="fixture_T90_judged",
                      messages=[Message("user", "Write a haiku about rain."), Message("assistant", answer)])
    graded = run_grader(checkout=checkout, task_dir=checkout / "tasks" / "fixture_T90_judged",
                        trace=build_trace(episode, [], {}), env_snapshot=None, timeout_s=120,
                        judge_config=types.SimpleNamespace(base_url=server.url, api_key="k", model="judge"))
    assert "scores" in graded, graded
    server.content = "final score: 0.5"
    ours = server.take()[0]
    assert ours == official
    assert {"model", "messages", "temperature", "max_tokens"} <= set(ours)
