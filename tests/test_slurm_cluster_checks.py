"""slurm/*.sh on a one-node Slurm shaped like a real cluster: a drained default partition (it refuses
every job) beside a ``work`` partition with a ``MaxTime``, and two GPUs declared as GRES.

- the eval's merge job inherits the array's partition and time limit (on a cluster whose default
  partition refuses it, a merge submitted without ``-p`` killed shard 0 before it evaluated);
- a merge job that is refused anyway (``MERGE_SBATCH_ARGS``) is a warning: the shard still evaluates;
- SIGUSR1 (what ``--signal=B:USR1@300`` sends before the time limit) requeues the job, which resumes in
  the same output directory: every task once, none twice;
- a rollout server that exits before it answers fails the warmup job at once (not after
  ``VLLM_TIMEOUT_S``), the trainer never starts, and the server's srun step was given its GPU.

One cluster for the module (its start is the slow part).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _slurm_cluster import SlurmCluster, require_slurm, stop_shared_cluster

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent
EVAL = REPO / "slurm" / "eval.sh"
WARMUP = REPO / "slurm" / "lwm_warmup.sh"
ECHO = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter format, written for tests

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_slurm()
    stop_shared_cluster()  # its own layout, and never beside another cluster (the requeue test is timing-sensitive)
    root = tmp_path_factory.mktemp("slurm")
    partitions = ("PartitionName=login Default=YES MaxTime=INFINITE State=DRAIN",
                  "PartitionName=work Default=NO MaxTime=30 State=UP")
    with SlurmCluster(root, gpus=2, partitions=partitions) as c:
        yield c


def eval_env(out: Path, **extra: str) -> dict[str, str]:
    return {"PYTHON": sys.executable, "REPO": str(REPO), "MODEL": "gold", "BENCHMARKS": ECHO, "OUT": str(out),
            "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **extra}


def results(out: Path) -> list[str]:
    path = out / "fixture_echo" / "results.jsonl"
    return [json.loads(line)["task_id"] for line in path.read_text().splitlines()] if path.exists() else []


def test_the_drained_default_partition_refuses_a_job(cluster, tmp_path):
    """The premise of the merge checks: a job submitted without -p is refused here."""
    with pytest.raises(RuntimeError, match="sbatch failed"):
        cluster.sbatch(EVAL, sbatch_args=("--gpus-per-node=0", "--wrap=true"))


def test_the_merge_inherits_partition_and_time_and_a_refused_merge_keeps_the_shard(cluster, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    args = ("--set", f"benchmarks.{ECHO}.n=4")
    sbatch = ("--partition=work", "--time=00:20:00", "--gpus-per-node=0", f"--output={logs}/%A_%a.out")
    out = tmp_path / "inherits"
    array = cluster.sbatch(EVAL, *args, env=eval_env(out), sbatch_args=("--array=0-1", *sbatch), cwd=REPO)
    tasks = cluster.wait_array(array, timeout_s=300)
    assert {i: t["JobState"] for i, t in tasks.items()} == {0: "COMPLETED", 1: "COMPLETED"}, cluster.logs()
    first_log = (logs / f"{array}_0.out").read_text()
    merge_job = int(re.search(r"merge job (\d+) starts after array job", first_log)[1])
    merged = cluster.wait(merge_job, timeout_s=300)
    assert merged["JobState"] == "COMPLETED", (merged, [p.read_text() for p in out.glob("merge-*.out")])
    assert merged["Partition"] == "work" and merged["TimeLimit"] == "00:20:00"
    assert sorted(json.loads((out / "summary.json").read_text())["benchmarks"]) == ["fixture_echo"]  # its one name

    refused = tmp_path / "refused"
    env = eval_env(refused, SHARDS="2", MERGE_SBATCH_ARGS="--partition=login")
    array = cluster.sbatch(EVAL, *args, env=env, sbatch_args=("--array=0", *sbatch), cwd=REPO)
    task = cluster.wait_array(array, timeout_s=300)[0]
    log = (logs / f"{array}_0.out").read_text()
    assert task["JobState"] == "COMPLETED" and task["ExitCode"] == "0:0", log
    assert "warning: the merge job was refused" in log and "Submit the merge by hand" in log
    assert sorted(results(refused / "shard-0")) == ["echo_0", "echo_2"]  # shard 0 of 2 evaluated anyway


def test_sigusr1_requeues_and_the_job_resumes_in_the_same_directory(cluster, tmp_path):
    out = tmp_path / "requeue"
    log = tmp_path / "requeue.log"
    env = eval_env(out, FIXTURE_STEP_SECONDS="1")
    job = cluster.sbatch(EVAL, "--set", f"benchmarks.{ECHO}.n=6", "--max-in-flight", "1", env=env, cwd=REPO,
                         sbatch_args=("--partition=work", "--gpus-per-node=0", f"--output={log}"))
    deadline = time.time() + 120
    while not results(out) and time.time() < deadline:
        time.sleep(0.5)
    assert results(out), (cluster.job_state(job), log.read_text() if log.exists() else "")
    subprocess.run(["scancel", "--signal=USR1", "--batch", str(job)], env=cluster.env(), check=True)
    # Slurm holds a requeued job back for a while before it may start again. Lift the hold only once the first
    # run has ended on the node (job PENDING again, node idle): lifted while the old batch step was still being
    # killed (KillWait), the second launch raced it on a loaded machine and the job ended FAILED with no output.
    deadline = time.time() + 180
    while time.time() < deadline:
        state = cluster.job_state(job)
        if state.get("Restarts", "0") != "0" and state.get("JobState") == "PENDING" and cluster.node_idle():
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"job {job} not pending and idle after its requeue: {state}\n{cluster.logs()}")
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=cluster.env(), check=True)
    state = cluster.wait(job, timeout_s=300)
    text = log.read_text()
    if not (state["JobState"] == "COMPLETED" and state["Restarts"] == "1"):
        pytest.fail(f"job {job}: {state}\n-- its log:\n{text}\n-- the daemons' logs:\n{cluster.logs()}")
    assert "requeueing job" in text
    done = results(out)
    assert sorted(done) == [f"echo_{i}" for i in range(6)]  # every task once: the second run resumed
    assert len(text.split("unified-eval: job ")) == 3  # two starts of the same job id, one log (--open-mode=append)


def test_a_rollout_server_that_exits_fails_the_warmup_at_once(cluster, tmp_path):
    fake = tmp_path / "fake_vllm_serve.sh"  # stands in for `trl vllm-serve` dying while it loads
    fake.write_text('#!/bin/bash\necho "fake rollout server: GPUs on this step: ${SLURM_GPUS_ON_NODE:-none}, '
                    'CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}, binding $VLLM_HOST"\n'
                    # behind the key gate, on loopback; the key file already there, private, when the server starts
                    'echo "fake rollout server: on $UNIFIED_ROLLOUT_UPSTREAM, key file mode '
                    '$(stat -c %a "$OUTPUT/rollout_server.key")"\nexit 3\n')
    fake.chmod(0o755)
    log = tmp_path / "warmup.log"
    env = {"PYTHON": sys.executable, "REPO": str(REPO), "RECIPE": "recipes/warmup/embedded_cpu.yaml",
           "NODES": "2", "UNIFIED_HOSTNAMES": f"{cluster.host} {cluster.host}",  # both roles on the one node
           "VLLM_CMD": str(fake), "VLLM_TIMEOUT_S": "600", "OUTPUT": str(tmp_path / "out"), "HF_HUB_OFFLINE": "1"}
    start = time.time()
    job = cluster.sbatch(WARMUP, env=env, cwd=REPO,
                         sbatch_args=("--partition=work", "--nodes=1", "--gpus-per-node=1", f"--output={log}"))
    state = cluster.wait(job, timeout_s=300)
    text = log.read_text()
    assert state["JobState"] == "FAILED", (state, text)
    assert time.time() - start < 240  # not the 600 s the server was allowed to load
    # its own GPU, bound to the step (a character device: slurmd sets CUDA_VISIBLE_DEVICES), the cluster address
    bound = "0" if cluster.char_devices else "unset"
    assert f"fake rollout server: GPUs on this step: 1, CUDA_VISIBLE_DEVICES={bound}, binding 127.0.0.1" in text
    assert "fake rollout server: on 127.0.0.1:8001, key file mode 600" in text
    assert "rollout gate: 127.0.0.1:8000 -> 127.0.0.1:8001" in text
    assert "rollout gate: the rollout server exited (status 3)" in text
    assert "exited before it answered" in text and "accelerate" not in text.split("exited before it answered")[1]
    assert list((tmp_path / "out").iterdir()) == []  # the trainer never started; the key was removed at the end


def test_each_step_is_bound_to_the_gpus_it_asked_for(cluster, tmp_path):
    """The GRES are character devices: slurmd binds them, and each srun step sees the ones it was given."""
    if not cluster.char_devices:
        pytest.skip("mknod not allowed here (not root): the fake GPUs are plain files, which slurmd never binds")
    log = tmp_path / "bind.log"
    script = tmp_path / "bind.sh"
    script.write_text("#!/bin/bash\nfor n in 1 2; do srun --ntasks=1 --gres=gpu:$n bash -c "
                      "'echo \"step $SLURM_STEP_ID gpus=$SLURM_GPUS_ON_NODE cvd=$CUDA_VISIBLE_DEVICES\"'; done\n")
    job = cluster.sbatch(script, sbatch_args=("--partition=work", "--gpus-per-node=2", f"--output={log}"))
    state = cluster.wait(job, timeout_s=120)
    text = log.read_text()
    assert state["JobState"] == "COMPLETED", (state, text, cluster.logs())
    assert re.findall(r"gpus=(\d) cvd=(\S*)", text) == [("1", "0"), ("2", "0,1")], text
