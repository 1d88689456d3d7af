"""QwenClawBench judged by the checkout's own code (loaded at runtime), external dependencies run as officially."""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evaluators.qwenclawbench import QwenClawBenchAdapter, external_skip, official
from evaluators.qwenclawbench.tasks import QCBTask
from unified.types import EpisodeResult
from _requires import needs_bwrap

CHECKOUT = Path(__file__).parent / "fixtures" / "qwenclawbench" / "fixture_checkout"


class _Judge(BaseHTTPRequestHandler):
    """Fails the first request with HTTP 500, then answers ``answer``; keeps the request bodies."""

    answer = ""
    bodies: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.bodies.append(body)
        if len(self.bodies) == 1:
            self.send_response(500)
            self.end_headers()
            return
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": self.answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def judge_url():
    handler = type("Judge", (_Judge,), {"answer": "Looks fine.\nFinal score: 0.9", "bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()


def _qt(adapter, index=0) -> QCBTask:
    return QCBTask(**adapter.tasks()[index].payload)


TRANSCRIPT = [{"type": "message", "message": {"role": "assistant", "content": [
    {"type": "toolCall", "name": "exec", "arguments": {"command": "ls"}}]}}]


def test_judge_prompt_request_parser_and_retry_are_the_checkouts(judge_url):
    url, handler = judge_url
    adapter = QwenClawBenchAdapter(root=str(CHECKOUT), judge=f"openai:{url}#judge")
    qt = _qt(adapter)
    judged = adapter._judge(qt, TRANSCRIPT)
    lib = official.load_lib_grading(CHECKOUT)
    assert judged["protocol"] == "checkout" and judged["attempts"] == 2  # the endpoint failure was retried
    assert judged["total"] == 0.9 and judged["parsed"]  # the checkout's parser read the "final score" line
    sent = handler.bodies[-1]
    assert sent["max_tokens"] == 4321 and sent["messages"][0]["content"] == official.judge_prompt(lib, qt, TRANSCRIPT)
    assert sent["messages"][0]["content"].startswith("FIXTURE JUDGE PROMPT") and "CALL exec" in sent["messages"][0]["content"]


def test_judge_that_never_answers_is_an_error_after_the_checkouts_retries():
    adapter = QwenClawBenchAdapter(root=str(CHECKOUT), judge="openai:http://127.0.0.1:9/v1#nobody")
    judged = adapter._judge(_qt(adapter), TRANSCRIPT)
    assert judged["attempts"] == 3 and judged["error"].startswith("judge failed after 3 attempts")
    assert judged["total"] == 0.0


def test_tasks_with_an_external_dependency_run_by_default_as_the_official_harness_does(tmp_path):
    import shutil

    root = tmp_path / "checkout"
    shutil.copytree(CHECKOUT, root)
    task_md = root / "data" / "qwenclawbench-v1.1-100" / "tasks" / "task_fixture_001_sales_total.md"
    task_md.write_text(task_md.read_text().replace("grading_type:", "external_dependency: web\ngrading_type:", 1))
    by_default = {t.id: t for t in QwenClawBenchAdapter(root=str(root)).tasks()}
    assert by_default["task_fixture_001_sales_total"].skip_reason is None
    opted_out = {t.id: t for t in QwenClawBenchAdapter(root=str(root), run_external=False).tasks()}
    reason = opted_out["task_fixture_001_sales_total"].skip_reason
    assert reason.startswith("external_dependency: web") and "run_external=false" in reason
    qt = _qt(QwenClawBenchAdapter(root=str(CHECKOUT)))
    assert external_skip(dataclasses.replace(qt, frontmatter={"external_dependency": "none"})) is None


def test_aggregate_says_what_differs_from_the_official_harness():
    adapter = QwenClawBenchAdapter(root=str(CHECKOUT))
    agg = adapter.aggregate([EpisodeResult(benchmark="qwenclawbench", task_id="t", trial=0, score=1.0,
                                           details={"category": "c", "llm_judge": {"protocol": "checkout"}})])
    assert agg["comparable"] is False
    assert any("not OpenClaw's full tool set" in r for r in agg["not_comparable_because"])
    assert not any("judge prompt/parser: ours" in r for r in agg["not_comparable_because"])


@needs_bwrap
def test_same_transcript_same_automated_score_as_the_checkouts_grader(tmp_path):
    """Our sandboxed run of a task's grade() vs the checkout's ``_grade_automated`` in-process, on
    the same transcript and the same final workspace (task 001: a grader that only reads)."""
    import shutil
    import types

    from evaluators.qwenclawbench.environment import transcript_from_episode
    from evaluators.qwenclawbench.grading import run_automated_checks
    from unified.types import Episode, Message, ToolCall

    adapter = QwenClawBenchAdapter(root=str(CHECKOUT), judge="openai:http://127.0.0.1:9/v1#nobody")
    task = next(t for t in adapter.tasks() if t.id == "task_fixture_001_sales_total")
    qt = QCBTask(**task.payload)
    lib = official.load_lib_grading(CHECKOUT)
    seen = set()
    for final, wrote in (("The total is 250.", "250"), ("I could not do it.", None)):
        with adapter.open(task) as env:
            calls = [ToolCall("write", {"path": "total.txt", "content": wrote}, id="1")] if wrote else []
            obs = env.step(calls) if calls else []
            episode = Episode(benchmark="qwenclawbench", task_id=task.id, messages=[
                Message("user", qt.prompt), Message("assistant", "", tool_calls=calls),
                *[Message("tool", o.content, tool_call_id=c.id, name=c.name) for o, c in zip(obs, calls)],
                Message("assistant", final)])
            transcript = transcript_from_episode(episode)
            ours = run_automated_checks(qt.grading_code, transcript, env.workspace)
            copy = tmp_path / f"ws_{bool(wrote)}"
            shutil.copytree(env.workspace, copy)
        theirs = lib._grade_automated(types.SimpleNamespace(automated_checks=qt.automated_checks),
                                      {"transcript": transcript, "workspace": str(copy)})
        assert ours["score"] == pytest.approx(theirs.score), (final, ours)
        seen.add(round(theirs.score, 6))
    assert len(seen) == 2  # a passing and a failing transcript


def _lib_answering(total):
    """A checkout-shaped judge module (fixture) whose parser hands back ``total``."""
    import types

    return types.SimpleNamespace(JUDGE_API_MAX_RETRIES=1, JUDGE_API_RETRY_BASE_SECONDS=0,
                                 _call_llm_judge_api=lambda **kw: "an answer",
                                 _parse_judge_text_response=lambda text: {"total": total},
                                 _normalize_judge_response=lambda parsed: {"scores": {}, **parsed, "notes": ""})


@pytest.mark.parametrize("total, expected, usable", [(float("nan"), 0.0, False), (float("inf"), 0.0, False),
                                                     (float("-inf"), 0.0, False), ("NaN", 0.0, False),
                                                     (5, 1.0, True), (-3, 0.0, True), (0.4, 0.4, True)])
def test_a_checkout_judge_total_that_is_not_finite_or_out_of_range_never_passes(total, expected, usable):
    judged = official.judge(_lib_answering(total), "prompt", base_url="http://127.0.0.1:9/v1", model="m",
                            api_key="unused")
    assert judged["total"] == expected and judged["parsed"] is usable
    assert ("total_problem" in judged) is (total != 0.4)


def test_a_judge_answering_5_is_clipped_through_the_checkouts_parser(judge_url):
    url, handler = judge_url
    handler.answer = "Final score: 5"
    adapter = QwenClawBenchAdapter(root=str(CHECKOUT), judge=f"openai:{url}#judge")
    judged = adapter._judge(_qt(adapter), TRANSCRIPT)
    assert judged["total"] == 1.0 and "clipped" in judged["total_problem"]


def test_summary_json_is_strict_json(tmp_path):
    from unified.store import write_json_atomic

    write_json_atomic(tmp_path / "summary.json", {"score": float("nan"), "runs": [float("inf"), 0.5]})
    text = (tmp_path / "summary.json").read_text()

    def refuse(token):
        raise AssertionError(f"{token} is not JSON")

    assert json.loads(text, parse_constant=refuse) == {"score": None, "runs": [None, 0.5]}
