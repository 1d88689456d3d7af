"""Claw-Eval's web-page tasks: Playwright drives Debian's Chromium when Playwright's own browser is absent
(evaluators.claw_eval.browser). The task below is our own, written in Claw-Eval's format (fixture_ prefix):
a snapshot command runs a recording script that screenshots /workspace/output.html with Playwright."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from evaluators.claw_eval.browser import browsers_dir_for, playwright_setup
from unified.types import ToolCall
from _requires import needs_bwrap

CHECKOUT = Path(__file__).parent / "fixtures" / "claw_eval" / "fixture_checkout"

RECORD = """from playwright.sync_api import sync_playwright
import sys
with sync_playwright() as p:
    b = p.chromium.launch(headless=True)  # no browser path, as the benchmark's take_recording.py
    page = b.new_page(viewport={"width": 320, "height": 200})
    page.goto("file:///workspace/output.html")
    page.screenshot(path="/workspace/frames/frame_000.png")
    print(page.inner_text("#x"), b.version)
    b.close()
"""
TASK_YAML = """task_id: fixture_W01_page
task_name: Fixture web page
category: multimodal_webpage
tags: [multimodal]
prompt: {text: "Write /workspace/output.html.", language: en}
tools: []
tool_endpoints: []
sandbox_files: []
sandbox_grader_files: [fixtures/fixture_record.py]
env_snapshot_commands: ["python /workspace/fixtures/fixture_record.py"]
env_snapshot_files: [/workspace/frames/*.png]
environment: {timeout_seconds: 300, max_turns: 5, env_snapshot_timeout: 120}
judge_rubric: ""
"""


def test_the_browser_folder_names_what_playwright_looks_for(tmp_path):
    package = tmp_path / "playwright"
    (package / "driver" / "package").mkdir(parents=True)
    (package / "driver" / "package" / "browsers.json").write_text(json.dumps({"browsers": [
        {"name": "chromium", "revision": "1255"}, {"name": "chromium-headless-shell", "revision": "1255"},
        {"name": "firefox", "revision": "1572"}]}))
    out = browsers_dir_for(package, "/usr/bin/chromium", tmp_path / "cache")
    shell = out / "chromium_headless_shell-1255" / "chrome-headless-shell-linux64" / "chrome-headless-shell"
    assert os.readlink(shell) == "/usr/bin/chromium"
    assert os.readlink(out / "chromium-1255" / "chrome-linux64" / "chrome") == "/usr/bin/chromium"
    assert not any(p.name.startswith("firefox") for p in out.iterdir())
    assert browsers_dir_for(package, "/usr/bin/chromium", tmp_path / "cache") == out  # idempotent


@pytest.mark.slow
def test_a_web_page_task_gets_its_screenshots_in_the_sandbox(tmp_path):
    playwright_setup.cache_clear()
    setup = playwright_setup()
    if not setup.ok:
        pytest.skip(setup.missing)
    from evaluators.claw_eval import ClawEvalAdapter

    (tmp_path / "mock_services").mkdir()
    (tmp_path / "src" / "claw_eval").mkdir(parents=True)
    task_dir = tmp_path / "tasks" / "fixture_W01_page"
    (task_dir / "fixtures").mkdir(parents=True)
    (task_dir / "task.yaml").write_text(TASK_YAML)
    (task_dir / "grader.py").write_text("# judges the frames (not run by this test)\n")
    (task_dir / "fixtures" / "fixture_record.py").write_text(RECORD)
    adapter = ClawEvalAdapter(root=str(tmp_path))
    task = adapter.tasks()[0]
    assert task.skip_reason is None
    env = adapter.open(task)
    env.start()
    try:
        env.step([ToolCall("Write", {"file_path": "/workspace/output.html",
                                     "content": "<p id=x>x</p><script>x.textContent='js-ran'</script>"}, "w")])
        snap = env.env_snapshot()
    finally:
        env.stop()
    cmd = snap["cmd:python /workspace/fixtures/fixture_record.py"]
    assert cmd["exit_code"] == 0 and cmd["stdout"].startswith("js-ran "), cmd
    png = base64.b64decode(snap["file:/workspace/frames/frame_000.png"]["content"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert env.metadata["browser"] == setup.browser and env.metadata["address_space_limit"]


FAKE_PLAYWRIGHT = {"__init__.py": "", "sync_api.py": "def sync_playwright():\n    raise RuntimeError('fixture')\n",
                   "driver/package/browsers.json": json.dumps({"browsers": [{"name": "chromium", "revision": "1"}]})}


@needs_bwrap
def test_playwright_importable_on_the_host_only_is_a_skip_with_the_fix(tmp_path, monkeypatch):
    """A host whose python3 imports playwright through PYTHONPATH, with Playwright's own Chromium in
    ~/.cache: the sandbox sees neither that path nor the host's environment, so the check there
    fails and the web-page tasks are skipped with the fix (they ran and scored 0.2 before)."""
    for rel, text in FAKE_PLAYWRIGHT.items():
        (tmp_path / "site" / "playwright" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / "playwright" / rel).write_text(text)
    (tmp_path / "home" / ".cache" / "ms-playwright" / "chromium-1").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PLAYWRIGHT_BROWSERS_PATH", raising=False)
    playwright_setup.cache_clear()
    try:
        setup = playwright_setup()
    finally:
        playwright_setup.cache_clear()
    assert not setup.ok
    assert "the sandbox's does not" in setup.missing and "pip install" in setup.missing


@needs_bwrap
def test_playwrights_own_browser_folder_is_visible_inside_the_sandbox(tmp_path):
    from evaluators.claw_eval.browser import PlaywrightSetup, check_in_sandbox

    own = tmp_path / "ms-playwright"
    (own / "chromium-1234" / "chrome-linux").mkdir(parents=True)
    (own / "chromium-1234" / "chrome-linux" / "chrome").write_text("#!/bin/sh\n")
    setup = PlaywrightSetup(browser="playwright's own chromium", browsers_dir=own)
    probe = ("import os\nroot = os.environ['PLAYWRIGHT_BROWSERS_PATH']\n"
             "print('BROWSER-OK' if os.path.isfile(root + '/chromium-1234/chrome-linux/chrome') else 'absent: ' + root)\n")
    assert check_in_sandbox(setup, probe, memory_mb=512, timeout_s=60) == ""
    assert check_in_sandbox(PlaywrightSetup(browser="x"), probe, memory_mb=512, timeout_s=60).startswith("exit 1:")


@needs_bwrap
def test_a_failed_snapshot_command_is_graded_with_its_output_as_the_official_grader_is(tmp_path):
    import shutil

    from evaluators.claw_eval import ClawEvalAdapter
    from unified.types import Episode, Message

    checkout = tmp_path / "checkout"
    shutil.copytree(CHECKOUT, checkout)
    yaml = checkout / "tasks" / "fixture_T01_notes" / "task.yaml"
    yaml.write_text(yaml.read_text().replace('"wc -c < /workspace/fixtures/notes.json"',
                                             '"python -c \'import no_such_module\'"'))
    adapter = ClawEvalAdapter(root=str(checkout), judge="openai:http://127.0.0.1:9/v1#never-asked")
    task = next(t for t in adapter.tasks() if t.id == "fixture_T01_notes")
    try:
        with adapter.open(task) as env:
            episode = Episode(benchmark="claw_eval", task_id=task.id,
                              messages=[Message("user", env.first_user_message), Message("assistant", "2")])
            result = adapter.score(task, episode, env)
    finally:
        adapter.stop_services()
    assert result.error is None and result.details["completion"] is not None  # graded, not an error worth 0
    (failed,) = result.details["snapshot_failed"]
    assert failed["command"] == "python -c 'import no_such_module'" and failed["exit_code"] == 1
    assert "No module named" in failed["why"]
    # the words of a missing module are kept as evidence, never a reason by themselves to leave the trial out
    # (a script the agent wrote can print them)
    assert result.details["infrastructure_unconfirmed"] == ["ModuleNotFoundError: No module named 'no_such_module'"]
