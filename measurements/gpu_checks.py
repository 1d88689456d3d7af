"""The checks of ``scripts/gpu_checks.sh``, one per subcommand; each writes ``OUT/<check>.json``.

    python -m measurements.gpu_checks imports OUT          # the lock's packages import, at the lock's versions
    python -m measurements.gpu_checks flash_attention OUT  # FlashAttention 2 vs SDPA at head dim 256 (bf16)
    python -m measurements.gpu_checks layer_bench OUT      # one Qwen3.5-35B-A3B-shaped linear + full attention
                                                           # layer pair (MoE each) fwd+bwd at 32k/64k/128k tokens,
                                                           # Gated DeltaNet with and without its kernels
    python -m measurements.gpu_checks colocate OUT         # two warmup steps, colocated vLLM, weights change

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
CHECKS = ("imports", "flash_attention", "layer_bench", "colocate")
# import name -> distribution name in requirements/gpu-lock.txt
LOCKED_IMPORTS = {"torch": "torch", "transformers": "transformers", "trl": "trl", "vllm": "vllm",
                  "flash_attn": "flash-attn", "fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d",
                  "deepspeed": "deepspeed", "accelerate": "accelerate", "triton": "triton"}
# Qwen3.5-35B-A3B's text config (the published config.json): the shapes of one layer of each kind
QWEN35_35B_A3B = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                      linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                      linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=256, num_experts_per_tok=8,
                      moe_intermediate_size=512, shared_expert_intermediate_size=512)


class Skip(Exception):
    """The check cannot run here (said in its JSON, exit status 77)."""


def _cuda():
    import torch

    if not torch.cuda.is_available():
        raise Skip("no CUDA device (torch.cuda.is_available() is False)")
    return torch


def check_imports(out: Path) -> dict:
    """Each package of the lock imports and has the lock's version."""
    from importlib.metadata import version

    _cuda()  # the lock is CUDA's stack: on a machine without CUDA there is nothing to check
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_lock import read_pins

    locked = read_pins(ROOT / "requirements/gpu-lock.txt")
    rows, ok = {}, True
    for module, dist in LOCKED_IMPORTS.items():
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


def check_flash_attention(out: Path, seq_len: int = 2048) -> dict:
    torch = _cuda()
    try:
        import flash_attn  # noqa: F401
    except ImportError as exc:
        raise Skip(f"flash-attn does not import: {exc}") from exc
    from unified.kernels import attention_parity

    report = attention_parity("flash_attention_2", reference="sdpa", arch="qwen3_5_moe", device="cuda",
                              dtype=torch.bfloat16, batch=2, seq_len=seq_len, repeats=3,
                              model_kwargs={"head_dim": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
                                            "hidden_size": 512, "num_layers": 2})
    return {"passed": report.passed, "head_dim": 256, "seq_len": seq_len, **report.to_dict()}


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


def check_layer_bench(out: Path, tokens: tuple[int, ...] = (32768, 65536, 131072), budget_s: float = 200) -> dict:
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
    result["passed"] = have_kernels and bool(measured) and diff is not None and diff < 5e-2
    if not have_kernels:
        result["why_failed"] = "flash-linear-attention / causal-conv1d do not import: only the reference was timed"
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
    """``{key: [value per logged step]}`` of the rollout-vs-trainer metrics in a warmup's metrics.jsonl:
    TRL's ``sampling/*`` (log-prob difference, importance-sampling ratio) and any ``*parity*`` key."""
    found: dict[str, list] = {}
    for line in metrics_path.read_text().splitlines():
        if not line.strip():
            continue
        for key, value in json.loads(line).items():
            if "parity" in key or key.startswith("sampling/"):
                found.setdefault(key, []).append(value)
    return found


def check_colocate(out: Path, arch: str = "qwen3_5_moe") -> dict:
    _cuda()
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise Skip(f"vllm does not import: {exc}") from exc
    from unified.models.tiny import save_tiny_checkpoint

    work = out / "colocate"
    ckpt = save_tiny_checkpoint(work / f"tiny_{arch}", arch)
    sys.path.insert(0, str(ROOT / "tests"))
    from _awb_fixture import write_fixture_awb_dir

    data = write_fixture_awb_dir(work / "data")
    run = work / "run"
    cmd = [sys.executable, "-m", "unified.warmup", "--recipe", str(ROOT / "recipes/warmup/embedded_cpu.yaml"),
           "--model", str(ckpt), "--data", str(data), "--output-dir", str(run), "--set", "train.max_steps=2",
           "--set", "generation.backend=vllm_colocate", "--set", "generation.vllm_gpu_memory_utilization=0.2",
           "--set", "logging.wandb=false", "--set", "train.learning_rate=1e-3"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=work)
    (out / "colocate.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    result = {"arch": arch, "returncode": done.returncode, "seconds": round(time.perf_counter() - start, 1)}
    if done.returncode != 0:
        return {**result, "passed": False, "why_failed": done.stderr[-1500:]}
    tensors, changed = weights_changed(ckpt, run / "final")
    parity = rollout_metrics(run / "metrics.jsonl")
    result.update(tensors=tensors, tensors_changed=len(changed), rollout_vs_trainer=parity,
                  parity_gate="on main" if any("parity" in k for k in parity) else "not on main yet: "
                  "TRL's rollout-vs-trainer metrics (sampling/*) are reported instead")
    result["passed"] = bool(changed)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m measurements.gpu_checks", description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=CHECKS)
    parser.add_argument("out", type=Path)
    parser.add_argument("--arch", default=os.environ.get("COLOCATE_ARCH", "qwen3_5_moe"),
                        help="colocate: the tiny checkpoint's architecture")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{args.check}.json"
    runner = {"imports": check_imports, "flash_attention": check_flash_attention, "layer_bench": check_layer_bench,
              "colocate": lambda out: check_colocate(out, args.arch)}[args.check]
    try:
        result, status = runner(args.out), None
        status = 0 if result.get("passed") else 1
    except Skip as why:
        result, status = {"passed": None, "skipped": str(why)}, SKIP
    except Exception as exc:
        result, status = {"passed": False, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()[-4000:]}, 1
    target.write_text(json.dumps({"check": args.check, **result}, indent=2, default=str) + "\n")
    print(f"{args.check}: {'passed' if status == 0 else 'skipped' if status == SKIP else 'FAILED'} ({target})")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
