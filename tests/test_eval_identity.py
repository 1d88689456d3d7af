"""A run directory knows what defines its results: a rerun of another configuration on the same
``--out`` stops with one line; the same command (or a larger ``--limit``) resumes; Ctrl-C writes
the summary of what finished and exits 130; mistakes are one line before anything loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unified.eval.cli import main
from unified.eval.identity import IDENTITY_FILE, eval_identity
from unified.eval.config import EvalConfig

TESTS = Path(__file__).parent
FIXTURE = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter contract's format (tests/)
ECHO = "fixture_echo"  # its one name (the class's `name`)


def _results(run: Path) -> list[dict]:
    path = run / "fixture_echo" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _gold(out: Path, *extra: str) -> list[str]:
    return ["--benchmarks", FIXTURE, "--model", "gold", "--out", str(out), "--set", f"benchmarks.{FIXTURE}.n=3",
            *extra]


def _one_line_error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "usage:" not in err and "Traceback" not in err, err
    return lines[0]


def test_another_model_and_prompting_on_the_same_out_refuses_and_the_same_command_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_gold(out)) == 0
    assert len(_results(out)) == 3
    line = _one_line_error(capsys, ["--benchmarks", FIXTURE, "--model", "embedded", "--prompting", "predict_then_act",
                                    "--out", str(out), "--set", f"benchmarks.{FIXTURE}.n=3"])
    assert "model gold -> embedded" in line and "prompting act -> predict_then_act" in line
    assert "new --out" in line and "--resume-anyway" in line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["benchmarks"][ECHO]["aggregate"]["n"] == 3  # untouched
    # sampling and benchmark settings are part of the identity too
    assert "sampling.temperature 0.0 -> 0.7" in _one_line_error(capsys, _gold(out, "--temperature", "0.7"))
    assert f"benchmarks.{ECHO} " in _one_line_error(
        capsys, _gold(out, "--set", f"benchmarks.{FIXTURE}.crash=1"))
    # the same command resumes (nothing to run), a larger selection extends the run
    capsys.readouterr()
    assert main(_gold(out)) == 0
    assert "episodes to run" not in capsys.readouterr().err and len(_results(out)) == 3
    assert main(["--benchmarks", FIXTURE, "--model", "gold", "--out", str(out), "--set",
                 f"benchmarks.{FIXTURE}.n=3", "--runs", "2"]) == 0
    assert len(_results(out)) == 6


def test_dry_run_says_whether_out_would_resume_or_stop(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_gold(out)) == 0
    capsys.readouterr()
    main(_gold(out, "--dry-run"))
    assert capsys.readouterr().out.splitlines()[-1] == f"# --out {out}: would resume (finished episodes are kept)"
    main(_gold(out, "--dry-run", "--max-turns", "3"))
    assert "would stop" in capsys.readouterr().out.splitlines()[-1]


def test_resume_anyway_adds_to_the_run_and_records_the_accepted_difference(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_gold(out)) == 0
    assert main(_gold(out, "--max-turns", "5", "--resume-anyway")) == 0
    record = json.loads((out / IDENTITY_FILE).read_text())
    assert record["fields"]["limits.max_turns"] == 5
    assert record["accepted_differences"][0]["differences"] == ["limits.max_turns 40 -> 5"]


def test_a_run_dir_from_before_identities_resumes_and_gets_its_record(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_gold(out)) == 0
    (out / IDENTITY_FILE).unlink()  # as an older version left it: run.json (with the config) only
    assert main(_gold(out)) == 0
    assert len(_results(out)) == 3 and (out / IDENTITY_FILE).is_file()
    (out / IDENTITY_FILE).unlink()
    assert "prompting act -> predict_then_act" in _one_line_error(capsys, _gold(out, "--prompting", "predict_then_act"))


def test_a_rewritten_checkpoint_at_the_same_path_is_another_identity(tmp_path):
    ckpt = tmp_path / "final"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"x" * 10)
    first = eval_identity(EvalConfig(model=str(ckpt)), [])["fields"]
    assert first["model"] == str(ckpt.resolve()) and first["backend"] == "hf"
    (ckpt / "model.safetensors").write_bytes(b"y" * 11)
    assert eval_identity(EvalConfig(model=str(ckpt)), [])["fields"]["model.files"] != first["model.files"]


# ------------------------------------------------------------------------------------------ one-line errors


def test_model_typo_is_one_line_with_did_you_mean_before_anything_loads(tmp_path, capsys):
    for extra in ([], ["--dry-run"]):
        line = _one_line_error(capsys, ["--benchmarks", FIXTURE, "--model", "embeded", "--out", str(tmp_path / "r"),
                                        *extra])
        assert "--model embeded" in line and "did you mean 'embedded'" in line
    assert not (tmp_path / "r").exists()
    line = _one_line_error(capsys, ["--benchmarks", FIXTURE, "--model", str(tmp_path / "nope"), "--dry-run"])
    assert "checkpoint not found" in line
    assert "Did you mean 'predict_then_act'" in _one_line_error(
        capsys, ["--benchmarks", FIXTURE, "--prompting", "predict_then_ac", "--dry-run"])


def test_usage_errors_are_one_line_and_point_to_help(capsys):
    line = _one_line_error(capsys, ["--limt", "3"])
    assert "unrecognized arguments: --limt 3" in line and line.endswith("(see python -m unified.eval --help)")
    assert "--limit" in _one_line_error(capsys, ["--limit", "0"])


def test_list_shows_benchmarks_suites_and_prompting_modules(capsys, monkeypatch):
    monkeypatch.delenv("QWENCLAWBENCH_ROOT", raising=False)
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    qcb = next(line for line in out.splitlines() if line.strip().startswith("qwenclawbench"))
    assert "suites: ood" in qcb and "needs:" in qcb and "QWENCLAWBENCH_ROOT" in qcb
    assert "suites (--suite NAME" in out and "general" in out and "predict_then_act" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--list" in capsys.readouterr().out


def _sigint_as_in_a_terminal() -> None:
    """In the child before exec: SIGINT with its default action and not blocked. Both an ignored and a blocked
    SIGINT survive exec; in the full CI suite the eval started here never saw the test's SIGINT (it ran all
    its episodes and exited 0), which was not reproduced in this file alone."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.slow
def test_ctrl_c_writes_the_summary_of_what_finished_and_exits_130(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "unified.eval", "--benchmarks", FIXTURE, "--model", "gold", "--out", str(out),
           "--max-in-flight", "2", "--set", f"benchmarks.{FIXTURE}.n=12"]
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "FIXTURE_STEP_SECONDS": "2"}  # 12 episodes, 2 in flight: ~12 s, room for a busy machine
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_as_in_a_terminal)
    try:
        deadline = time.monotonic() + 120
        while len(_results(out)) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        proc.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    saved = len(_results(out))
    assert proc.returncode == 130, err[-2000:]
    assert 3 <= saved < 12 and "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip().splitlines()[-1] == (f"python -m unified.eval: interrupted: {saved} results saved; "
                                            "rerun the same command to resume")
    entry = json.loads((out / "summary.json").read_text())["benchmarks"][ECHO]
    assert entry["status"] == "partial" and entry["aggregate"]["n"] == saved
    env["FIXTURE_STEP_SECONDS"] = "0"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and len(_results(out)) == 12, done.stderr[-2000:]
