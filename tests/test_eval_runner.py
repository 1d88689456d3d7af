"""python -m unified.eval: resume after SIGKILL, crash recording, skips, summaries, --compare."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unified.eval.cli import load_eval_config, build_parser, main
from unified.eval.config import EvalConfig
from unified.eval.runner import run_eval

TESTS = Path(__file__).parent
FIXTURE = "fixture_eval_bench:FixtureAdapter"
ECHO = "fixture_echo"  # its one name (the class's `name`): settings, plan, summary and directory


def _results(run: Path, bench: str = "fixture_echo") -> list[dict]:
    path = run / bench / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.slow
def test_sigkill_then_rerun_leaves_exactly_one_result_per_task(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "unified.eval", "--benchmarks", FIXTURE, "--model", "gold", "--out", str(out),
           "--max-in-flight", "2", "--set", f"benchmarks.{FIXTURE}.n=12"]
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "FIXTURE_STEP_SECONDS": "2"}  # 12 episodes, 2 in flight: ~12 s, room for a busy machine
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(_results(out)) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    partial = _results(out)
    assert 3 <= len(partial) < 12
    # simulate the worst case of a kill: a half-written last line
    with open(out / "fixture_echo" / "results.jsonl", "a") as handle:
        handle.write('{"benchmark": "fixture_echo", "task_id": "ech')
    env["FIXTURE_STEP_SECONDS"] = "0"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = _results(out)
    ids = [r["task_id"] for r in results]
    assert sorted(ids) == sorted(f"echo_{i}" for i in range(12)) and len(ids) == len(set(ids))
    assert all(r["passed"] for r in results)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["benchmarks"][ECHO]["aggregate"]["score"] == 100.0
    assert "episodes/s" in done.stderr or "ep/s" in done.stderr


def test_crash_recorded_and_unavailable_benchmark_skipped(tmp_path, capsys):
    cfg = EvalConfig(benchmarks=[FIXTURE, "widesearch_typo_not_registered:Nope", "claw_eval"], model="gold",
                     out=str(tmp_path), benchmark_config={FIXTURE: {"n": 3, "crash": 1}})
    summary = run_eval(cfg)
    bench = summary.benchmarks[ECHO]
    assert bench.results == 4 and bench.errors == 1
    assert bench.aggregate["score"] == pytest.approx(75.0)  # the crash scores 0, recorded, not dropped
    crash = [r for r in _results(tmp_path) if r["task_id"] == "crash_0"][0]
    assert "fixture environment crashed" in crash["error"]
    skipped = summary.benchmarks["widesearch_typo_not_registered:Nope"]
    assert skipped.status == "skipped" and skipped.reason == "not yet available"
    assert "skipped" in capsys.readouterr().err
    markdown = (tmp_path / "summary.md").read_text()
    assert markdown.count("| fixture_echo |") == 1
    assert "**fixture_echo** errors: 1 x RuntimeError: fixture environment crashed" in markdown
    assert bench.limits == {"max_turns": 40, "max_steps_per_turn": 20, "max_episode_tokens": 32768,
                               "max_seconds": 3600.0}


def test_a_rejected_benchmark_setting_leaves_no_run_directory(tmp_path, capsys):
    out = tmp_path / "never"
    with pytest.raises(SystemExit) as exit_info:
        main(["--benchmarks", "bfcl_v4", "--model", "gold", "--out", str(out),
              "--set", "benchmarks.bfcl_v4.categoriez=multi_turn"])
    assert exit_info.value.code == 2 and "categoriez" in capsys.readouterr().err
    assert not out.exists()


def test_recipe_flags_and_set_precedence(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("suite: ood\nlimit: 3\nsampling:\n  temperature: 0.7\n")
    args = build_parser().parse_args(["--recipe", str(recipe), "--limit", "5", "--no-thinking",
                                      "--set", "benchmarks.bfcl_v4.categories=multi_turn"])
    cfg = load_eval_config(args)
    assert cfg.limit == 5 and cfg.sampling.temperature == 0.7 and cfg.sampling.thinking is False
    assert cfg.benchmark_config == {"bfcl_v4": {"categories": "multi_turn"}}
    recipe.write_text("suite: ood\nlimt: 3\n")
    with pytest.raises(SystemExit):
        main(["--recipe", str(recipe)])


def test_compare_prints_deltas(tmp_path, capsys):
    for name, n in (("a", 2), ("b", 4)):
        run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path / name),
                            benchmark_config={FIXTURE: {"n": n, "crash": 1}}))
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    table = capsys.readouterr().out
    assert "| other | fixture_echo | 66.67 (partial;" in table
    assert "| +13.33* NOT COMPARABLE |" in table and f"- {ECHO}.settings.n: A 2 vs B 4" in table


def test_lwm_is_a_subcommand_with_its_own_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["lwm", "--help"])
    assert exit_info.value.code == 0
    assert "python -m unified.eval lwm" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--suite", "lwm", "--help"], ["--suite=lwm", "--help"]])
def test_suite_lwm_any_spelling_reaches_the_subcommand_with_a_deprecation_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr()
    assert "python -m unified.eval lwm" in out.out and "deprecated" in out.err


def test_lwm_mixed_with_agent_suites_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--suite", "ood,lwm", "--model", "gold"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "subcommand" in err and "did you mean" not in err.lower()


def test_select_task_ids_brings_dependencies_in_benchmark_order():
    from unified.benchmarks.contract import Task
    from unified.benchmarks.helpers import select_task_ids

    tasks = [Task(id="write_a", benchmark="b", scored=False), Task(id="write_b", benchmark="b", scored=False,
                                                                   depends_on=["write_a"]),
             Task(id="q1", benchmark="b", depends_on=["write_b"]), Task(id="q2", benchmark="b"),
             Task(id="q3", benchmark="b", depends_on=["not_here"])]
    assert [t.id for t in select_task_ids(tasks, ["q2", "q1", "other_benchmarks_id"])] == \
        ["write_a", "write_b", "q1", "q2"]
    assert [t.id for t in select_task_ids(tasks, ["q3"])] == ["q3"]
    assert select_task_ids(tasks, ["nope"]) == []


def test_task_ids_flag_runs_only_those_tasks(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--benchmarks", FIXTURE, "--model", "gold", "--out", str(out), "--task-ids", "echo_4,echo_1",
                 "--set", f"benchmarks.{FIXTURE}.n=6"]) == 0
    assert sorted(r["task_id"] for r in _results(out)) == ["echo_1", "echo_4"]
    assert main(["--benchmarks", FIXTURE, "--model", "gold", "--out", str(tmp_path / "none"),
                 "--task-ids", "echo_99"]) == 0
    summary = json.loads((tmp_path / "none" / "summary.json").read_text())
    assert summary["benchmarks"][ECHO]["status"] == "skipped"
    assert "none of --task-ids" in capsys.readouterr().err
