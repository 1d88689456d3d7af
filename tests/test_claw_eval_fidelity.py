"""Claw-Eval as the official harness runs it: `python` in the sandbox, cross-task fixtures,
programs the official image has, the judge's retry rule, Avg@k by the run's trial count."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import pytest

from evaluators.claw_eval import ClawEvalAdapter
from evaluators.claw_eval.tasks import ClawTask, fixture_source, missing_programs, skip_reason
from unified.benchmarks.contract import RunContext
from unified.types import Episode, EpisodeResult, Message, ToolCall
from _fake_chat import FakeChat
from _requires import needs_bwrap

CHECKOUT = Path(__file__).parent / "fixtures" / "claw_eval" / "fixture_checkout"


def _task(adapter, task_id):
    return next(t for t in adapter.tasks() if t.id == task_id)


@pytest.fixture
def judge_server():
    """Start a loopback judge answering ``answers`` in turn (the last one repeats): (spec, server)."""
    with contextlib.ExitStack() as stack:
        def start(answers):
            chat = stack.enter_context(FakeChat(lambda request, n: answers[min(n, len(answers) - 1)], model="judge"))
            return chat.spec(), chat
        yield start


def _score_c01(spec):
    adapter = ClawEvalAdapter(root=str(CHECKOUT), judge=spec, user_model=spec)
    task = _task(adapter, "fixture_C01_multi_turn")
    try:
        with adapter.open(task) as env:
            episode = Episode(benchmark="claw_eval", task_id=task.id, messages=[
                Message("user", env.first_user_message), Message("assistant", "Where, when, what budget?")])
            return adapter.score(task, episode, env)
    finally:
        adapter.stop_services()


@needs_bwrap
def test_judge_that_fails_once_then_answers_gives_the_official_score(judge_server):
    spec, handler = judge_server(["I would rather not say.", '{"score": 0.8, "reasoning": "asked"}'])
    result = _score_c01(spec)
    assert result.error is None, result.details.get("grader_log")
    assert result.details["communication"] == 0.8 and result.details["completion"] == 0.8
    assert result.score == result.details["official_task_score"] == pytest.approx(0.8 * 0.8 + 0.2 * 1.0)
    assert len(handler.asked) == 2 and result.details["judge_stats"]["memo_hits"] == 0


@needs_bwrap
def test_judge_that_never_answers_is_a_recorded_error(judge_server):
    spec, handler = judge_server(["no score here"])
    result = _score_c01(spec)
    assert result.error is not None and result.error.startswith("grader:")
    assert len(handler.asked) == 31  # the checkout's 30 retries, each a fresh request


@needs_bwrap
def test_python_is_on_path_in_the_sandbox():
    adapter = ClawEvalAdapter(root=str(CHECKOUT), judge="openai:http://127.0.0.1:9/v1#nobody")
    task = _task(adapter, "fixture_T01_notes")
    try:
        with adapter.open(task) as env:
            obs = env.step([ToolCall("Bash", {"command": "python -c 'print(6*7)'"}, id="a")])
            assert "42" in obs[0].content, obs[0].content
            snap = dataclasses.replace(env.task, env_snapshot_commands=["python -c 'print(2+3)'"])
            env.task = snap
            assert env.env_snapshot()["cmd:python -c 'print(2+3)'"]["stdout"].strip() == "5"
    finally:
        adapter.stop_services()


def _fixture_task(**changes) -> ClawTask:
    adapter = ClawEvalAdapter(root=str(CHECKOUT))
    return dataclasses.replace(ClawTask(**_task(adapter, "fixture_T01_notes").payload), **changes)


def test_fixture_paths_into_another_tasks_folder_resolve_from_the_checkout_root():
    shared = "tasks/fixture_T01_notes/fixtures/notes.json"
    task = _fixture_task(dir=str(CHECKOUT / "tasks" / "fixture_C01_multi_turn"), sandbox_files=[shared])
    assert fixture_source(task, shared) == CHECKOUT / shared
    assert skip_reason(task, env={}) is None
    missing = _fixture_task(sandbox_files=["tasks/nowhere/x.json"])
    assert "fixture file(s) not in the checkout" in skip_reason(missing, env={})


def test_a_missing_text_fixture_is_described_as_what_it_is():
    """T091 lacks its blog post (fixtures/docs/ai_blog.txt) in the GitHub checkout: the skip names a
    text file, not a large media file, and where the complete fixtures are."""
    task = _fixture_task(sandbox_files=["fixtures/docs/ai_blog.txt"])
    reason = skip_reason(task, env={})
    assert reason.startswith("1 fixture file(s) not in the checkout (1 text file), e.g. fixtures/docs/ai_blog.txt")
    assert "media" not in reason and "Hugging Face dataset claw-eval/Claw-Eval (data/fixtures.tar.gz)" in reason
    videos = skip_reason(_fixture_task(sandbox_files=["fixtures/a.mp4", "fixtures/b.mp4", "fixtures/c.txt"]), env={})
    assert videos.startswith("3 fixture file(s) not in the checkout (2 video files, 1 text file)")


def test_a_task_needing_a_missing_program_is_a_skip_naming_it(tmp_path):
    (tmp_path / "task.yaml").write_text("env_snapshot_commands: ['ffprobe -v error out.mp4']\n")
    (tmp_path / "grader.py").write_text("import subprocess  # runs ffmpeg on the result\n")
    task = _fixture_task(dir=str(tmp_path), sandbox_files=[])
    assert missing_programs(task, which=lambda name: None) == ["ffmpeg", "ffprobe"]
    assert missing_programs(task, which=lambda name: f"/usr/bin/{name}") == []


def _results(trials_per_task):
    return [EpisodeResult(benchmark="claw_eval", task_id=t, trial=i, score=1.0, details={"split": "general"})
            for t, n in trials_per_task.items() for i in range(n)]


def test_avg_at_k_follows_the_runs_asked_for_and_labels_fewer_than_the_protocol():
    adapter = ClawEvalAdapter(root=str(CHECKOUT))
    one = adapter.aggregate(_results({"a": 1, "b": 1}), run=RunContext(runs=1))
    assert one["metric"].startswith("Avg@1 (%), protocol Avg@3 over 2 tasks run") and one["score"] == 100.0
    assert "pass^1" in one and not one["comparable"]
    assert any("fewer trials than the protocol's 3" in r for r in one["not_comparable_because"])
    # a missing trial counts 0 (protocol), not padded to the most trials seen
    three = adapter.aggregate(_results({"a": 2, "b": 2}), run=RunContext(runs=3))
    assert three["metric"].startswith("Avg@3 (%) over 2 tasks") and three["score"] == pytest.approx(200 / 3)
    assert three["pass^3"] == 0.0


@needs_bwrap
def test_system_prompt_tool_specs_and_simulated_user_are_the_checkouts(judge_server, tmp_path):
    spec, handler = judge_server(["Lisbon, in May.", "[DONE]"])
    adapter = ClawEvalAdapter(root=str(CHECKOUT), judge=spec, user_model=spec)
    task = _task(adapter, "fixture_C01_multi_turn")
    try:
        with adapter.open(task) as env:
            assert env.metadata["prompts"] == "checkout"
            assert env.system_prompt.startswith("FIXTURE SYSTEM PROMPT (built by the checkout)\ntask=fixture_C01_multi_turn")
            assert env.system_prompt.endswith("The user may not give every detail at first: ask.")  # the task's suffix
            assert {t.name: t.description for t in env.tools}["Bash"] == "FIXTURE Bash spec."
            episode = Episode(benchmark="claw_eval", task_id=task.id, messages=[
                Message("user", env.first_user_message), Message("assistant", "Where and when?")])
            assert env.next_user_turn(episode) == "[user_agent]\nLisbon, in May."
            sent = handler.asked[0]
            assert sent["max_tokens"] == 77 and sent["temperature"] == 0.3
            assert sent["messages"][0]["content"].startswith("FIXTURE USER. Persona: You want a 3-day trip")
            episode.messages += [Message("user", "[user_agent]\nLisbon, in May."), Message("assistant", "Booked.")]
            assert env.next_user_turn(episode) is None and env.user_done and env.user_rounds == 1
    finally:
        adapter.stop_services()
    # a checkout that cannot build its prompt: ours, and the result says so
    import shutil
    copy = tmp_path / "checkout"
    shutil.copytree(CHECKOUT, copy)
    (copy / "src" / "claw_eval" / "runner" / "system_prompt.py").unlink()
    fallback = ClawEvalAdapter(root=str(copy), judge=spec)
    try:
        with fallback.open(_task(fallback, "fixture_T01_notes")) as env:
            assert env.metadata["prompts"].startswith("ours (the checkout's prompt builder failed")
    finally:
        fallback.stop_services()


def test_a_task_with_prompt_attachments_is_a_skip_not_a_silent_low_score():
    task = _fixture_task(attachments=["fixtures/notes.json"])
    assert skip_reason(task, env={}).startswith(
        "prompt attachments (fixtures/notes.json) must reach the model as text blocks of the first message")


def test_a_program_used_by_a_script_the_snapshot_commands_run_is_found(tmp_path):
    # our own task in the format of the multimodal web-page tasks: the snapshot command runs a
    # recording script (a sandbox grader file) that drives a browser through Playwright
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "fixture_record.py").write_text(
        "from playwright.sync_api import sync_playwright  # screenshots of output.html\n")
    (tmp_path / "task.yaml").write_text("sandbox_grader_files: [fixtures/fixture_record.py]\n")
    (tmp_path / "grader.py").write_text("# judges the frames in /workspace/grading_frames\n")
    task = _fixture_task(dir=str(tmp_path), sandbox_files=[], sandbox_grader_files=["fixtures/fixture_record.py"],
                         env_snapshot_commands=["python /workspace/fixtures/fixture_record.py "
                                                "file:///workspace/output.html --frames 10"])
    assert missing_programs(task, which=lambda name: f"/usr/bin/{name}", has_playwright=lambda: False) == ["playwright"]
    assert missing_programs(task, which=lambda name: None, has_playwright=lambda: True) == []
    from evaluators.claw_eval.browser import playwright_setup

    playwright_setup.cache_clear()
    if not playwright_setup().ok:  # the reason says what is missing and how to provide it
        reason = skip_reason(task, env={})
        assert reason.startswith("needs Playwright with a browser") and "screenshots" in reason
        assert "pip install" in reason or "apt-get install chromium" in reason
