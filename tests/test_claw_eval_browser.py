"""Claw-Eval's web-page tasks: Playwright drives Debian's Chromium when Playwright's own browser is absent
(evaluators.claw_eval.browser). The task below is our own, written in Claw-Eval's format (fixture_ prefix):
a snapshot command runs a recording script that screenshots /workspace/output.html with Playwright."""

from __future__ import annotations

import base64
import json
import os

import pytest

from evaluators.claw_eval.browser import browsers_dir_for, playwright_setup
from unified.types import ToolCall

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
