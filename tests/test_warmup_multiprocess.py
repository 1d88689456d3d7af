"""Two trainer processes on the CPU (``accelerate launch``, data parallel over gloo): train, resume, rerun.

This is the multi-process path of :func:`unified.warmup.trainer.load_policy` (TRL loads the
model from its path in every process) and of resuming (every rank restores the checkpoint), with
the accelerate config the launch plan uses for CPU processes (``recipes/accelerate/ddp_cpu.yaml``).
FSDP2 cannot be run this way: accelerate (1.15) switches to ``DistributedType.FSDP`` only on
accelerator devices (``MULTI_GPU``, ``MULTI_XPU``, ...); on the CPU an FSDP config would run as
``MULTI_CPU`` data parallel, so ``launch.distributed=fsdp2`` with CPU processes is refused.
Launched under Slurm, step equivalence and ZeRO-3 on CPUs: ``tests/test_warmup_distributed.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

from unified.warmup.callbacks import METRICS_FILE, read_metrics

REPO = Path(__file__).resolve().parents[1]

CPU_DATA_PARALLEL = REPO / "recipes" / "accelerate" / "ddp_cpu.yaml"  # N ranks over gloo (see the file)


@pytest.mark.slow
def test_two_cpu_processes_train_resume_and_stop_at_max_steps(tmp_path, tiny_checkpoint):
    config = CPU_DATA_PARALLEL
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def launch(max_steps: int) -> str:
        # the recipe's validation probe and keep_best on: every rank decodes the probe and keeps the same step
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
               "--main_process_port", "0", "-m", "unified.warmup",
               "--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"),
               *tiny_cli_overrides(tiny_checkpoint, data, out, f"train.max_steps={max_steps}", "train.save_steps=1",
                                   "data.validation_size=2", "monitor.probe_size=2", "monitor.keep_best=true")]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-4000:]
        return done.stdout

    first = launch(1)
    assert first.count("unified.warmup: 1 steps") == 2  # both ranks trained
    assert "final/ holds" in first  # and said which step's weights final/ holds
    assert first.count("unified.warmup: probe at step 0") == 1  # rank 0 prints
    assert json.loads((out / "run.json").read_text())["collapse"]["best_step"] in (0, 1)
    assert {p.name for p in (out / "checkpoint-1").glob("rng_state_*.pth")} == {"rng_state_0.pth",
                                                                                "rng_state_1.pth"}
    second = launch(2)
    assert second.count("resuming from") == 2 and "checkpoint-1" in second
    assert [r["step"] for r in read_metrics(out / METRICS_FILE) if "loss" in r] == [1, 2]  # rank 0 logs
    run = json.loads((out / "run.json").read_text())
    assert run["global_step"] == 2 and run["resumed_from"].endswith("checkpoint-1")
    assert not (out / "checkpoint-3").exists()
    third = launch(2)
    assert third.count("already finished at step 2") == 2
    assert [r["step"] for r in read_metrics(out / METRICS_FILE) if "loss" in r] == [1, 2]
