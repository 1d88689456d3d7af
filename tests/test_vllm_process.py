"""The vLLM server's process handling, with real processes (no vLLM needed): the watchdog that stops a
server's process group when its parent is killed with -9, start-up failures that show the log, and the
one-line error when vLLM is not installed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unified.inference.vllm_server import WATCHDOG, VLLMServer, VLLMUnavailable, vllm_python
from unified.inference.watchdog import group_alive

PARENT = f"""
import subprocess, sys, time
# a "server": a session of its own with a child of its own (like vLLM's API server and engine core)
server = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], start_new_session=True)
subprocess.Popen([sys.executable, "-S", {str(WATCHDOG)!r}, str(__import__("os").getpid()), str(server.pid), "2"],
                 start_new_session=True)
print(server.pid, flush=True)
time.sleep(300)
"""


def _wait_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.1)
    return False


def test_watchdog_stops_the_server_group_when_the_parent_is_killed_with_9():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    pgid = int(parent.stdout.readline())
    try:
        time.sleep(0.5)
        assert group_alive(pgid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_gone(pgid, 10), "the server group outlived its parent"
    finally:
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_watchdog_leaves_the_group_of_a_living_parent_alone_and_ends_with_it():
    server = subprocess.Popen(["sleep", "300"], start_new_session=True)
    watchdog = subprocess.Popen([sys.executable, "-S", str(WATCHDOG), str(os.getpid()), str(server.pid), "2"],
                                start_new_session=True)
    try:
        time.sleep(1.0)
        assert server.poll() is None and watchdog.poll() is None
        server.terminate()
        server.wait()
        assert watchdog.wait(timeout=10) == 0  # the group ended by itself: the watchdog goes too
    finally:
        for p in (server, watchdog):
            if p.poll() is None:
                p.kill()


def test_a_server_that_dies_at_start_up_shows_its_log_and_leaves_nothing(tmp_path):
    """This interpreter has no vllm: the real start-up fails, and the error carries the log's end."""
    log = tmp_path / "vllm.log"
    server = VLLMServer(tmp_path, python=sys.executable, log_path=log, progress_every_s=1)
    with pytest.raises(RuntimeError, match=r"(?s)vLLM server exited with 1 during start-up.*No module named"):
        server.start()
    assert "-m vllm.entrypoints.openai.api_server" in log.read_text()  # the command heads the log
    assert not group_alive(server.process.pid)
    assert server.watchdog.wait(timeout=10) is not None


def test_missing_vllm_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("UNIFIED_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(VLLMUnavailable, match="UNIFIED_VLLM_PYTHON=.*nope/python is not an executable"):
        vllm_python()
    monkeypatch.delenv("UNIFIED_VLLM_PYTHON")
    monkeypatch.setattr("unified.inference.vllm_server.REPO_ROOT", Path(tmp_path))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(VLLMUnavailable, match="run `make vllm`"):
        vllm_python()


def test_raw_completion_decodes_like_the_in_process_engine(tiny_checkpoint):
    """vLLM's generated ids become the same text the in-process engine writes: final EOS dropped,
    markup and special tokens kept."""
    from unified.inference.vllm_backend import raw_completion
    from unified.models.checkpoint import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_checkpoint))
    text = "<think>\nhm\n</think>\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert raw_completion(tokenizer, ids + [tokenizer.eos_token_id]) == text
    assert raw_completion(tokenizer, ids) == text  # cut by max_tokens: nothing to drop


def test_a_saved_checkpoint_is_served_with_the_parser_its_template_writes(tmp_path):
    """A checkpoint the warmup saved from the embedded model is a directory of kind "path": it keeps the
    embedded model's Qwen3.5-style template, so it gets ``qwen3_coder`` (before: no parser, and every
    tool request of ``make demo``'s eval of the warmed-up weights was a 400 "auto tool choice requires
    --enable-auto-tool-choice")."""
    import json

    from unified.inference.vllm_server import template_tool_parser, tool_parser_for
    from unified.models.chat_template import qwen35_chat_template

    saved, hermes, plain, old_style, bare = (tmp_path / n for n in ("saved", "hermes", "plain", "old", "bare"))
    for d in (saved, hermes, plain, old_style, bare):
        d.mkdir()
    (saved / "chat_template.jinja").write_text(qwen35_chat_template())
    (hermes / "chat_template.jinja").write_text('<tool_call>\n{"name": {{ name }}}\n</tool_call>')
    (plain / "chat_template.jinja").write_text("{{ messages[0].content }}")
    (old_style / "tokenizer_config.json").write_text(json.dumps({"chat_template": qwen35_chat_template()}))
    assert tool_parser_for(saved, "path") == "qwen3_coder" == template_tool_parser(old_style)
    assert template_tool_parser(hermes) == "hermes"
    assert template_tool_parser(plain) is None and template_tool_parser(bare) is None
    assert tool_parser_for(bare, "embedded") == "qwen3_coder"
