"""slurm/lwm_warmup.sh: its conventions, its node layout (dry run), and a real sbatch on a one-node Slurm."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _slurm_cluster import require_slurm
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

from unified.warmup.rollout_gate import rollout_key_path, write_new_key

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "slurm" / "lwm_warmup.sh"
PYTHON = sys.executable


def dry_run(*args: str, _stderr: list[str] | None = None, **env: str) -> str:
    full = {**os.environ, "PYTHON": PYTHON, "REPO": str(REPO), "DRY_RUN": "1",
            "JUDGE": "openai:http://judge:8001/v1#judge", **env}  # the paper recipe needs a judge
    out = subprocess.run(["bash", str(SCRIPT), *args], env=full, capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    if _stderr is not None:
        _stderr.append(out.stderr)
    return out.stdout


def test_script_conventions():
    text = SCRIPT.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert lines[1].startswith("# lwm_warmup.sh: ")  # the header line
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    for var in ("NODES", "GPUS_PER_NODE", "RECIPE", "MODEL", "DATA", "OUTPUT"):
        assert re.search(rf"^{var}=\$\{{{var}:-", text, re.M), f"{var} is not a user variable with a default"
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    assert sbatch and not any(re.search(r"--partition|--account|\s-p\s|\s-A\s|--qos", s) for s in sbatch)
    assert '"$@"' in text


def test_multi_node_layout_is_the_python_launch_plan(tmp_path):
    # 8 trainer GPUs: the 35B's states (64.7 GiB a GPU) fit an H200 at short prompts, not an H100
    output = tmp_path / "out"
    old_key = write_new_key(rollout_key_path(output))  # a key of an earlier run: never printed, not replaced
    key_text, stderr = old_key.read_text(), []
    out = dry_run("--set", "train.max_steps=7", "--set", "data.max_prompt_tokens=16384", UNIFIED_HOSTNAMES="n0 n1 n2",
                  NODES="3", GPUS_PER_NODE="4", GPU="h200", OUTPUT=str(output), _stderr=stderr)
    srun = [line for line in out.splitlines() if line.startswith("srun ")]
    assert len(srun) == 2
    vllm, trainer = srun
    assert "--nodelist=n0" in vllm and "vllm-serve" in vllm and r"--tensor-parallel-size\ 4" in vllm
    # the server on 127.0.0.1 only, behind the key gate on $VLLM_HOST; the key is written (0600) before it starts
    key_file = str(rollout_key_path(output))
    assert (r"-m\ unified.warmup.rollout_gate\ serve\ --key-file\ " + key_file + r"\ --host\ \$VLLM_HOST\ --port\ 8000"
            r"\ --upstream-port\ 8001\ --\ ") in vllm
    assert r"vllm-serve\ --model" in vllm.split(r"\ --\ ")[1] and r"--host\ 127.0.0.1\ --port\ 8001" in vllm
    lines = out.splitlines()
    assert lines[lines.index(vllm) - 1].endswith(f"unified/warmup/rollout_gate.py new-key {key_file} ")
    assert old_key.read_text() == key_text and key_text.strip() not in out + "".join(stderr)
    assert r"--nodelist=n1\,n2" in trainer and "--ntasks-per-node=1" in trainer
    for piece in (r"--num_machines\ 2", r"--num_processes\ 8", r"train.max_steps=7",
                  r"generation.backend=vllm_server", "VLLM_HOST=n0", "MAIN_PROCESS_IP=n1",
                  r"MACHINE_RANK=\$SLURM_PROCID", r"deepspeed_zero3.yaml"):
        assert piece in trainer, piece
    assert "# wait for http://n0:8000/health/" in out
    # every step asks for its GPUs; the server binds the address the trainers use, never 0.0.0.0
    assert "--gres=gpu:4" in vllm and "--gres=gpu:4" in trainer
    assert r"--host\ \$VLLM_HOST" in vllm and "VLLM_HOST=n0" in vllm and "0.0.0.0" not in out
    assert r"generation.vllm_server_port=8000" in trainer  # the trainers talk to the gate's port
    assert "export\\ VLLM_HOST_IP=" in trainer  # TRL's weight-sync listener on the interface facing n0


def test_gpus_follow_the_grant_the_output_has_no_job_id_and_the_job_asks_for_gpus_and_memory():
    from concurrent.futures import ThreadPoolExecutor

    env = {"RECIPE": "recipes/warmup/embedded_cpu.yaml", "UNIFIED_HOSTNAMES": "solo", "NODES": "1", "RUNS": "/r"}
    grants = [{"SLURM_GPUS_PER_NODE": "h200:1", "SLURM_JOB_ID": "5"}, {"SLURM_GPUS_PER_NODE": "h200:1",
              "SLURM_JOB_ID": "6"}, {"SLURM_GPUS_PER_NODE": "0"}]
    with ThreadPoolExecutor(len(grants)) as pool:  # three dry runs (Python start-ups) at once
        *jobs, out = pool.map(lambda grant: dry_run(**grant, **env), grants)
    outs = set()
    for job_out in jobs:
        outs.add(re.search(r"output (\S+)", job_out)[1])
        assert "x 1 GPU(s)" in job_out and "--gres=gpu:1" in job_out
    assert outs == {"/r/lwm_warmup-embedded_cpu"}  # a resubmitted job resumes there
    assert "x 0 GPU(s)" in out and "--gres" not in out
    headers = [line for line in SCRIPT.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --gpus-per-node=8" in headers and "#SBATCH --mem=0" in headers
    assert "#SBATCH --requeue" in headers and any(h.startswith("#SBATCH --signal=B:USR1@") for h in headers)


def test_one_node_cpu_layout_runs_the_trainer_alone():
    out = dry_run("--set", "train.max_steps=1", RECIPE="recipes/warmup/embedded_cpu.yaml", GPUS_PER_NODE="0",
                  UNIFIED_HOSTNAMES="solo", NODES="1")
    srun = [line for line in out.splitlines() if line.startswith("srun ")]
    assert len(srun) == 1 and "--nodelist=solo" in srun[0]
    assert r"-m\ unified.warmup\ --recipe\ recipes/warmup/embedded_cpu.yaml" in srun[0]
    assert "vllm-serve" not in out and "accelerate" not in out


def test_too_few_nodes_is_a_clear_error():
    env = {**os.environ, "PYTHON": PYTHON, "REPO": str(REPO), "DRY_RUN": "1", "UNIFIED_HOSTNAMES": "n0",
           "NODES": "2"}
    out = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode != 0 and "NODES=2 but the allocation has 1 node(s)" in out.stderr


@pytest.mark.slow
def test_sbatch_usr1_saves_requeues_and_resumes_at_the_saved_step(tmp_path, tiny_checkpoint, slurm_cluster):
    """A real sbatch of the warmup on a one-node Slurm, warned (SIGUSR1 to the batch shell, what
    ``--signal=B:USR1@600`` sends) while it trains: the trainer saves checkpoint-k at the end of its step and
    exits, the job is requeued (same id, same output directory) and resumes from checkpoint-k: every step's
    metrics once, none lost, none repeated; final/ at max_steps."""
    import json
    import time

    require_slurm()
    data = write_fixture_awb_dir(tmp_path / "data")
    output = tmp_path / "out"
    log = tmp_path / "job.log"
    env = {"PYTHON": PYTHON, "REPO": str(REPO), "RECIPE": "recipes/warmup/embedded_cpu.yaml", "GPUS_PER_NODE": "0",
           "MODEL": str(tiny_checkpoint), "DATA": str(data), "OUTPUT": str(output), "HF_HUB_OFFLINE": "1"}
    max_steps = 12  # room for the warning to land mid-run on a quiet machine (6 steps could all end before it)
    args = tiny_cli_overrides(None, None, None, f"train.max_steps={max_steps}", "train.save_steps=100")
    metrics = output / "metrics.jsonl"

    def steps() -> list[int]:
        if not metrics.exists():
            return []
        return [r["step"] for r in map(json.loads, filter(None, metrics.read_text().splitlines())) if "loss" in r]

    cluster = slurm_cluster
    job = cluster.sbatch(SCRIPT, *args, env=env, cwd=REPO, sbatch_args=(
        "--nodes=1", "--exclusive", "--gpus-per-node=0", f"--output={log}", "--job-name=lwm-test"))
    deadline = time.time() + 300
    while not steps() and time.time() < deadline:
        time.sleep(0.5)
    assert steps(), (cluster.job_state(job), log.read_text() if log.exists() else "")
    subprocess.run(["scancel", "--signal=USR1", "--batch", str(job)], env=cluster.env(), check=True)
    deadline = time.time() + 180
    while cluster.job_state(job).get("Restarts", "0") == "0" and time.time() < deadline:
        time.sleep(0.5)
    while cluster.job_state(job).get("JobState") != "PENDING" and time.time() < deadline:
        time.sleep(0.5)
    # Slurm holds a requeued job back for a while before it may start again: let it start now, though not
    # within the second its old credential was revoked in (slurmd compares whole seconds: "Job credential
    # revoked" would kill the restart)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=cluster.env(), check=True)
    state = cluster.wait(job, timeout_s=400)
    text = log.read_text()
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", (state, text[-4000:], cluster.logs())
    saved = int(re.search(r"pre-empted at step (\d+): saved \S+checkpoint-(\d+)", text)[1])
    assert 1 <= saved < max_steps, text[-3000:]
    assert "asking the trainer to save a checkpoint" in text and "requeueing job" in text
    assert f"resuming from {output}/checkpoint-{saved}" in text
    assert steps() == list(range(1, max_steps + 1))  # the step count continues: none lost, none repeated
    state = json.loads((output / f"checkpoint-{saved}" / "trainer_state.json").read_text())
    assert state["global_step"] == saved
    assert {"optimizer.pt", "scheduler.pt"} <= {p.name for p in (output / f"checkpoint-{saved}").iterdir()}
    assert f"the warmed-up checkpoint is {output}/final" in text and not (output / "preempt.request").exists()
    from unified.models import load_checkpoint

    loaded = load_checkpoint(output / "final", device="cpu")
    assert loaded.model.config.model_type == "qwen3_moe"


def test_image_wraps_every_step(tmp_path):
    """IMAGE=...: host-side Python and each srun step run in `apptainer exec --nv` (a stand-in apptainer on PATH
    drops its options and runs the command, so the script's own checks still run)."""
    shim = tmp_path / "apptainer"
    shim.write_text("#!/bin/bash\nshift\nwhile [[ \"$1\" == --* ]]; do case $1 in --nv) shift;; "
                    "--env) export \"$2\"; shift 2;; *) shift 2;; esac; done\nshift\n"
                    f"[ \"$1\" = python ] && {{ shift; exec {PYTHON} \"$@\"; }}\nexec \"$@\"\n")
    shim.chmod(0o755)
    out = dry_run(UNIFIED_HOSTNAMES="n0 n1 n2 n3", NODES="4", GPUS_PER_NODE="8", IMAGE="/images/u.sif",
                  PATH=f"{tmp_path}:{os.environ['PATH']}")
    srun = [line for line in out.splitlines() if line.startswith("srun ")]
    assert len(srun) == 2
    for line in srun:
        assert "apptainer exec --nv --bind " in line and "/images/u.sif bash -c" in line
    assert r"PYTHON=python\;" in srun[1]  # inside the image its own python finds the weight-sync address
    assert "# memory/time plan (qwen3.5-35b-a3b" in out and "(fits)" in out
