"""measurements/tb2_oracle_census.py: each gold run's cause read back from its own record (no container: the
records are written here in the adapter's results.jsonl format), and ``--tasks`` naming a task that is not there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evaluators.terminal_bench.environment import KEPT_RUNNING, TAMPERED
from measurements.tb2_oracle_census import summarize
from unified.store import append_jsonl
from unified.types import EpisodeResult

REPO = Path(__file__).resolve().parents[1]
PRISTINE = "/root/.cache/unified/pristine/abc-1"


def _run_dir(tmp_path: Path, name: str, score: float, run: str = "", **details) -> Path:
    run_dir = tmp_path / (run or name)
    (run_dir / "terminal_bench_2").mkdir(parents=True, exist_ok=True)
    result = EpisodeResult(benchmark="terminal_bench_2", task_id=name, trial=0, score=score, passed=score >= 1.0,
                           details={"agent_processes": KEPT_RUNNING, "pristine_toolchain": PRISTINE, **details})
    append_jsonl(run_dir / "terminal_bench_2" / "results.jsonl", result.to_row())
    return run_dir


def test_a_tampered_oracle_is_its_own_cause_whatever_the_verifier_said(tmp_path):
    tampered = _run_dir(tmp_path, "mailman", 0.0, reward=0.0, reward_claimed=1.0, stop_reason="tampered",
                        tampered=f"{TAMPERED}: C /usr/lib/mailman3, A /usr/lib/mailman3/configure_list.py")
    row = summarize(tampered)
    assert row["cause"] == "tampered" and row["verifier"] == "pristine"
    assert "reward 1.0" in row["why"] and "A /usr/lib/mailman3/configure_list.py" in row["why"]
    assert summarize(_run_dir(tmp_path, "ok", 1.0, reward=1.0)) == {"cause": "pass", "why": "", "verifier": "pristine"}
    plain = summarize(_run_dir(tmp_path, "wrong", 0.0, reward=0.0, pristine_toolchain="none: export failed"))
    assert plain["cause"] == "solution fail" and plain["verifier"].startswith("plain (none: export failed")
    _run_dir(tmp_path, "a", 1.0, run="batch", reward=1.0)  # --batch: one run directory, rows by task id
    batch = _run_dir(tmp_path, "b", 0.0, run="batch", reward=0.0)
    assert summarize(batch, "a")["cause"] == "pass" and summarize(batch, "b")["cause"] == "solution fail"
    assert summarize(batch, "c") == {"cause": "other error", "why": "no result recorded"}


def test_tasks_naming_a_missing_task_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "measurements.tb2_oracle_census", str(REPO / "tests/fixtures/terminal_bench"),
                           str(out), "--tasks", "fixture_hello_file,no_such_task"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "no_such_task" in proc.stderr
    assert not out.exists()
