"""How a warmup recipe is laid out on machines: the commands ``--dry-run`` prints.

Three layouts, chosen from ``launch.nodes`` and ``launch.gpus_per_node``:

- one process (CPU, or one GPU): ``python -m unified.warmup --recipe R``; rollouts in-process
  (``hf``) or by vLLM colocated in the trainer (``vllm_colocate``); with ``launch.cpu_processes=N``
  on a CPU node, ``accelerate launch`` of N data-parallel ranks over gloo (``ddp_cpu.yaml``);
- one node, several GPUs: ``accelerate launch`` with the recipe's accelerate config (DeepSpeed
  ZeRO-3 or FSDP2), vLLM colocated;
- several nodes: ``trl vllm-serve`` on the first node (tensor parallel over its GPUs) and
  ``accelerate launch`` on the others (``num_machines = nodes - 1``), the trainer talking to the
  server (``generation.backend=vllm_server``). The server binds ``127.0.0.1`` at port + 1 only; in
  front of it the key gate (:mod:`unified.warmup.rollout_gate`) listens on ``$VLLM_HOST`` (the address
  the trainers reach it at, never ``0.0.0.0``) at the recipe's port and forwards only requests that
  carry the job's key (``<output_dir>/rollout_server.key``, written by the launch; the trainer sends it:
  :mod:`unified.warmup.rollout_client`).

``slurm/lwm_warmup.sh`` runs the same layout under Slurm (a test compares the two).
Placeholders that only the launcher knows are left as shell variables: ``$MACHINE_RANK``,
``$MAIN_PROCESS_IP`` (first trainer node) and ``$VLLM_HOST`` (the server node).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from unified.inference.spec import parse_spec
from unified.models.embedded import embedded_checkpoint_dir
from unified.warmup.config import WarmupConfig
from unified.warmup.rollout_gate import UPSTREAM_HOST, rollout_key_path
from unified.warmup.vllm_routes import SERVER_FLAG

_PLACEHOLDER = re.compile(r"\$[A-Z_][A-Z0-9_]*")


@dataclass
class LaunchStep:
    """One command and where it runs."""

    role: str
    """``trainer`` or ``vllm``."""
    where: str
    """Human description of the machines it runs on."""
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """The command as one shell line; ``$VAR`` placeholders stay unquoted."""
        def q(token: str) -> str:
            if _PLACEHOLDER.search(token) and not re.search(r'["\\`]', token):
                return token if _PLACEHOLDER.fullmatch(token) else f'"{token}"'
            return shlex.quote(token)

        env = " ".join(f"{k}={q(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(q(t) for t in self.argv)


def _tool(name: str, python: str) -> str:
    """A console script of the same environment as ``python`` (``accelerate``, ``trl``), else its bare name."""
    candidate = Path(python).parent / name
    return str(candidate) if os.sep in python and candidate.exists() else name


def _vllm_model(spec: str) -> str:
    """vLLM needs a directory or a hub id (:func:`unified.inference.parse_spec`); the embedded spec is its
    cache directory."""
    parsed = parse_spec(spec, backend="vllm")
    return str(embedded_checkpoint_dir()) if parsed.kind == "embedded" else parsed.checkpoint


def launch_plan(cfg: WarmupConfig, recipe: str | None, overrides: list[str], *, python: str | None = None,
                resume_anyway: bool = False) -> list[LaunchStep]:
    """The commands that run ``cfg`` on ``launch.nodes`` x ``launch.gpus_per_node``.

    ``python`` defaults to this interpreter; ``accelerate`` and ``trl`` are taken from its
    environment. ``overrides`` are repeated as ``--set`` flags so every process sees the same recipe;
    ``resume_anyway`` passes ``--resume-anyway`` on (:mod:`unified.warmup.identity`).
    """
    python = python or sys.executable
    nodes, gpus = cfg.launch.nodes, cfg.launch.gpus_per_node
    entry = ["-m", "unified.warmup"] + (["--recipe", recipe] if recipe else [])
    sets = [a for o in overrides for a in ("--set", o)] + (["--resume-anyway"] if resume_anyway else [])
    if cfg.launch.cpu_data_parallel():
        accel_cfg = cfg.accelerate_config_path()
        argv = [_tool("accelerate", python), "launch", "--config_file", _display_path(accel_cfg),
                "--num_machines", "1", "--num_processes", str(cfg.launch.cpu_processes),
                "--main_process_port", str(cfg.launch.main_process_port), *entry, *sets]
        extra = [] if cfg.generation.backend == "hf" else ["--set", "generation.backend=hf"]
        return [LaunchStep("trainer", f"this machine ({cfg.launch.cpu_processes} CPU processes, gloo)", argv + extra)]
    if nodes == 1 and gpus <= 1:
        extra = []
        if gpus == 0 and cfg.generation.backend != "hf":
            extra = ["--set", "generation.backend=hf"]
        return [LaunchStep("trainer", "this machine (one process)", [python, *entry, *sets, *extra])]

    accel_cfg = cfg.accelerate_config_path()
    accel = [_tool("accelerate", python), "launch"]
    if accel_cfg is not None:
        accel += ["--config_file", _display_path(accel_cfg)]
    if nodes == 1:
        backend = [] if cfg.generation.backend == "vllm_colocate" or cfg.generation.backend == "hf" else \
            ["--set", "generation.backend=vllm_colocate"]
        argv = accel + ["--num_machines", "1", "--num_processes", str(gpus), *entry, *sets, *backend]
        return [LaunchStep("trainer", f"one node, {gpus} processes", argv)]

    trainer_nodes = nodes - 1
    vllm = LaunchStep("vllm", "node 0 (loopback, behind the key gate)", [
        *rollout_gate_argv(cfg, python),
        _tool("trl", python), "vllm-serve", "--model", _vllm_model(cfg.model.name_or_path),
        "--tensor-parallel-size", str(max(gpus, 1)), "--host", UPSTREAM_HOST,
        "--port", str(upstream_port(cfg)),
        *(["--max-model-len", str(cfg.generation.vllm_max_model_length)]
          if cfg.generation.vllm_max_model_length else []),
        # R3: vLLM returns each completion's routed experts (unified/warmup/vllm_routes.py)
        *([SERVER_FLAG] if cfg.moe.routing_replay != "off" else []),
    ])
    trainer = LaunchStep("trainer", f"nodes 1..{nodes - 1} ({trainer_nodes * gpus} processes)", accel + [
        "--num_machines", str(trainer_nodes), "--num_processes", str(trainer_nodes * gpus),
        "--machine_rank", "$MACHINE_RANK", "--main_process_ip", "$MAIN_PROCESS_IP",
        "--main_process_port", str(cfg.launch.main_process_port),
        *entry, *sets, "--set", "generation.backend=vllm_server", "--set", "generation.vllm_server_host=$VLLM_HOST",
    ])
    return [vllm, trainer]


def upstream_port(cfg: WarmupConfig) -> int:
    """The rollout server's own port on node 0's loopback: the public port + 1 (- 1 at 65535)."""
    port = cfg.generation.vllm_server_port
    return port + 1 if port < 65535 else port - 1


def rollout_gate_argv(cfg: WarmupConfig, python: str | None = None) -> list[str]:
    """The key gate in front of the rollout server, up to the ``--`` that the server command follows."""
    return [python or sys.executable, "-m", "unified.warmup.rollout_gate", "serve",
            "--key-file", str(rollout_key_path(cfg.output_dir)), "--host", "$VLLM_HOST",
            "--port", str(cfg.generation.vllm_server_port), "--upstream-port", str(upstream_port(cfg)), "--"]


def _display_path(path: Path) -> str:
    """Relative to the working directory when inside it (the commands run from the checkout)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def step_for_role(steps: list[LaunchStep], role: str) -> LaunchStep | None:
    return next((s for s in steps if s.role == role), None)


def format_plan(steps: list[LaunchStep]) -> str:
    lines = []
    for i, step in enumerate(steps, 1):
        lines.append(f"# {i}. {step.role} on {step.where}")
        lines.append(step.shell())
    return "\n".join(lines)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def vllm_rollouts_blocker(cfg: WarmupConfig) -> str | None:
    """Why the recipe's vLLM rollouts cannot run on this machine (no CUDA), or None when they can.

    ``vllm_server``: TRL's trainer pushes its updated weights into ``trl vllm-serve`` after each
    step through a NCCL communicator (``VLLMClient.init_communicator``/``update_named_param``);
    NCCL is CUDA-only, so both sides need CUDA GPUs, even where vLLM itself can serve on a CPU.
    ``vllm_colocate``: TRL starts vLLM on the trainer's own GPU. ``hf`` runs anywhere.
    """
    backend = cfg.generation.backend
    if backend == "hf":
        return None
    import torch

    if torch.cuda.is_available():
        return None
    if backend == "vllm_server":
        return ("generation.backend=vllm_server needs CUDA: TRL syncs the trainer's weights into the vLLM "
                "server over NCCL after every step, and NCCL has no CPU transport; this machine has no CUDA "
                "GPU (use generation.backend=hf here)")
    return ("generation.backend=vllm_colocate needs CUDA: TRL runs vLLM on the trainer's GPU; this machine has "
            "no CUDA GPU (use generation.backend=hf here)")
