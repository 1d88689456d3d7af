"""``python -m unified.warmup``: shipped recipes, --dry-run, errors, resume after SIGKILL, GPU paths."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

from unified.warmup.__main__ import main
from unified.warmup.callbacks import METRICS_FILE, read_metrics
from unified.warmup.config import load_warmup_config

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes" / "warmup").glob("*.yaml"))
ACCELERATE = sorted((REPO / "recipes" / "accelerate").glob("*.yaml"))


def test_the_two_required_recipes_ship():
    names = {p.name for p in RECIPES}
    assert {"embedded_cpu.yaml", "qwen35_35b_a3b.yaml"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_shipped_recipe_parses_and_dry_runs(recipe, capsys):
    cfg = load_warmup_config(recipe)
    assert cfg.gspo.importance_sampling_level == "sequence" and cfg.gspo.beta == 0.0
    needs_judge = any(e.name == "rubric" and e.weight for e in cfg.rewards)
    judge = ["--set", "rewards.rubric.judge_endpoint=openai:http://judge:8001/v1#judge"] if needs_judge else []
    assert main(["--recipe", str(recipe), "--dry-run", *judge]) == 0
    out = capsys.readouterr().out
    resolved = yaml.safe_load(out.split("# objective:")[0])
    assert resolved["model"]["name_or_path"] == cfg.model.name_or_path
    assert resolved["gspo"]["epsilon"] == 3e-4 and resolved["gspo"]["epsilon_high"] == 4e-4
    assert "-m unified.warmup --recipe" in out


def test_paper_recipe_matches_the_paper_setting(capsys):
    cfg = load_warmup_config(REPO / "recipes" / "warmup" / "qwen35_35b_a3b.yaml")
    assert cfg.data.max_prompt_tokens == 55296  # the paper's 128k capped where the memory/time plan fits with its margins
    assert [(e.name, e.weight, e.training_only) for e in cfg.rewards] == [("rubric", 0.9, False), ("rule", 0.1, False)]
    assert cfg.model.gradient_checkpointing and cfg.generation.backend == "vllm_server"
    main(["--recipe", str(REPO / "recipes" / "warmup" / "qwen35_35b_a3b.yaml"), "--dry-run"])
    out = capsys.readouterr().out
    assert "vllm-serve --model Qwen/Qwen3.5-35B-A3B --tensor-parallel-size 8" in out
    assert "--config_file recipes/accelerate/deepspeed_zero3.yaml --num_machines 3 --num_processes 24" in out
    assert "# memory/time plan (qwen3.5-35b-a3b" in out and "vs collective timeout 2,400 s" in out


def test_dry_run_follows_overrides_and_shortcuts(capsys, tmp_path):
    recipe = REPO / "recipes" / "warmup" / "embedded_cpu.yaml"
    assert main(["--recipe", str(recipe), "--dry-run", "--model", "some/model", "--output-dir", str(tmp_path),
                 "--set", "train.max_steps=9", "--set", "launch.gpus_per_node=4",
                 "--set", "launch.distributed=fsdp2"]) == 0
    out = capsys.readouterr().out
    resolved = yaml.safe_load(out.split("# objective:")[0])
    assert resolved["train"]["max_steps"] == 9 and resolved["model"]["name_or_path"] == "some/model"
    assert "recipes/accelerate/fsdp2.yaml --num_machines 1 --num_processes 4" in out
    assert "generation.backend" not in out  # the recipe's in-process rollouts are kept
    main(["--recipe", str(REPO / "recipes/warmup/qwen35_35b_a3b.yaml"), "--dry-run", "--set", "launch.nodes=1"])
    out = capsys.readouterr().out
    assert "--num_machines 1 --num_processes 8" in out and "vllm-serve" not in out
    assert "generation.backend=vllm_colocate" in out  # no server node: vLLM colocated with the trainer


def test_bad_recipe_key_names_file_and_line(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("output_dir: x\ngspo:\n  epsilon: 0.1\n  epsilonhigh: 0.2\n")
    assert main(["--recipe", str(recipe), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}:4" in err and "epsilonhigh" in err and "epsilon_high" in err


@pytest.mark.parametrize("config", ACCELERATE, ids=lambda p: p.name)
def test_accelerate_configs_load(config):
    from accelerate.commands.config.config_args import ClusterConfig

    cluster = ClusterConfig.from_yaml_file(str(config))
    assert cluster.mixed_precision == ("no" if config.stem.endswith("_cpu") else "bf16")  # fp32 on CPUs
    if config.stem.endswith("_cpu"):  # N ranks over gloo (see the files)
        assert cluster.use_cpu and cluster.distributed_type == ("DEEPSPEED" if "deepspeed" in config.stem else "MULTI_GPU")
    if config.stem == "deepspeed_zero3":
        assert cluster.deepspeed_config["zero_stage"] == 3 and cluster.deepspeed_config["zero3_init_flag"]
        assert cluster.deepspeed_config["zero3_save_16bit_model"]  # the final dir gets full weights
    if config.stem == "fsdp2":
        assert cluster.fsdp_config["fsdp_version"] == 2
        assert cluster.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def _wait_for_checkpoint(out: Path, step: int, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    state = out / f"checkpoint-{step}" / "trainer_state.json"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (rc={proc.returncode}) before checkpoint-{step}")
        try:
            if json.loads(state.read_text()).get("global_step") == step:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint-{step} after {timeout_s}s")


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(tmp_path, tiny_checkpoint):
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "unified.warmup", "--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"),
           *tiny_cli_overrides(tiny_checkpoint, data, out, "train.max_steps=12", "train.save_steps=3",
                               "train.save_total_limit=null")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        try:
            _wait_for_checkpoint(out, 3, first)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
    assert first.returncode == -signal.SIGKILL
    assert not (out / "final").exists()
    first_records = [r for r in read_metrics(out / METRICS_FILE) if "loss" in r]
    killed_at = first_records[-1]["step"]
    assert killed_at < 12

    second = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    resumed = [line for line in second.stdout.splitlines() if line.startswith("unified.warmup: resuming from")]
    assert len(resumed) == 1
    resumed_step = int(resumed[0].rsplit("checkpoint-", 1)[1])
    assert 3 <= resumed_step <= killed_at and resumed_step % 3 == 0
    state = json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["global_step"] == 12 and not list(out.glob("checkpoint-1[3-9]"))  # exactly max_steps
    records = [r for r in read_metrics(out / METRICS_FILE) if "loss" in r]
    second_steps = [r["step"] for r in records[len(first_records):]]
    assert second_steps == list(range(resumed_step + 1, 13))  # picks up right after the checkpoint
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from"].endswith(f"checkpoint-{resumed_step}") and run["global_step"] == 12
    from unified.kernels import select_kernels

    chosen = select_kernels("cpu", torch.float32)  # what load_checkpoint was asked for on this CPU
    assert (run["kernels"]["attention"], run["kernels"]["experts"]) == (chosen.attention, chosen.experts)
    assert run["kernels"]["linear_attention"] == chosen.linear_attention == "torch"

    from unified.models import load_checkpoint

    loaded = load_checkpoint(out / "final", device="cpu")
    assert loaded.tokenizer.chat_template


# ---- GPU paths (skipped on CPU; `make test-gpu`) ---------------------------------------------------

def _gpu_launch(tmp_path, tiny_checkpoint, *extra: str, accelerate_config: str | None = None) -> subprocess.CompletedProcess:
    import torch

    data = write_fixture_awb_dir(tmp_path / "data")
    args = ["-m", "unified.warmup", "--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"),
            *tiny_cli_overrides(tiny_checkpoint, data, tmp_path / "run", "train.max_steps=2", *extra)]
    if accelerate_config:
        n = torch.cuda.device_count()
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "recipes/accelerate" / accelerate_config), "--num_processes", str(n), "--num_machines", "1",
               *args]
    else:
        cmd = [sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["fsdp2.yaml", "deepspeed_zero3.yaml"])
def test_gpu_distributed_configs_train_and_save(tmp_path, tiny_checkpoint, config):
    if config.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    done = _gpu_launch(tmp_path, tiny_checkpoint, accelerate_config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    from unified.models import load_checkpoint

    load_checkpoint(tmp_path / "run" / "final")


@pytest.mark.gpu
def test_gpu_vllm_colocate_rollouts(tmp_path, tiny_checkpoint):
    pytest.importorskip("vllm")
    done = _gpu_launch(tmp_path, tiny_checkpoint, "generation.backend=vllm_colocate",
                       "generation.vllm_gpu_memory_utilization=0.2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "final" / "config.json").is_file()


@pytest.mark.gpu
def test_gpu_vllm_server_rollouts(tmp_path, tiny_checkpoint):
    """A real `trl vllm-serve` on this GPU behind the key gate, as the multi-node launch runs it (the key written
    first, the server on 127.0.0.1 at port + 1), and the trainer talking to it with the job's key: generation,
    the NCCL weight-transfer routes and every sync pass through the gate (the multi-node layout on one box)."""
    pytest.importorskip("vllm")
    import socket
    import urllib.error
    import urllib.request

    from unified.warmup.rollout_gate import rollout_key_path, write_new_key

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key_file = write_new_key(rollout_key_path(tmp_path / "run"))
    gate_log = tmp_path / "gate.log"
    with gate_log.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "unified.warmup.rollout_gate", "serve", "--key-file", str(key_file), "--host",
             "127.0.0.1", "--port", str(port), "--upstream-port", str(port + 1), "--",
             sys.executable, "-m", "trl.cli", "vllm-serve", "--model", str(tiny_checkpoint), "--host", "127.0.0.1",
             "--port", str(port + 1), "--gpu-memory-utilization", "0.3"],
            stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        done = _gpu_launch(tmp_path, tiny_checkpoint, "generation.backend=vllm_server",
                           "generation.vllm_server_host=127.0.0.1", f"generation.vllm_server_port={port}",
                           "generation.vllm_server_timeout_s=600")
        assert done.returncode == 0, done.stderr[-3000:]
        with pytest.raises(urllib.error.HTTPError, match="401"):  # the same server, asked without the key
            urllib.request.urlopen(f"http://127.0.0.1:{port}/get_world_size", timeout=30)
    finally:
        server.terminate()  # the gate stops the server's process group, then exits
        server.wait(timeout=120)
    text = gate_log.read_text()
    assert "rollout gate: refused GET /get_world_size from 127.0.0.1: no Authorization header" in text
    assert key_file.read_text().strip() not in text + done.stdout + done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without CUDA")
def test_dry_run_says_vllm_rollouts_need_cuda_on_a_cpu_machine(capsys, tmp_path):
    """TRL's vLLM server mode syncs weights over NCCL: the dry run says why it cannot run here, and a run refuses."""
    main(["--recipe", str(REPO / "recipes/warmup/qwen35_35b_a3b.yaml"), "--dry-run"])
    out = capsys.readouterr().out
    assert "# not on this machine: generation.backend=vllm_server needs CUDA" in out and "NCCL" in out
    main(["--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"), "--dry-run"])
    assert "not on this machine" not in capsys.readouterr().out
    from unified.warmup.trainer import run_warmup

    cfg = load_warmup_config(REPO / "recipes/warmup/embedded_cpu.yaml",
                             [f"output_dir={tmp_path}", "generation.backend=vllm_colocate"])
    with pytest.raises(RuntimeError, match="vllm_colocate needs CUDA"):
        run_warmup(cfg)
    assert not any(tmp_path.iterdir())  # refused before writing anything


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU line")
def test_dry_run_reports_the_kernels_with_linear_attention(capsys):
    assert main(["--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"), "--dry-run"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# kernels")]
    assert line.startswith("# kernels on this machine (cpu, float32): attention=sdpa")
    assert "linear_attention=torch" in line and "linear attention: cpu device" in line
