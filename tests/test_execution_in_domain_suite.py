"""``python -m unified.eval --suite in_domain`` on the fixture tasks ($UNIFIED_FIXTURES_DIR) with the
local backend: all four in-domain benchmarks run and the gold replay scores 100% on each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _requires import HARBOR_REASON, needs_local, needs_tmux

pytestmark = [pytest.mark.slow,
              needs_local, needs_tmux]


def test_in_domain_suite_runs_all_four_benchmarks_on_the_fixtures(tmp_path):
    pytest.importorskip("swebench", reason="swebench is in the bench extra (make setup)")
    root = Path(__file__).resolve().parents[1]
    # WIDESEARCH_JUDGE=none: the gold tables need no alignment, and the default (the embedded model on loopback)
    # would only make this test slower
    env = dict(os.environ, UNIFIED_FIXTURES_DIR=str(root / "tests" / "fixtures"), UNIFIED_EXEC_BACKEND="local",
               WIDESEARCH_JUDGE="none")
    out = tmp_path / "run"
    # Terminal-Bench's default agent (Terminus-2) needs .venv-harbor (make harbor); without it the suite runs
    # the tool-calling option, which types the same oracle
    agent = ["--set", "benchmarks.terminal_bench_2.agent=tool_calling"] if HARBOR_REASON else []
    proc = subprocess.run([sys.executable, "-m", "unified.eval", "--suite", "in_domain", "--model", "gold", "--limit",
                           "2", "--runs", "1", "--out", str(out), *agent], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]
    assert set(summary) == {"terminal_bench_2", "swe_bench_verified", "swe_bench_pro", "widesearch"}
    for name, entry in summary.items():
        assert entry["status"] == "ok" and entry["errors"] == 0, (name, entry)
        assert entry["aggregate"]["score"] == 100.0, (name, entry["aggregate"])
    assert summary["widesearch"]["aggregate"]["search_backends"] == ["local_corpus"]
    assert summary["terminal_bench_2"]["aggregate"]["backends"] == ["local"]
