"""``make demo``: the library's main job on the embedded default model.

1. kernel selection and the embedded MoE checkpoint (built once, then reused, with its logit
   parity against the dense source);
2-3. one tool-calling turn rendered through the Qwen3.5-style chat template and generated;
4. a short GSPO world-model warmup of the same weights (``recipes/warmup/embedded_cpu.yaml`` on
   the shipped ``data/lwm`` samples, a couple of steps), written as a Hugging Face directory;
5. ``python -m unified.eval --suite ood`` on that checkpoint (a few tasks per benchmark).

Everything lands under ``--out`` (default ``runs/demo``); rerunning resumes both the warmup and
the eval where they stopped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import torch

DEMO_TOOLS = [{
    "type": "function",
    "function": {
        "name": "list_files",
        "description": "List the files of a directory with their sizes in bytes.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Directory"}},
                       "required": ["path"]},
    },
}]
DEMO_MESSAGES = [
    {"role": "system", "content": "You are a careful assistant that uses tools."},
    {"role": "user", "content": "Which file in /tmp is the largest?"},
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unified.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="checkpoint spec (default: embedded)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default="runs/demo", help="where the warmup and eval runs go (reruns resume)")
    parser.add_argument("--warmup-steps", type=int, default=2, help="GSPO steps of the demo warmup")
    parser.add_argument("--eval-limit", type=int, default=2, help="tasks per ood benchmark in the demo eval")
    parser.add_argument("--eval-max-turns", type=int, default=4,
                        help="policy calls per episode in the demo eval (the eval's own default is 40)")
    parser.add_argument("--skip-warmup", action="store_true", help="stop after the generation turn")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from unified.models import ensure_embedded_checkpoint, load_checkpoint
    from unified.models.embedded import BUILD_RECORD

    done: list[str] = []
    if args.model == "embedded":
        start = time.time()
        path = ensure_embedded_checkpoint()
        record = json.loads((path / BUILD_RECORD).read_text())
        print(f"[1] embedded checkpoint: {path} ({time.time() - start:.1f}s; built {record['created_at']} in "
              f"{record['build_seconds']}s)")
        print(f"    {record['architecture']}, {record['parameters'] / 1e6:.0f}M parameters, "
              f"{record['upcycle']['num_experts']} experts top-{record['upcycle']['top_k']}, "
              f"max |logit diff| vs dense at creation = {record['parity']['max_abs_logit_diff']:.2e}")
        done.append("built or reused the embedded MoE checkpoint and checked its parity record")

    start = time.time()
    loaded = load_checkpoint(args.model)
    print(f"[2] loaded {loaded.spec} on {loaded.device} as {str(loaded.dtype).replace('torch.', '')} in "
          f"{time.time() - start:.1f}s; attention={loaded.kernels.attention}, experts={loaded.kernels.experts}")
    done.append(f"loaded it with attention={loaded.kernels.attention}, experts={loaded.kernels.experts}")

    tok = loaded.tokenizer
    prompt = tok.apply_chat_template(DEMO_MESSAGES, tools=DEMO_TOOLS, tokenize=False, add_generation_prompt=True,
                                     enable_thinking=False)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).to(loaded.device)
    start = time.time()
    with torch.no_grad():
        out = loaded.model.generate(**ids, max_new_tokens=args.max_new_tokens, do_sample=False,
                                    pad_token_id=tok.pad_token_id)
    completion = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=False)
    n_new = out.shape[1] - ids["input_ids"].shape[1]
    seconds = time.time() - start
    print(f"[3] one tool-calling turn: prompt {ids['input_ids'].shape[1]} tokens, generated {n_new} tokens in "
          f"{seconds:.1f}s ({n_new / max(seconds, 1e-9):.1f} tok/s)")
    print("    completion: " + completion.strip().replace("\n", "\n                "))
    done.append("rendered a tool-use prompt through the Qwen3.5-style chat template and generated one turn")

    if not args.skip_warmup:
        final = _warmup(args, loaded, done)
        del loaded
        _eval_ood(args, final, done)

    print("\nmake demo did:\n" + "\n".join(f"  - {item}" for item in done))
    return 0


REPO = Path(__file__).resolve().parents[1]


def _warmup(args, loaded, done: list[str]) -> Path:
    """[4] a few GSPO steps on the model already in memory (no second copy), saved as a HF dir."""
    from unified.warmup.config import load_warmup_config
    from unified.warmup.trainer import run_warmup

    out = Path(args.out) / "warmup"
    overrides = [f"output_dir={out}", f"train.max_steps={args.warmup_steps}", f"train.save_steps={args.warmup_steps}",
                 f"data.train=[{REPO / 'data' / 'lwm'}]", "data.heldout_size=0", "data.limit=16",
                 "generation.max_completion_length=32", f"model.name_or_path={args.model}"]
    cfg = load_warmup_config(REPO / "recipes" / "warmup" / "embedded_cpu.yaml", overrides)
    print(f"[4] GSPO warmup: {cfg.train.max_steps} steps x {cfg.gspo.num_generations} completions per prompt, "
          f"clip [{1 - cfg.gspo.epsilon:.4f}, {1 + cfg.gspo.epsilon_high:.4f}], no KL -> {out}", flush=True)
    loaded.model.train()
    result = run_warmup(cfg, model=loaded.model, tokenizer=loaded.tokenizer)
    last = result.last_log
    print(f"    {result.global_step} steps, {result.seconds_per_step:.1f}s/step, peak RSS "
          f"{result.peak_memory.get('memory/peak_rss_gib', 0):.1f} GiB; last step: reward "
          f"{last.get('reward', float('nan')):.3f}, router aux loss {last.get('aux_loss', float('nan')):.3f}, "
          f"clip fraction {last.get('clip_ratio/region_mean', float('nan')):.3f}")
    print(f"    checkpoint: {result.final_dir} (metrics: {out / 'metrics.jsonl'})")
    done.append(f"warmed the weights up with GSPO for {result.global_step} steps and saved {result.final_dir}")
    return Path(result.final_dir)


def _eval_ood(args, final: Path, done: list[str]) -> None:
    """[5] the same weights as a multi-turn agent: ``python -m unified.eval --suite ood``."""
    if importlib.util.find_spec("unified.eval.__main__") is None:
        print("[5] `python -m unified.eval` is not in this checkout yet: the ood eval of the warmed-up "
              f"checkpoint will run here once it lands (model: {final})")
        done.append("skipped the ood eval (unified.eval not available yet)")
        return
    cmd = [sys.executable, "-m", "unified.eval", "--suite", "ood", "--model", str(final),
           "--limit", str(args.eval_limit), "--max-new-tokens", str(args.max_new_tokens),
           "--max-turns", str(args.eval_max_turns), "--no-thinking", "--out", str(Path(args.out) / "eval-ood")]
    print("[5] " + " ".join(cmd[1:]), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        print(f"    the eval exited with status {rc}")
    done.append(f"evaluated the warmed-up checkpoint on the ood suite (exit status {rc}, results in "
                f"{Path(args.out) / 'eval-ood'})")


if __name__ == "__main__":
    raise SystemExit(main())
