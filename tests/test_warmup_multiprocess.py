"""Two trainer processes on the CPU (``accelerate launch``, data parallel over gloo): train, resume, rerun.

This is the multi-process path of :func:`unified.warmup.trainer.load_policy` (TRL loads the
model from its path in every process) and of resuming (every rank restores the checkpoint).
FSDP2 itself cannot be run this way: accelerate (1.15) switches to ``DistributedType.FSDP``
only on accelerator devices (``MULTI_GPU``, ``MULTI_XPU``, ...); on the CPU an FSDP config
runs as ``MULTI_CPU`` data parallel. FSDP2 and ZeRO-3 are covered by the ``gpu`` tests.
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

# accelerate launches num_processes workers (torchrun) for MULTI_GPU; use_cpu makes them MULTI_CPU over gloo.
# (distributed_type: MULTI_CPU itself starts a single process unless launched with mpirun.)
CPU_DATA_PARALLEL = """\
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
mixed_precision: 'no'
machine_rank: 0
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
main_training_function: main
use_cpu: true
"""


@pytest.mark.slow
def test_two_cpu_processes_train_resume_and_stop_at_max_steps(tmp_path, tiny_checkpoint):
    config = tmp_path / "cpu_data_parallel.yaml"
    config.write_text(CPU_DATA_PARALLEL)
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def launch(max_steps: int) -> str:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
               "--main_process_port", "0", "-m", "unified.warmup",
               "--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"),
               *tiny_cli_overrides(tiny_checkpoint, data, out, f"train.max_steps={max_steps}", "train.save_steps=1")]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-4000:]
        return done.stdout

    first = launch(1)
    assert first.count("unified.warmup: 1 steps") == 2  # both ranks trained
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
