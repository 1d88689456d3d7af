"""End to end: tiny eval runs of the embedded model (act and predict_then_act), traced, and the
analysis notebooks executed headless on them (nbclient; a failing cell fails the test).

The two runs are made once per session by ``python -m unified.eval`` on one BFCL v4 task with a
few generated tokens, so they are real but small.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unified.trace import load_run, trace_run

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EVAL_ARGS = ["--benchmarks", "bfcl_v4", "--split", "simple_python", "--limit", "1", "--max-new-tokens", "12",
             "--max-turns", "1", "--model", "embedded"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def fixture_eval_runs(embedded_dir, tmp_path_factory) -> dict[str, Path]:
    """``{"act": DIR, "predict_then_act": DIR}``: two tiny real runs of the embedded model."""
    pytest.importorskip("bfcl_eval")
    base = tmp_path_factory.mktemp("eval-runs")
    runs = {prompting: base / prompting for prompting in ("act", "predict_then_act")}
    # the two evals are independent processes: started together, one's start-up (imports, model load) overlaps
    # the other's (measured: 30.8 s one after the other in CI)
    procs = {prompting: subprocess.Popen([sys.executable, "-m", "unified.eval", *EVAL_ARGS, "--prompting", prompting,
                                          "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, env={**os.environ, "TQDM_DISABLE": "1"})
             for prompting, out in runs.items()}
    try:
        for prompting, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"{prompting}: " + stdout[-2000:] + stderr[-4000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs


def test_predict_then_act_run_records_predictions_and_act_none(fixture_eval_runs):
    predict = load_run(fixture_eval_runs["predict_then_act"])
    act = load_run(fixture_eval_runs["act"])
    assert len(predict.episodes) == len(act.episodes) == 1
    assert predict.config["prompting"] == "predict_then_act"
    for step in predict.episodes[0].steps:
        # the prefilled block is in the raw completion, and recorded (with its verdict fields) in the step
        assert step.completion.startswith("<predicted_observation>")
        assert step.extras["prediction_blocks"] == 1
        for record in step.extras["predictions"]:
            assert {"text", "start", "end", "correct", "score", "method"} <= set(record)
            assert record["method"] in ("unaligned", "unverifiable") or record["method"].startswith("rule:")
            assert step.completion[record["start"]:record["end"]].startswith("<predicted_observation>")
        assert "predicted_observation" not in step.content and "predicted_observation" not in (step.reasoning or "")
    for step in act.episodes[0].steps:
        assert "predictions" not in step.extras and "<predicted_observation>" not in step.completion
    assert trace_run(act).stats("explicit")["predictions"] == 0
    traced = trace_run(predict)
    recorded = sum(len(s.extras["predictions"]) for s in predict.episodes[0].steps)
    assert traced.stats("explicit")["predictions"] == recorded


def _execute(name: str, env: dict[str, str], tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{name} is committed with outputs"
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits the parameters
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    nbformat.write(nb, tmp_path / name)  # the executed copy, for inspection


def _pngs(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("*.png") if p.stat().st_size > 1000}


def test_prediction_in_reasoning_notebook(fixture_eval_runs, tmp_path):
    figures = tmp_path / "figures"
    _execute("prediction_in_reasoning.ipynb", {"UNIFIED_RUN_DIR": str(fixture_eval_runs["predict_then_act"]),
                                               "UNIFIED_FIGURES_DIR": str(figures)}, tmp_path)
    assert _pngs(figures) == {"positions.png", "by_step.png", "verdicts.png", "accuracy_vs_success.png"}
    numbers = json.loads((figures / "numbers.json").read_text())
    expected = trace_run(fixture_eval_runs["predict_then_act"])
    assert numbers["stats"]["all"] == json.loads(json.dumps(expected.stats()))
    assert numbers["stats"]["explicit"]["predictions"] >= 1


def test_sft_vs_warmup_notebook(fixture_eval_runs, tmp_path):
    figures = tmp_path / "figures"
    _execute("sft_vs_warmup.ipynb", {"UNIFIED_RUN_A": str(fixture_eval_runs["act"]),
                                     "UNIFIED_RUN_B": str(fixture_eval_runs["predict_then_act"]),
                                     "UNIFIED_LABEL_A": "act", "UNIFIED_LABEL_B": "predict_then_act",
                                     "UNIFIED_FIGURES_DIR": str(figures)}, tmp_path)
    assert _pngs(figures) == {"comparison.png"}
    table = json.loads((figures / "comparison.json").read_text())
    assert [r["benchmark"] for r in table["benchmarks"]][0] == "bfcl_v4"
    explicit_rate = next(r for r in table["predictions"] if (r["kind"], r["metric"]) == ("explicit", "prediction_rate"))
    assert explicit_rate["a"] in (0.0, None)  # act never writes explicit blocks


def test_notebook_step_as_written_from_the_caller_directory(fixture_eval_runs, tmp_path):
    """``UNIFIED_RUN_DIR=runs/eval/pta jupyter execute notebooks/...`` from a shell in the repository
    root: the kernel runs in notebooks/, the relative path is still read from the shell's directory,
    and the figures are saved (by default in the run's ``figures/``)."""
    jupyter = Path(sys.executable).parent / "jupyter"
    if not jupyter.exists():
        pytest.skip(f"{jupyter} is not installed")
    caller = tmp_path / "caller"
    shutil.copytree(fixture_eval_runs["predict_then_act"], caller / "runs" / "eval" / "pta")
    shutil.copytree(NOTEBOOKS, caller / "notebooks")  # the same layout as the checkout
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNIFIED_") or k == "UNIFIED_CACHE_DIR"}
    proc = subprocess.run(["bash", "-c", f"cd {shlex.quote(str(caller))} && UNIFIED_RUN_DIR=runs/eval/pta "
                           f"{shlex.quote(str(jupyter))} execute notebooks/prediction_in_reasoning.ipynb"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    figures = caller / "runs" / "eval" / "pta" / "figures"
    assert _pngs(figures) == {"positions.png", "by_step.png", "verdicts.png", "accuracy_vs_success.png"}
    assert (figures / "numbers.json").is_file()


def test_trace_cli_writes_the_notebooks_outputs(fixture_eval_runs, tmp_path, capsys):
    from unified.trace.report import main

    run = tmp_path / "pta"
    shutil.copytree(fixture_eval_runs["predict_then_act"], run)
    assert main([str(run)]) == 0
    figures = run / "figures"
    assert _pngs(figures) == {"positions.png", "by_step.png", "verdicts.png", "accuracy_vs_success.png"}
    numbers = json.loads((figures / "numbers.json").read_text())
    assert numbers["stats"]["all"] == json.loads(json.dumps(trace_run(run).stats()))
    report = (figures / "report.md").read_text()
    assert "## Statistics" in report and "| prediction_rate |" in report and "![positions](positions.png)" in report
    out = tmp_path / "cmp"
    assert main(["--compare", str(fixture_eval_runs["act"]), str(run), "--labels", "act", "pta",
                 "--out", str(out)]) == 0
    assert _pngs(out) == {"comparison.png"}
    assert json.loads((out / "comparison.json").read_text())["benchmarks"][0]["benchmark"] == "bfcl_v4"
    assert "| bfcl_v4 |" in (out / "report.md").read_text()


def test_view_of_a_real_predict_then_act_run(fixture_eval_runs, tmp_path):
    """``python -m unified.view`` on a real run: every episode, and its predictions beside the observations."""
    from unified import view

    run = fixture_eval_runs["predict_then_act"]
    out = tmp_path / "view.html"
    assert view.main([str(run), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    saved = load_run(run)
    assert page.count('class="episode"') == len({(r.benchmark, r.task_id, r.trial) for r in saved.results})
    assert "<th>predicted</th><th>actual observation</th>" in page
    assert "prompting: predict_then_act" in page
