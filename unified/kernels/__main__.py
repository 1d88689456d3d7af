"""``python -m unified.kernels``: print the kernel choice and benchmark grouped_mm against eager.

Runs :func:`unified.kernels.experts_parity` on a small random MoE (sizes from the flags) and
prints a JSON report: max output/gradient differences and median forward+backward seconds of
each implementation, and their ratio.
"""

from __future__ import annotations

import json

import torch

from unified.config import ArgumentParser
from unified.kernels import experts_parity, select_kernels


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m unified.kernels")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--arch", default="qwen3_moe", choices=["qwen3_moe", "qwen3_5_moe"])
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    choice = select_kernels(args.device, dtype)
    report = experts_parity(
        "grouped_mm", arch=args.arch, device=args.device, dtype=dtype, batch=args.batch, seq_len=args.seq_len,
        repeats=args.repeats, tolerance=1e-4 if dtype == torch.float32 else 5e-2,
        model_kwargs={"num_experts": args.experts, "top_k": args.top_k, "hidden_size": args.hidden,
                      "num_layers": args.layers},
    )
    print(json.dumps({"selected": choice.facts(),
                      "grouped_mm_vs_eager": report.to_dict(), "args": vars(args)}, indent=2))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
