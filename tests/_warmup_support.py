"""Helpers shared by the tests/test_warmup_*.py files: tiny models, a tiny dataset, a simple reward.

The dataset is a fixture in ``unified.lwm.rl_dataset``'s column format (``prompt``, ``reference``,
``domain``, ``sample_id``, ``turn_idx``); the reward is a token-overlap F1 with ``reference``,
defined here for tests only (the library's rewards are in ``unified.rewards``).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch


def fixture_rl_rows(n: int = 8) -> list[dict]:
    rows = []
    for i in range(n):
        rows.append({
            "prompt": [
                {"role": "system", "content": "Predict the next observation of the environment."},
                {"role": "user", "content": "ls -la /workspace"},
                {"role": "assistant", "content": f"total {i}\nfile{i}.txt"},
                {"role": "user", "content": f"cat file{i}.txt"},
            ],
            "reference": f"hello {i} world",
            "domain": "terminal",
            "sample_id": f"terminal/fixture-{i}/2",
            "turn_idx": 2,
        })
    return rows


def fixture_rl_dataset(n: int = 8):
    from datasets import Dataset

    return Dataset.from_list(fixture_rl_rows(n))


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)


def token_f1(completions, reference, **kwargs) -> list[float]:
    """Token-overlap F1 between the completion and the reference observation (test reward)."""
    out = []
    for completion, ref in zip(completions, reference, strict=True):
        pred, gold = re.findall(r"\w+", _text(completion).lower()), re.findall(r"\w+", ref.lower())
        common = len(set(pred) & set(gold))
        if not pred or not gold or not common:
            out.append(0.0)
            continue
        p, r = common / len(set(pred)), common / len(set(gold))
        out.append(2 * p * r / (p + r))
    return out


def completion_length_reward(completions, **kwargs) -> list[float]:
    """A reward with guaranteed variance within a group: the completion's character count."""
    return [float(len(_text(c))) for c in completions]


def tiny_policy(seed: int = 0, arch: str = "qwen3_moe"):
    """(model, tokenizer): a tiny random MoE (Qwen3-MoE or Qwen3.5-MoE) and the locally trained tokenizer."""
    from unified.models.tiny import tiny_moe_model, train_tiny_tokenizer

    tok = train_tiny_tokenizer()
    model = tiny_moe_model(arch, seed=seed, vocab_size=len(tok))
    model.config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    model.config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def tiny_overrides(output_dir: Path, *extra: str) -> list[str]:
    """--set overrides for a fast tiny-model run."""
    # a tiny random policy's rewards are often the same across a group: the zero-variance stop is off
    # (tests that want it pass monitor.max_zero_variance_share back in extra)
    return [f"output_dir={output_dir}", "logging.wandb=false", "train.max_steps=2", "train.save_steps=100",
            "train.per_device_train_batch_size=4", "gspo.num_generations=2", "generation.max_completion_length=6",
            "monitor.max_zero_variance_share=null", *extra]


def build_tiny_trainer(output_dir: Path, *extra: str, reward_funcs=None, seed: int = 0, arch: str = "qwen3_moe"):
    from unified.warmup.config import load_warmup_config
    from unified.warmup.trainer import build_trainer

    model, tok = tiny_policy(seed, arch)
    cfg = load_warmup_config(None, tiny_overrides(output_dir, *extra))
    trainer = build_trainer(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=reward_funcs or [token_f1],
                            model=model, tokenizer=tok)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; the loss reads it
    trainer.model.train()
    return trainer


def completion_batch(completions: list[list[int]], advantages: list[float], *, prompt_len: int = 5,
                     pad_to: int | None = None, pad_id: int = 0, seed: int = 0, vocab: int = 200) -> dict:
    """A GRPOTrainer loss batch: left prompts (all real), right-padded completions, advantages."""
    gen = torch.Generator().manual_seed(seed)
    batch = len(completions)
    width = pad_to or max(len(c) for c in completions)
    prompt_ids = torch.randint(10, vocab, (batch, prompt_len), generator=gen)
    completion_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, ids in enumerate(completions):
        completion_ids[i, :len(ids)] = torch.tensor(ids)
        mask[i, :len(ids)] = 1
    return {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
            "completion_mask": mask, "advantages": torch.tensor(advantages, dtype=torch.float32),
            "num_items_in_batch": mask.sum()}


def trl_token_logps(trainer, inputs) -> torch.Tensor:
    """The policy's per-token log-probs of the completion tokens, as TRL computes them, (B, T)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att,
                                                                  inputs["completion_ids"].size(1))
    return logps


def own_token_logps(model, inputs) -> torch.Tensor:
    """The same log-probs from a plain forward + log_softmax (with gradients), (B, T)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, -t - 1:-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)


def write_fixture_awb_dir(directory: Path, trajectories: int = 12) -> Path:
    """A small AgentWorldBench-format data dir (fixture: terminal trajectories we made up)."""
    from unified.lwm.records import trajectory_records, write_records

    records = []
    for i in range(trajectories):
        actions = [f"mkdir -p /work/p{i}", f"echo {i * 7} > /work/p{i}/n.txt", f"cat /work/p{i}/n.txt"]
        observations = ["", "", f"{i * 7}"]
        records += trajectory_records("terminal", f"fixture-{i}", "You simulate a Linux terminal.", actions,
                                      observations)
    directory.mkdir(parents=True, exist_ok=True)
    write_records(directory / "fixture_terminal.jsonl", records)
    return directory


def tiny_cli_overrides(checkpoint: Path | None, data: Path | None, output: Path | None, *extra: str) -> list[str]:
    """CLI arguments that run the embedded CPU recipe on a tiny checkpoint, fast."""
    args = []
    for flag, value in (("--model", checkpoint), ("--data", data), ("--output-dir", output)):
        if value is not None:
            args += [flag, str(value)]
    # the recipe's validation probe and keep_best are off, and so is the zero-variance stop (a tiny random
    # policy's rewards are often the same across a group); tests that want them pass them back in extra
    for item in ("logging.wandb=false", "data.heldout_size=0", "data.max_prompt_tokens=null",
                 "data.validation_size=0", "monitor.probe_size=0", "monitor.keep_best=false",
                 "monitor.max_zero_variance_share=null",
                 "train.per_device_train_batch_size=4", "train.gradient_accumulation_steps=2", "gspo.num_generations=2",
                 "gspo.steps_per_generation=2",  # one update per generation batch of 8 (the recipe's 4 need 128)
                 "generation.max_completion_length=8", *extra):
        args += ["--set", item]
    return args
