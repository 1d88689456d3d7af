"""``python -m unified.plot``: a warmup's training curves and the per-benchmark bars of two runs, as PNG.

Inputs are fixtures in the library's own formats: a ``metrics.jsonl`` with the keys TRL's GRPO
trainer logs (as ``JsonlMetricsCallback`` writes them), and run directories written through the
run-directory store.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from unified import plot
from unified.eval.rundir import BenchmarkStore
from unified.types import EpisodeResult

PNG = b"\x89PNG\r\n\x1a\n"


def _fixture_metrics(path: Path, steps: int, *, torn: bool = False) -> None:
    lines = []
    for step in range(1, steps + 1):
        lines.append({"step": step, "time_s": 10.0 * step, "loss": 0.02 / step, "reward": 1.0 + step,
                      "reward_std": 0.5, "rewards/similarity/mean": 1.1 + step, "rewards/degenerate/mean": 0.0,
                      "completions/mean_length": 20.0, "completions/min_length": 10.0,
                      "completions/max_length": 32.0, "completions/clipped_ratio": 0.25, "entropy": 1.8,
                      "clip_ratio/region_mean": 0.0, "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0})
    lines.append({"step": steps, "train_runtime": 99.0, "train_loss": 0.01})  # TRL's end-of-training record
    text = "".join(json.dumps(r) + "\n" for r in lines)
    path.write_text(text + ('{"step": 9, "lo' if torn else ""), encoding="utf-8")


def test_training_curves_from_a_warmup_dir(tmp_path: Path, capsys):
    _fixture_metrics(tmp_path / "metrics.jsonl", 3, torn=True)
    file, records = plot.read_training_metrics(tmp_path)
    assert file == tmp_path / "metrics.jsonl"
    assert [r["step"] for r in records] == [1, 2, 3]  # summary record and torn last line left out
    assert plot.main([str(tmp_path)]) == 0
    png = tmp_path / "plots" / "training.png"
    assert png.read_bytes()[:8] == PNG
    assert str(png) in capsys.readouterr().out


def test_training_curves_with_metrics_missing_and_explicit_out(tmp_path: Path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n", encoding="utf-8")
    out = tmp_path / "fig" / "curves.png"
    assert plot.plot_training(tmp_path / "metrics.jsonl", out) == out
    assert out.read_bytes()[:8] == PNG


def test_training_errors_are_one_line(tmp_path: Path, capsys):
    assert plot.main([str(tmp_path)]) == 2
    (tmp_path / "metrics.jsonl").write_text("", encoding="utf-8")
    assert plot.main([str(tmp_path)]) == 2
    assert plot.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("unified.plot: error:") for line in err)
    assert "no such file" in err[0] and "no training step" in err[1] and "--compare" in err[2]


def _fixture_run(root: Path, scores: dict[str, list[float | None]]) -> Path:
    """A run directory written by the store; None is a skipped task."""
    for bench, values in scores.items():
        store = BenchmarkStore(root, bench)
        for i, score in enumerate(values):
            store.append(EpisodeResult(benchmark=bench, task_id=f"t{i}", trial=0, score=score or 0.0,
                                       skipped="no data" if score is None else None), None)
    return root


def test_benchmark_scores_mean_and_standard_error(tmp_path: Path):
    run = _fixture_run(tmp_path / "a", {"alpha": [1.0, 0.0, 0.5, None], "beta": [0.25]})
    scores = plot.benchmark_scores(run)
    mean, se, n = scores["alpha"]
    assert (mean, n) == (0.5, 3)  # the skipped task is left out
    assert se == pytest.approx(0.5 / math.sqrt(3))  # sample sd 0.5 over 3 episodes
    assert scores["beta"] == (0.25, None, 1)


def test_compare_png(tmp_path: Path, capsys):
    a = _fixture_run(tmp_path / "sft", {"alpha": [1.0, 0.0], "beta": [0.5]})
    b = _fixture_run(tmp_path / "warm", {"alpha": [1.0, 1.0], "gamma": [0.0, None]})
    assert plot.main(["--compare", str(a), str(b), "--labels", "SFT", "+LWM RL"]) == 0
    assert (b / "compare.png").read_bytes()[:8] == PNG
    out = tmp_path / "cmp"
    assert plot.main(["--compare", str(a), str(b), "--out", str(out)]) == 0
    assert (out / "compare.png").read_bytes()[:8] == PNG
    assert plot.main(["--compare", str(a), str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def _texts(fig) -> list[str]:
    ax = fig.axes[0]
    return [t.get_text() for t in ax.texts] + [t.get_text() for t in ax.get_xticklabels()]


def test_compare_draws_zeros_skips_and_percent(tmp_path: Path):
    a = _fixture_run(tmp_path / "a", {"alpha": [0.0, 0.0], "beta": [0.5, 1.0], "gamma": [None, None]})
    b = _fixture_run(tmp_path / "b", {"alpha": [1.0, 0.5], "beta": [0.0]})
    plt, fig = plot.compare_figure(a, b, ("A", "B"))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "mean episode score, % (± 1 SE)" and ax.get_ylim()[1] >= 100
    texts = _texts(fig)
    assert texts.count("0%\nn=2") == 1 and "0%\nn=1" in texts and "75%\nn=2" in texts  # zeros are written
    zero_marks = [line for line in ax.lines if list(line.get_ydata()) == [0, 0] and line.get_linewidth() == 4]
    assert len(zero_marks) == 2  # and drawn as a mark on the axis
    assert any(t.startswith("A:\nall 2 tasks skipped") for t in texts)  # gamma: skipped on A, absent on B
    assert "gamma" in texts and "NOT COMPARABLE" not in ax.get_title()  # no fingerprint recorded: nothing claimed
    plt.close(fig)


def test_compare_of_runs_with_other_settings_says_not_comparable(tmp_path: Path):
    from unified.eval.cli import main

    fixture = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter contract's format (tests/)
    for name, tokens in (("a", "512"), ("b", "48")):
        assert main(["--benchmarks", fixture, "--model", "gold", "--out", str(tmp_path / name), "--set",
                     f"benchmarks.{fixture}.n=2", "--max-new-tokens", tokens]) == 0
    plt, fig = plot.compare_figure(tmp_path / "a", tmp_path / "b")
    title = fig.axes[0].get_title()
    assert title.startswith("NOT COMPARABLE: the runs differ in 1 setting(s) besides the weights")
    assert "sampling.max_new_tokens: A 512 vs B 48" in title
    plt.close(fig)


def test_training_plot_marks_steps_without_generation_and_shows_probe_kept_step_and_heldout(tmp_path: Path):
    rows = [{"step": 1, "loss": 0.1, "reward": 0.7, "reward_std": 0.9, "probe/reward": 2.6, "step_time": 200.0,
             "memory/peak_rss_gib": 6.3, "clip_ratio/region_mean": 0.0},
            {"step": 2, "loss": 0.08, "probe/reward": 1.1, "step_time": 70.0, "memory/peak_rss_gib": 6.9,
             "clip_ratio/region_mean": 0.38}]  # step 2 trained on step 1's batch: no reward logged
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "before_after.json").write_text(json.dumps({
        "steps": 2, "collapse": {"start_probe_reward": 1.9, "best_step": 1, "kept_step": 1},
        "before": {"mean_reward": 1.4, "prompts": 8}, "after": {"mean_reward": 2.1},
        "paired": {"prompts": 8, "mean_diff": 0.7, "se_diff": 0.4}}), encoding="utf-8")
    _, records = plot.read_training_metrics(tmp_path)
    assert plot.generation_steps(records) == {2: 1}
    assert plot.warmup_outcome(tmp_path)["collapse"]["kept_step"] == 1
    png = plot.plot_training(tmp_path, tmp_path / "t.png")
    assert png.read_bytes()[:8] == PNG
