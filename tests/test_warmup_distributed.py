"""Several trainer processes on CPUs, launched as on a cluster: step equivalence, kill and resume under Slurm.

- one GSPO step of 2 data-parallel processes (gloo) equals one step of 1 process on the same global
  batch (``tests/_gspo_step_program.py`` says what is fixed and why);
- ``slurm/lwm_warmup.sh`` with ``CPU_PROCESSES=2 DISTRIBUTED=ddp`` (``accelerate launch`` under
  ``srun``, as on GPU nodes) on the one-node Slurm of ``tests/_slurm_cluster.py``: the job is
  cancelled after its first checkpoint, a second job resumes from it and finishes;
- the CPU layouts that cannot run say why (fsdp2: accelerate applies FSDP only on accelerators).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _slurm_cluster import SlurmCluster, free_port, require_slurm
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

from unified.warmup.callbacks import METRICS_FILE, read_metrics

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent
PYTHON = sys.executable
SCRIPT = REPO / "slurm" / "lwm_warmup.sh"
CPU_RECIPE = "recipes/warmup/embedded_cpu.yaml"

# fp32 on both sides; the all-reduce sums the two ranks' gradients in another order than one
# process sums the batch. Measured: loss identical, gradients 3e-8 apart (largest 0.26), weights
# after one AdamW step (lr 1e-3) 1.8e-6 apart: Adam divides by |g| + eps, so for the entries with
# |g| near eps (1e-8) a rounding-size change of g moves the step by a visible part of lr.
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-4
WEIGHT_ATOL = 1e-5  # 1% of the learning rate


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _one_step(out: Path, launcher: list[str], *overrides: str) -> dict:
    """``tests/_gspo_step_program.py`` under ``launcher`` (empty: one plain process); its ``step.pt``."""
    import torch

    out.mkdir()
    cmd = [PYTHON, *launcher, str(TESTS / "_gspo_step_program.py"), str(out), *overrides]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                          cwd=out.parent, timeout=400)
    assert done.returncode == 0, done.stdout[-4000:]
    return torch.load(out / "step.pt")


def _accelerate(config: Path) -> list[str]:
    return ["-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "2",
            "--main_process_port", str(free_port())]


def assert_same_step(a: dict, b: dict, *, extra_grads_zero: bool = False) -> None:
    """Step ``b`` (2 processes) equals step ``a`` (1 process): loss, gradients, updated weights within
    the fp32 tolerances above. ``extra_grads_zero``: ``b`` may have gradients where ``a`` has none
    (ZeRO-3 reports a zero gradient for an expert no token reached; one process reports None)."""
    import torch

    assert (a["world"], b["world"]) == (1, 2)
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-6, abs=1e-7)
    if extra_grads_zero:
        for name in b["grads"].keys() - a["grads"].keys():
            assert not b["grads"][name].any(), name
    else:
        assert a["grads"].keys() == b["grads"].keys()
    assert a["grads"].keys() <= b["grads"].keys() and len(a["grads"]) > 10
    assert any(g.abs().max() > 1e-3 for g in a["grads"].values())  # a step that moves something
    for name, grad in a["grads"].items():
        torch.testing.assert_close(b["grads"][name], grad, atol=GRAD_ATOL, rtol=GRAD_RTOL, msg=name)
    moved = 0
    assert a["weights"].keys() == b["weights"].keys()
    for name, weight in a["weights"].items():
        torch.testing.assert_close(b["weights"][name], weight, atol=WEIGHT_ATOL, rtol=0, msg=name)
        moved += name in a["grads"]
    assert moved == len(a["grads"])


NO_CLIP = 1e6  # ZeRO-3's engine clips to gradient_clipping inside its step; one process clips nothing


@pytest.fixture(scope="module")
def one_process_step(tmp_path_factory) -> dict:
    """The one-process step both layouts below are compared with (one run of it, not one per layout: the program
    is the same, and ``train.max_grad_norm`` is passed to every run so each comparison is like for like)."""
    return _one_step(tmp_path_factory.mktemp("one-process") / "one", [], f"train.max_grad_norm={NO_CLIP}")


@pytest.mark.slow
def test_one_gspo_step_of_two_processes_equals_one_process(tmp_path, one_process_step):
    b = _one_step(tmp_path / "two", _accelerate(REPO / "recipes/accelerate/ddp_cpu.yaml"),
                  f"train.max_grad_norm={NO_CLIP}")
    assert_same_step(one_process_step, b)


@pytest.mark.slow
def test_one_zero3_step_of_two_processes_equals_one_process(tmp_path, one_process_step):
    """DeepSpeed ZeRO-3 on 2 CPU processes (its CPU accelerator, gloo): the same step as one process."""
    pytest.importorskip("deepspeed", reason="deepspeed is not installed (`make setup` installs the `deepspeed` "
                        "extra unless DEEPSPEED=0)")
    import yaml

    config = yaml.safe_load((REPO / "recipes/accelerate/deepspeed_zero3_cpu.yaml").read_text())
    config["deepspeed_config"]["gradient_clipping"] = NO_CLIP
    path = tmp_path / "zero3.yaml"
    path.write_text(yaml.safe_dump(config))
    a = one_process_step
    b = _one_step(tmp_path / "two", _accelerate(path), f"train.max_grad_norm={NO_CLIP}")
    assert b["layout"] == "DEEPSPEED"
    assert_same_step(a, b, extra_grads_zero=True)


def _dry_run(**env: str) -> subprocess.CompletedProcess:
    full = {**_env(), "PYTHON": PYTHON, "REPO": str(REPO), "DRY_RUN": "1", "UNIFIED_HOSTNAMES": "solo",
            "RECIPE": CPU_RECIPE, "GPUS_PER_NODE": "0", **env}
    return subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.slow  # four dry runs of the script, each Python start-ups: 10-20 s one after the other; run at once
def test_cpu_processes_are_an_accelerate_launch_under_srun_and_fsdp2_says_why_not():
    from concurrent.futures import ThreadPoolExecutor

    layouts = [dict(CPU_PROCESSES="2", DISTRIBUTED="ddp", MAIN_PORT="29611"),
               dict(CPU_PROCESSES="2", DISTRIBUTED="deepspeed_zero3"), dict(CPU_PROCESSES="2", DISTRIBUTED="fsdp2"),
               dict(CPU_PROCESSES="2", DISTRIBUTED="ddp", GPUS_PER_NODE="4")]
    with ThreadPoolExecutor(len(layouts)) as pool:
        out, zero3, fsdp, gpus = pool.map(lambda env: _dry_run(**env), layouts)
    assert out.returncode == 0, out.stderr
    srun = [line for line in out.stdout.splitlines() if line.startswith("srun ")]
    assert len(srun) == 1 and "--ntasks=1" in srun[0]  # one launcher per node, as for GPUs
    for piece in (r"accelerate\ launch\ --config_file\ recipes/accelerate/ddp_cpu.yaml", r"--num_processes\ 2",
                  r"--main_process_port\ 29611", r"launch.distributed=ddp", r"launch.cpu_processes=2"):
        assert piece in srun[0], piece
    assert zero3.returncode == 0 and r"--config_file\ recipes/accelerate/deepspeed_zero3_cpu.yaml" in zero3.stdout
    assert fsdp.returncode != 0
    assert "launch.distributed=fsdp2 with launch.cpu_processes=2: accelerate (1.15) applies FSDP only on " \
           "accelerator devices" in fsdp.stderr
    assert gpus.returncode != 0 and "several CPU processes need launch.nodes=1 and launch.gpus_per_node=0" in gpus.stderr


def _first_checkpoint(output: Path, cluster: SlurmCluster, job: int, timeout_s: float = 600) -> int:
    """The step of the first complete checkpoint the running job writes."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        done = sorted(int(p.parent.name.split("-")[1]) for p in output.glob("checkpoint-*/trainer_state.json"))
        if done:
            return done[0]
        state = cluster.job_state(job).get("JobState")
        assert state in ("PENDING", "RUNNING", "CONFIGURING"), f"job {job} ended ({state}) before a checkpoint"
        time.sleep(0.3)
    raise TimeoutError(f"no checkpoint in {output} after {timeout_s}s")


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and text in cmdline and int(proc.name) != os.getpid():
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


@pytest.mark.slow
def test_sbatch_two_cpu_processes_cancelled_after_a_checkpoint_resume_and_finish(tmp_path, tiny_checkpoint, slurm_cluster):
    require_slurm()
    data = write_fixture_awb_dir(tmp_path / "data")
    output = tmp_path / "out"
    env = {"PYTHON": PYTHON, "REPO": str(REPO), "RECIPE": CPU_RECIPE, "GPUS_PER_NODE": "0", "CPU_PROCESSES": "2",
           "DISTRIBUTED": "ddp", "MAIN_PORT": str(free_port()), "MODEL": str(tiny_checkpoint), "DATA": str(data),
           "OUTPUT": str(output), "HF_HUB_OFFLINE": "1"}
    steps = 30  # a step of the tiny model takes ~0.3 s: enough of them that the job is cancelled mid-way
    args = tiny_cli_overrides(None, None, None, f"train.max_steps={steps}", "train.save_steps=2",
                              "train.per_device_train_batch_size=2")
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    cluster = slurm_cluster
    job = cluster.sbatch(SCRIPT, *args, env=env, cwd=REPO,
                         sbatch_args=("--nodes=1", "--exclusive", "--gpus-per-node=0", f"--output={first_log}",
                                      "--job-name=warm1"))  # a CPU job (the script asks for GPUs)
    saved = _first_checkpoint(output, cluster, job)
    subprocess.run(["scancel", str(job)], env=cluster.env(), check=True)  # the whole job: srun, accelerate, ranks
    state = cluster.wait(job, timeout_s=120)
    assert state["JobState"] == "CANCELLED", state
    assert not (output / "final").exists() and saved < steps
    deadline = time.time() + 30
    while _processes_mentioning(str(output)) and time.time() < deadline:
        time.sleep(1)
    assert not _processes_mentioning(str(output))  # no rank outlives its job
    text = cluster.run_job(SCRIPT, *args, log=second_log, name="warm2", env=env, cwd=REPO)
    assert "lwm_warmup: done" not in first_log.read_text()
    resumed = [line for line in text.splitlines() if "unified.warmup: resuming from" in line]
    assert len(resumed) == 2 and all("checkpoint-" in line for line in resumed), text[-3000:]  # both ranks
    run = json.loads((output / "run.json").read_text())
    assert run["global_step"] == steps and int(run["resumed_from"].rsplit("-", 1)[1]) >= saved
    assert {int(r["step"]) for r in read_metrics(output / METRICS_FILE) if "loss" in r} == set(range(1, steps + 1))
    assert {p.name for p in (output / f"checkpoint-{steps}").glob("rng_state_*.pth")} == {"rng_state_0.pth",
                                                                                   "rng_state_1.pth"}
    from unified.models import load_checkpoint

    assert load_checkpoint(output / "final", device="cpu").model.config.model_type == "qwen3_moe"


@pytest.mark.slow
def test_deepspeed_zero3_on_two_cpu_processes_trains_shards_and_resumes(tmp_path, tiny_checkpoint):
    """ZeRO-3 for real on CPUs (DeepSpeed's CPU accelerator, gloo): the launch plan's command, run twice."""
    pytest.importorskip("deepspeed", reason="deepspeed is not installed (`make setup` installs the `deepspeed` "
                        "extra unless DEEPSPEED=0)")
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"

    def launch(max_steps: int) -> str:
        args = ["--recipe", CPU_RECIPE, *tiny_cli_overrides(
            tiny_checkpoint, data, out, f"train.max_steps={max_steps}", "train.save_steps=1",
            "train.per_device_train_batch_size=2", "model.trainable_layers=null", "launch.cpu_processes=2",
            "launch.distributed=deepspeed_zero3", f"launch.main_process_port={free_port()}")]
        plan = subprocess.run([PYTHON, "-m", "unified.warmup", *args, "--print-command", "trainer"], env=_env(),
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        assert plan.returncode == 0 and "deepspeed_zero3_cpu.yaml" in plan.stdout, plan.stderr
        done = subprocess.run(["bash", "-c", plan.stdout.strip()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=_env(), cwd=REPO, timeout=500)
        assert done.returncode == 0, done.stdout[-4000:]
        return done.stdout

    first = launch(1)
    assert first.count("unified.warmup: 1 steps") == 2
    shards = {p.name for p in (out / "checkpoint-1" / "global_step1").glob("*model_states.pt")}
    assert shards == {"zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt"}
    second = launch(2)
    assert second.count("resuming from") == 2 and "checkpoint-1" in second
    assert json.loads((out / "run.json").read_text())["global_step"] == 2
    from unified.models import load_checkpoint

    assert load_checkpoint(out / "final", device="cpu").model.config.model_type == "qwen3_moe"  # gathered weights
