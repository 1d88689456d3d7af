"""The checks of ``scripts/gpu_checks.sh``, one per subcommand; each writes ``OUT/<check>.json``.

    python -m measurements.gpu_checks imports OUT          # the lock's packages import, at the lock's versions
    python -m measurements.gpu_checks flash_attention OUT  # FlashAttention 2 vs SDPA at head dim 256 (bf16)
    python -m measurements.gpu_checks layer_bench OUT      # one Qwen3.5-35B-A3B-shaped linear + full attention
                                                           # layer pair (MoE each) fwd+bwd at 32k/64k/128k tokens,
                                                           # Gated DeltaNet with and without its kernels
    python -m measurements.gpu_checks colocate OUT         # two warmup steps, colocated vLLM, weights change
    python -m measurements.gpu_checks server_sync OUT      # two GPUs: trl vllm-serve on one, the trainer on the
                                                           # other; after one update at a large lr the server's
                                                           # log-probs match the trainer's (the sync worked)

``--device cpu`` runs each check's CPU variant, on the same code path at small sizes (what CI runs, so an
ImportError or a wrong metric key fails CI, not a GPU allocation): ``imports`` the lock's packages that the
CPU stack pins too (requirements/cpu-constraints.txt), at the lock's versions; ``flash_attention`` the same
parity code with SDPA against eager; ``layer_bench`` the layer pair at a tiny shape and 64/128 tokens;
``colocate`` the same warmup command with ``generation.backend=hf``; ``server_sync`` builds the two commands
(the launch plan) and skips the run (it needs two GPUs).

Exit status 0: passed; 1: failed (the JSON says why); 77: skipped (no CUDA, or a package the check needs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = 77
CHECKS = ("imports", "flash_attention", "layer_bench", "colocate", "server_sync")
# import name -> distribution name in requirements/gpu-lock.txt
LOCKED_IMPORTS = {"torch": "torch", "transformers": "transformers", "trl": "trl", "vllm": "vllm",
                  "flash_attn": "flash-attn", "fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d",
                  "deepspeed": "deepspeed", "accelerate": "accelerate", "triton": "triton"}
# Qwen3.5-35B-A3B's text config (the published config.json): the shapes of one layer of each kind
QWEN35_35B_A3B = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                      linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                      linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=256, num_experts_per_tok=8,
                      moe_intermediate_size=512, shared_expert_intermediate_size=512)
# the CPU variant of layer_bench: both layer kinds, sizes that run in well under a second
TINY_LAYER_SHAPE = dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                        linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                        shared_expert_intermediate_size=16)


class Skip(Exception):
    """The check cannot run here (said in its JSON, exit status 77)."""


def _cuda():
    import torch

    if not torch.cuda.is_available():
        raise Skip("no CUDA device (torch.cuda.is_available() is False)")
    return torch


def check_imports(out: Path, device: str = "cuda") -> dict:
    """Each package of the lock imports and has the lock's version (CPU: those the CPU stack pins too)."""
    from importlib.metadata import version

    if device == "cuda":
        _cuda()  # the lock is CUDA's stack: on a machine without CUDA there is nothing to check
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_lock import read_pins

    locked = read_pins(ROOT / "requirements/gpu-lock.txt")
    modules = LOCKED_IMPORTS
    if device == "cpu":
        cpu_pins = read_pins(ROOT / "requirements/cpu-constraints.txt")
        modules = {m: d for m, d in LOCKED_IMPORTS.items() if d in cpu_pins}
    rows, ok = {}, bool(modules)
    for module, dist in modules.items():
        row = {"locked": locked.get(dist)}
        try:
            __import__(module)
            row["installed"] = version(dist).split("+")[0]
            row["ok"] = row["installed"] == row["locked"]
        except Exception as exc:  # an ImportError, or a kernel package failing to load its library
            row.update(installed=None, ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        ok &= row["ok"]
        rows[module] = row
    import torch

    return {"passed": ok, "packages": rows, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def check_flash_attention(out: Path, seq_len: int = 2048, device: str = "cuda") -> dict:
    """FlashAttention 2 against SDPA at head dim 256 (CPU: SDPA against eager, fp32, the same parity code)."""
    if device == "cpu":
        import torch

        candidate, reference, dtype, seq_len = "sdpa", "eager", torch.float32, min(seq_len, 64)
    else:
        torch = _cuda()
        try:
            import flash_attn  # noqa: F401
        except ImportError as exc:
            raise Skip(f"flash-attn does not import: {exc}") from exc
        candidate, reference, dtype = "flash_attention_2", "sdpa", torch.bfloat16
    from unified.kernels import attention_parity

    report = attention_parity(candidate, reference=reference, arch="qwen3_5_moe", device=device,
                              dtype=dtype, batch=2, seq_len=seq_len, repeats=3,
                              model_kwargs={"head_dim": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
                                            "hidden_size": 512, "num_layers": 2})
    return {"passed": report.passed, "device": device, "head_dim": 256, "seq_len": seq_len, **report.to_dict()}


def layer_pair(shape: dict, *, device: str = "cuda", attention: str = "sdpa", dtype=None):
    """(text model, its modeling module's name): two decoder layers of ``shape`` (Gated DeltaNet + MoE,
    full attention + MoE), random weights, built on ``device`` (bf16 by default)."""
    import torch
    from transformers import AutoModelForCausalLM

    from unified.models.tiny import tiny_moe_config

    config = tiny_moe_config("qwen3_5_moe", vocab_size=1024, num_layers=2, **shape, max_position_embeddings=262144)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype or torch.bfloat16, attn_implementation=attention,
                                                 experts_implementation="grouped_mm")
    return model.model, type(model).__module__


def forward_backward(model, tokens: int) -> tuple[float, float | None, object]:
    """(seconds, peak CUDA GiB or None on CPU, output) of one forward+backward over one ``tokens``-long sequence
    (inputs_embeds of the model's hidden size, loss ``mean(out ** 2)``)."""
    import torch

    param = next(model.parameters())
    cuda = param.device.type == "cuda"
    gen = torch.Generator(device=param.device).manual_seed(tokens)
    x = torch.randn(1, tokens, model.config.hidden_size, device=param.device, dtype=param.dtype, generator=gen)
    x.requires_grad_(True)
    model.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    out = model(inputs_embeds=x, use_cache=False).last_hidden_state
    out.float().square().mean().backward()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, torch.cuda.max_memory_allocated() / 2**30 if cuda else None, out.detach()


def bench_layers(model, module: str, tokens: tuple[int, ...], impls: tuple[str, ...], *, budget_s: float,
                 warmup_tokens: int) -> tuple[list[dict], float | None]:
    """Rows ``{linear_attention, tokens, seconds, peak_gib, tokens_per_s}`` (or ``skipped`` / ``error``) for each
    implementation and length, and the relative output difference of the first two implementations at the
    first length. A length whose time, extrapolated linearly from the last, would pass ``budget_s`` is skipped."""
    import torch

    from unified.kernels import apply_linear_attention

    rows, outputs, start = [], [], time.perf_counter()
    for impl in impls:
        apply_linear_attention(impl, [module])
        forward_backward(model, warmup_tokens)  # Triton autotuning, cuBLAS handles
        last, prev_n = 0.0, tokens[0]
        for n in tokens:
            left = budget_s - (time.perf_counter() - start)
            if last and last * (n / prev_n) * 1.2 > left:
                rows.append({"linear_attention": impl, "tokens": n,
                             "skipped": f"~{last * n / prev_n:.0f} s > {left:.0f} s left"})
                continue
            try:
                seconds, peak, output = forward_backward(model, n)
            except torch.cuda.OutOfMemoryError as exc:
                rows.append({"linear_attention": impl, "tokens": n, "error": f"OOM: {str(exc)[:200]}"})
                torch.cuda.empty_cache()
                continue
            rows.append({"linear_attention": impl, "tokens": n, "seconds": round(seconds, 3),
                         "peak_gib": None if peak is None else round(peak, 2), "tokens_per_s": round(n / seconds)})
            if n == tokens[0]:
                outputs.append(output.float())
            last, prev_n = seconds, n
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    diff = None
    if len(outputs) >= 2:
        first, second = outputs[:2]
        diff = (first - second).abs().max().item() / max(second.abs().max().item(), 1e-30)
    return rows, diff


def check_layer_bench(out: Path, tokens: tuple[int, ...] = (32768, 65536, 131072), budget_s: float = 200,
                      device: str = "cuda") -> dict:
    """The layer pair's forward+backward at each length; with the kernels installed, FLA against the torch
    reference (the kernels' presence is the ``imports`` check's concern: without them only the reference is
    timed, and that passes). CPU: the tiny shape at 64 and 128 tokens, the reference twice (difference 0)."""
    if device == "cpu":
        import torch

        from unified.kernels import select_attention

        attention, _ = select_attention("cpu")
        model, module = layer_pair(TINY_LAYER_SHAPE, device="cpu", attention=attention, dtype=torch.float32)
        rows, diff = bench_layers(model, module, (64, 128), ("torch", "torch"), budget_s=budget_s, warmup_tokens=8)
        measured = [r for r in rows if "seconds" in r]
        return {"device": "cpu", "attention": attention, "shape": TINY_LAYER_SHAPE, "rows": rows,
                "rel_output_diff_torch_vs_torch": diff, "passed": len(measured) == 4 and diff == 0.0}
    _cuda()
    try:  # before transformers' modeling module: it binds the Gated DeltaNet kernels at import
        import causal_conv1d  # noqa: F401
        import fla  # noqa: F401
        have_kernels = True
    except ImportError:
        have_kernels = False
    from unified.kernels import select_attention

    attention, _ = select_attention("cuda")
    model, module = layer_pair(QWEN35_35B_A3B, attention=attention)
    impls = ("fla", "torch") if have_kernels else ("torch",)
    rows, diff = bench_layers(model, module, tokens, impls, budget_s=budget_s, warmup_tokens=4096)
    result = {"attention": attention, "shape": QWEN35_35B_A3B, "kernels_installed": have_kernels, "rows": rows,
              "rel_output_diff_fla_vs_torch": diff}
    measured = [r for r in rows if "seconds" in r]
    result["passed"] = bool(measured) and (not have_kernels or (diff is not None and diff < 5e-2))
    if not have_kernels:
        result["note"] = "flash-linear-attention / causal-conv1d do not import: only the reference was timed"
    return result


def weights_changed(before_dir: Path, after_dir: Path) -> tuple[int, list[str]]:
    """(tensors in ``before_dir``, names whose values differ in ``after_dir``): two HF safetensors dirs."""
    import torch
    from safetensors.torch import load_file

    before, after = load_file(str(before_dir / "model.safetensors")), load_file(str(after_dir / "model.safetensors"))
    missing = sorted(set(before) - set(after))
    if missing:
        raise ValueError(f"{after_dir}: tensors missing after training: {missing[:5]}")
    return len(before), [k for k in before if not torch.equal(before[k].float(), after[k].float())]


def rollout_metrics(metrics_path: Path) -> dict[str, list]:
    """``{key: [value per logged step]}`` of the rollout-vs-trainer metrics in a warmup's metrics.jsonl: the
    warmup's own ``rollout/*`` (:meth:`unified.warmup.rollout_check.RolloutParity.metrics`) and TRL's
    ``sampling/*``."""
    found: dict[str, list] = {}
    for line in metrics_path.read_text().splitlines():
        if not line.strip():
            continue
        for key, value in json.loads(line).items():
            if key.startswith(("rollout/", "sampling/")):
                found.setdefault(key, []).append(value)
    return found


def expected_rollout_keys() -> list[str]:
    """The ``rollout/*`` keys a warmup with vLLM rollouts logs every generation batch (from the code that logs
    them, so a renamed key fails the check instead of reading as "not logged")."""
    from dataclasses import fields

    from unified.warmup.rollout_check import RolloutParity

    return [f"rollout/{f.name}" for f in fields(RolloutParity)]


def warmup_command(ckpt: Path, run: Path, backend: str, *extra: str, max_steps: int = 2,
                   learning_rate: float = 1e-2) -> list[str]:
    """``python -m unified.warmup`` on ``ckpt`` and the shipped data/lwm samples, ``max_steps`` steps of one
    generation batch each (8 completions), every monitor that would keep the start weights off (no validation
    split, no keep_best), at a learning rate large enough that every trained tensor moves."""
    sets = ["logging.wandb=false", f"train.max_steps={max_steps}", f"train.learning_rate={learning_rate}",
            "train.save_steps=100", f"generation.backend={backend}", "generation.vllm_gpu_memory_utilization=0.2",
            "generation.max_completion_length=8", "data.heldout_size=0", "data.validation_size=0",
            "data.max_prompt_tokens=null", "monitor.probe_size=0", "monitor.keep_best=false",
            "train.per_device_train_batch_size=4", "train.gradient_accumulation_steps=2", "gspo.num_generations=2",
            "gspo.steps_per_generation=2", *extra]
    cmd = [sys.executable, "-m", "unified.warmup", "--recipe", str(ROOT / "recipes/warmup/embedded_cpu.yaml"),
           "--model", str(ckpt), "--data", str(ROOT / "data/lwm"), "--output-dir", str(run)]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def _run_logged(cmd: list[str], log: Path, *, env: dict | None = None, timeout: float = 400,
                cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    log.write_text(" ".join(cmd) + "\n" + done.stdout + "\n--- stderr ---\n" + done.stderr)
    return done


def check_colocate(out: Path, arch: str = "qwen3_5_moe", device: str = "cuda") -> dict:
    """Two warmup steps of a tiny checkpoint: with colocated vLLM on a GPU (its ``rollout/*`` metrics logged),
    in-process generation (``generation.backend=hf``) on CPU; at least half of the tensors change."""
    if device == "cpu":
        backend = "hf"
    else:
        _cuda()
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            raise Skip(f"vllm does not import: {exc}") from exc
        backend = "vllm_colocate"
    from unified.models.tiny import save_tiny_checkpoint

    work = out / "colocate"
    ckpt = save_tiny_checkpoint(work / f"tiny_{arch}", arch)
    run = work / "run"
    start = time.perf_counter()
    done = _run_logged(warmup_command(ckpt, run, backend), out / "colocate.log", cwd=work)
    result = {"arch": arch, "backend": backend, "returncode": done.returncode,
              "seconds": round(time.perf_counter() - start, 1)}
    if done.returncode != 0:
        return {**result, "passed": False, "why_failed": done.stderr[-1500:]}
    tensors, changed = weights_changed(ckpt, run / "final")
    parity = rollout_metrics(run / "metrics.jsonl")
    missing = [k for k in expected_rollout_keys() if k not in parity] if backend != "hf" else []
    result.update(tensors=tensors, tensors_changed=len(changed), rollout_vs_trainer=parity,
                  missing_rollout_keys=missing)
    result["passed"] = len(changed) * 2 >= tensors and not missing
    if missing:
        result["why_failed"] = f"rollout metrics not logged: {missing}"
    elif not result["passed"]:
        result["why_failed"] = f"only {len(changed)} of {tensors} tensors changed"
    return result


def check_server_sync(out: Path, device: str = "cuda", max_logp_diff: float = 0.1) -> dict:
    """Server mode on two GPUs: ``trl vllm-serve`` (the launch plan's command) on GPU 1, the trainer on GPU 0
    (``generation.backend=vllm_server``), two generation batches at lr 1e-2. Batch 2 is generated after one
    update and one NCCL weight sync: its ``rollout/mean_abs_logp_diff`` (server vs trainer log-probs of the same
    tokens) stays under ``max_logp_diff`` only if the server holds the updated weights. CPU: the two commands
    are built (the plan and its imports) and the run is skipped."""
    import socket

    from unified.models.tiny import save_tiny_checkpoint

    if device == "cuda":  # before anything is built: a machine that cannot run it says why at once
        torch = _cuda()
        if torch.cuda.device_count() < 2:
            raise Skip(f"needs two CUDA devices, this machine has {torch.cuda.device_count()}: server mode not "
                       "checked")
        try:
            import trl  # noqa: F401
            import vllm  # noqa: F401
        except ImportError as exc:
            raise Skip(f"trl / vllm do not import: {exc}") from exc
    work = out / "server_sync"
    work.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ckpt = save_tiny_checkpoint(work / "tiny_qwen3_5_moe", "qwen3_5_moe")
    run = (work / "run").resolve()  # the same path for the server (this cwd) and the trainer (cwd=work)
    trainer = warmup_command(ckpt, run, "vllm_server", f"generation.vllm_server_port={port}",
                             "generation.vllm_server_host=127.0.0.1", "generation.vllm_server_timeout_s=300")
    # the server's command as slurm/lwm_warmup.sh gets it: the launch plan of a two-node, one-GPU-a-node job
    plan = subprocess.run([*trainer, "--set", "launch.nodes=2", "--set", "launch.gpus_per_node=1",
                           "--print-command", "vllm"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if plan.returncode != 0 or "vllm-serve" not in plan.stdout:
        return {"passed": False, "why_failed": f"no rollout server command: {plan.stderr[-1500:]}"}
    server_cmd = plan.stdout.strip()
    commands = {"server": server_cmd, "trainer": " ".join(trainer)}
    if device == "cpu":
        raise Skip(f"needs two CUDA devices (the commands were built: {json.dumps(commands)})")
    # the key gate in front of the server (unified/warmup/rollout_gate.py), as slurm/lwm_warmup.sh starts it:
    # the key written first; the trainer reads it from its output dir and sends it
    from unified.warmup.rollout_gate import rollout_key_path, write_new_key

    write_new_key(rollout_key_path(run))
    server_log = (work / "server.log").open("w")
    server = subprocess.Popen(["bash", "-c", server_cmd], stdout=server_log, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "1",
                                   "VLLM_HOST": "127.0.0.1"}, start_new_session=True)
    try:
        done = _run_logged(trainer, out / "server_sync.log", env={"CUDA_VISIBLE_DEVICES": "0"}, timeout=400,
                           cwd=work)
    finally:
        import signal

        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
        server_log.close()
    result = {"commands": commands, "returncode": done.returncode}
    if done.returncode != 0:
        return {**result, "passed": False, "why_failed": done.stderr[-1500:]}
    tensors, changed = weights_changed(ckpt, run / "final")
    parity = rollout_metrics(run / "metrics.jsonl")
    diffs = parity.get("rollout/mean_abs_logp_diff", [])
    result.update(tensors=tensors, tensors_changed=len(changed), rollout_vs_trainer=parity,
                  batch2_mean_abs_logp_diff=diffs[1] if len(diffs) > 1 else None, bound=max_logp_diff)
    result["passed"] = bool(changed) and len(diffs) > 1 and diffs[1] <= max_logp_diff
    if not result["passed"]:
        result["why_failed"] = ("after one update the server's log-probs differ from the trainer's: weights not "
                                f"synced (rollout/mean_abs_logp_diff per batch {diffs}, bound {max_logp_diff})"
                                if len(diffs) > 1 else f"{len(changed)} tensors changed, rollout diffs {diffs}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m measurements.gpu_checks", description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=CHECKS)
    parser.add_argument("out", type=Path)
    parser.add_argument("--arch", default=os.environ.get("COLOCATE_ARCH", "qwen3_5_moe"),
                        help="colocate: the tiny checkpoint's architecture")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: each check's CPU variant, on the same code path at small sizes")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{args.check}.json"
    device = args.device
    runner = {"imports": lambda out: check_imports(out, device=device),
              "flash_attention": lambda out: check_flash_attention(out, device=device),
              "layer_bench": lambda out: check_layer_bench(out, device=device),
              "colocate": lambda out: check_colocate(out, args.arch, device=device),
              "server_sync": lambda out: check_server_sync(out, device=device)}[args.check]
    try:
        result, status = runner(args.out), None
        status = 0 if result.get("passed") else 1
    except Skip as why:
        result, status = {"passed": None, "skipped": str(why)}, SKIP
    except Exception as exc:
        result, status = {"passed": False, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()[-4000:]}, 1
    target.write_text(json.dumps({"check": args.check, "variant": device, **result}, indent=2, default=str) + "\n")
    print(f"{args.check}: {'passed' if status == 0 else 'skipped' if status == SKIP else 'FAILED'} ({target})")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
