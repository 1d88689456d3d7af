"""Rerunning ``python -m unified.warmup``: a finished run is a no-op, never one step past ``max_steps``.

The HF Trainer checks ``max_steps`` only after taking a step, so resuming from a checkpoint that
is already at ``max_steps`` used to train one extra step (global_step 3 with max_steps 2).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

from unified.warmup.__main__ import main
from unified.warmup.callbacks import METRICS_FILE, read_metrics

REPO = Path(__file__).resolve().parents[1]


def _steps(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / METRICS_FILE) if "loss" in r]


def _checkpoints(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("checkpoint-*"))


@pytest.mark.slow
def test_finished_run_is_a_no_op_and_more_steps_continue_it(tmp_path, tiny_checkpoint, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"

    def run(max_steps: int) -> str:
        args = ["--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"),
                *tiny_cli_overrides(tiny_checkpoint, data, out, f"train.max_steps={max_steps}", "train.save_steps=1",
                                    "train.save_total_limit=null")]
        capsys.readouterr()
        assert main(args) == 0
        return capsys.readouterr().out

    run(2)
    assert _steps(out) == [1, 2] and _checkpoints(out) == ["checkpoint-1", "checkpoint-2"]
    weights = (out / "final" / "model.safetensors").read_bytes()

    again = run(2)  # the same command again: nothing to do
    assert "already finished at step 2" in again
    assert _steps(out) == [1, 2] and _checkpoints(out) == ["checkpoint-1", "checkpoint-2"]
    assert (out / "final" / "model.safetensors").read_bytes() == weights
    assert json.loads((out / "run.json").read_text())["global_step"] == 2

    # killed after its last checkpoint but before final/: the rerun writes final/ and takes no step
    shutil.rmtree(out / "final")
    (out / "run.json").unlink()
    finalised = run(2)
    assert "already trained to step 2" in finalised and "resuming from" in finalised
    assert _steps(out) == [1, 2] and _checkpoints(out) == ["checkpoint-1", "checkpoint-2"]
    assert (out / "final" / "model.safetensors").read_bytes() == weights  # the checkpoint's weights
    record = json.loads((out / "run.json").read_text())
    assert record["global_step"] == 2 and record["resumed_from"].endswith("checkpoint-2")

    # raising max_steps continues the finished run to exactly the new max_steps
    run(3)
    assert _steps(out) == [1, 2, 3] and _checkpoints(out) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert json.loads((out / "run.json").read_text())["global_step"] == 3
    assert (out / "final" / "model.safetensors").read_bytes() != weights
