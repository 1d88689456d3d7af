"""Where the warmup's memory goes: RSS per training phase plus torch tensor accounting.

``python -m measurements.memory_profile --recipe recipes/warmup/embedded_cpu.yaml --steps 2``

``tracemalloc`` does not see torch's allocations, so this measures two things:

- **RSS** of the process, sampled every ``--interval`` seconds by a thread that reads
  ``/proc/self/statm``; each sample is charged to the phase running at that moment (load,
  trainer set-up, rollout generation, reward scoring, loss forward, backward, optimizer step,
  checkpoint). ``peak`` is the highest sample in the phase, ``start`` the RSS when it began.
- **torch tensors** by kind, counted from the objects themselves: parameters (weights),
  ``.grad`` after the backward, the optimizer's state after its step, the tensors autograd
  saved for the backward of one micro-batch (``torch.autograd.graph.saved_tensors_hooks``,
  counted once per storage, parameters excluded = the activations), the log-prob/entropy
  tensors the loss forward returns, and the KV cache of a generation batch (computed from the
  batch's shapes and the model config: ``2 x layers x rows x kv_heads x (prompt + completion)
  x head_dim x bytes``).

The difference between RSS and the tensors it holds is the allocator's share (freed blocks
glibc keeps, fragmentation) plus the Python/library baseline.

Writes ``<output_dir>/memory_profile.json`` and prints a Markdown table (used by
``docs/warmup_memory.md``). Training options come from the recipe and ``--set``, exactly as for
``python -m unified.warmup``; the output dir defaults to a fresh temporary directory, wandb is
off and no checkpoint is written unless ``train.save_steps`` asks for one.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

GIB = 2**30
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


@dataclass
class PhaseStats:
    """RSS of one phase over all its occurrences."""

    calls: int = 0
    seconds: float = 0.0
    start_gib: float = 0.0
    """RSS when the phase first began."""
    peak_gib: float = 0.0


@dataclass
class RssSampler:
    """A thread that samples RSS and charges each sample to the innermost running phase."""

    interval: float = 0.02
    phases: dict[str, PhaseStats] = field(default_factory=dict)
    peak_gib: float = 0.0
    _stack: list[str] = field(default_factory=lambda: ["other"])
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample(self) -> None:
        rss = current_rss_bytes() / GIB
        self.peak_gib = max(self.peak_gib, rss)
        stats = self.phases.setdefault(self._stack[-1], PhaseStats(start_gib=rss))
        stats.peak_gib = max(stats.peak_gib, rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> "RssSampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        rss = current_rss_bytes() / GIB
        stats = self.phases.setdefault(name, PhaseStats(start_gib=rss))
        stats.calls += 1
        stats.peak_gib = max(stats.peak_gib, rss)
        self._stack.append(name)
        start = time.time()
        try:
            yield
        finally:
            stats.seconds += time.time() - start
            self._sample()
            self._stack.pop()


def tensor_bytes(tensors) -> int:
    """Bytes of distinct storages among ``tensors`` (tied or viewed tensors counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor):
            continue
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def optimizer_state_bytes(optimizer) -> int:
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
    return tensor_bytes(v for state in inner.state.values() for v in state.values() if isinstance(v, torch.Tensor))


class SavedTensorCounter:
    """Distinct storages autograd saves for the backward (parameters excluded)."""

    def __init__(self, parameter_ptrs: set[int]):
        self.parameter_ptrs = parameter_ptrs
        self.storages: dict[int, int] = {}
        self.by_dtype: dict[str, int] = {}

    def pack(self, t: torch.Tensor):
        try:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in self.parameter_ptrs and ptr not in self.storages:
                self.storages[ptr] = storage.nbytes()
                key = str(t.dtype).replace("torch.", "")
                self.by_dtype[key] = self.by_dtype.get(key, 0) + storage.nbytes()
        except (RuntimeError, NotImplementedError):  # e.g. tensors without storage
            pass
        return t

    @staticmethod
    def unpack(t):
        return t

    @property
    def total(self) -> int:
        return sum(self.storages.values())


def kv_cache_bytes(config, rows: int, tokens: int, dtype: torch.dtype) -> int:
    """Size of a full KV cache: ``2 x layers x rows x kv_heads x tokens x head_dim x bytes``."""
    text = getattr(config, "text_config", config)
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return 2 * text.num_hidden_layers * rows * kv_heads * tokens * head_dim * torch.empty((), dtype=dtype).element_size()


def profile(cfg, *, steps: int, interval: float = 0.02) -> dict[str, Any]:
    """Train ``steps`` optimizer steps of recipe ``cfg`` and account for the memory of each phase."""
    from transformers import TrainerCallback

    from unified.warmup.data import load_rewards, load_splits
    from unified.warmup.trainer import build_trainer, load_policy, training_device

    sampler = RssSampler(interval=interval).start()
    baseline = current_rss_bytes() / GIB
    device = training_device()
    with sampler.phase("load model"):
        policy = load_policy(cfg, device)
    model, tokenizer = policy.model, policy.tokenizer
    train = load_splits(cfg, tokenizer).train
    funcs, weights = load_rewards(cfg)
    after_load = current_rss_bytes() / GIB
    params = list(model.parameters())
    trainable: list[torch.nn.Parameter] = []  # known once the trainer has applied model.trainable_layers
    weights_bytes = tensor_bytes(params)
    parameter_ptrs = {p.untyped_storage().data_ptr() for p in params}
    acts: list[dict[str, Any]] = []
    gens: list[dict[str, Any]] = []
    logps: list[int] = []
    facts: dict[str, int] = {}

    class Marks(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kw):
            facts["grads"] = max(facts.get("grads", 0), tensor_bytes(p.grad for p in trainable))
            self._ctx = sampler.phase("optimizer step")
            self._ctx.__enter__()

        def on_optimizer_step(self, args, state, control, optimizer=None, **kw):
            self._ctx.__exit__(None, None, None)
            if optimizer is not None:
                facts["optimizer_state"] = max(facts.get("optimizer_state", 0), optimizer_state_bytes(optimizer))

        def on_save(self, args, state, control, **kw):
            pass

    with sampler.phase("trainer set-up"):
        trainer = build_trainer(cfg, train_dataset=train, reward_funcs=funcs, reward_weights=weights, model=model,
                                tokenizer=tokenizer, callbacks=[Marks()], device=device)
    trainable.extend(p for p in params if p.requires_grad)

    gen_dtype = torch.bfloat16 if trainer.args.bf16 else next(model.parameters()).dtype
    original = {name: getattr(trainer, name) for name in
                ("_generate_and_score_completions", "_generate_single_turn", "_calculate_rewards", "compute_loss",
                 "_save_checkpoint")}

    def rollout(*a, **kw):
        with sampler.phase("rollout (generation + scoring)"):
            return original["_generate_and_score_completions"](*a, **kw)

    def generate(prompt_ids, *a, **kw):
        with sampler.phase("generation"):
            out = original["_generate_single_turn"](prompt_ids, *a, **kw)
        completion_ids = out[0] if isinstance(out, tuple) else None
        if completion_ids is not None:
            rows = len(completion_ids)
            tokens = max(map(len, prompt_ids)) + max((len(c) for c in completion_ids), default=0)
            gens.append({"rows": rows, "tokens": tokens,
                         "kv_cache_bytes": kv_cache_bytes(model.config, rows, tokens, gen_dtype)})
        return out

    def rewards(*a, **kw):
        with sampler.phase("reward scoring"):
            return original["_calculate_rewards"](*a, **kw)

    def compute_loss(m, inputs, *a, **kw):
        counter = SavedTensorCounter(parameter_ptrs)
        with sampler.phase("loss forward"), torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
            loss = original["compute_loss"](m, inputs, *a, **kw)
        ids = inputs["completion_ids"]
        acts.append({"rows": int(ids.shape[0]), "tokens": int(inputs["prompt_ids"].shape[1] + ids.shape[1]),
                     "saved_bytes": counter.total, "by_dtype": counter.by_dtype})
        # the per-token log-probs and entropies of this micro-batch (fp32, B x completion tokens)
        logps.append(2 * ids.numel() * 4)
        return loss

    def save(*a, **kw):
        with sampler.phase("checkpoint"):
            return original["_save_checkpoint"](*a, **kw)

    trainer._generate_and_score_completions = rollout
    trainer._generate_single_turn = generate
    trainer._calculate_rewards = rewards
    trainer.compute_loss = compute_loss
    trainer._save_checkpoint = save
    backward = trainer.accelerator.backward

    def accel_backward(loss, **kw):
        with sampler.phase("backward"):
            return backward(loss, **kw)

    trainer.accelerator.backward = accel_backward
    start = time.time()
    with sampler.phase("whole training loop"):
        trainer.train()
    seconds = time.time() - start
    sampler.stop()
    step_times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    biggest = max(acts, key=lambda a: a["saved_bytes"]) if acts else {}
    biggest_gen = max(gens, key=lambda g: g["kv_cache_bytes"]) if gens else {}
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return {
        "recipe": {"micro_batch": cfg.train.per_device_train_batch_size,
                   "gradient_accumulation_steps": cfg.train.gradient_accumulation_steps,
                   "num_generations": cfg.gspo.num_generations,
                   "max_completion_length": cfg.generation.max_completion_length,
                   "max_prompt_tokens": cfg.data.max_prompt_tokens,
                   "gradient_checkpointing": cfg.model.gradient_checkpointing,
                   "precision": cfg.model.precision, "trainable_layers": getattr(cfg.model, "trainable_layers", None),
                   "optimizer": getattr(cfg.train, "optim", "adamw_torch")},
        "steps": steps, "train_seconds": round(seconds, 1),
        "step_times": [round(s, 1) for s in step_times],
        "peak_rss_gib": round(sampler.peak_gib, 2),
        "baseline_rss_gib": round(baseline, 2), "rss_after_load_gib": round(after_load, 2),
        "phases": {k: {"calls": v.calls, "seconds": round(v.seconds, 1), "start_gib": round(v.start_gib, 2),
                       "peak_gib": round(v.peak_gib, 2)} for k, v in sampler.phases.items()},
        "tensors_gib": {
            "weights": round(weights_bytes / GIB, 3),
            "parameters": sum(p.numel() for p in params), "trainable_parameters": sum(p.numel() for p in trainable),
            "grads": round(facts.get("grads", 0) / GIB, 3),
            "optimizer_state": round(facts.get("optimizer_state", 0) / GIB, 3),
            "activations_one_micro_batch": round(biggest.get("saved_bytes", 0) / GIB, 3),
            "activations_shape": {k: biggest.get(k) for k in ("rows", "tokens", "by_dtype")},
            "logps_entropies_one_micro_batch": max(logps, default=0) / GIB,
            "kv_cache_generation_batch": round(biggest_gen.get("kv_cache_bytes", 0) / GIB, 3),
            "kv_cache_shape": {k: biggest_gen.get(k) for k in ("rows", "tokens")},
        },
        "last_log": {k: logs[-1].get(k) for k in ("reward", "completions/clipped_ratio", "completions/mean_length",
                                                    "loss")} if logs else {},
    }


def markdown(report: dict[str, Any]) -> str:
    """The report as the tables of ``docs/warmup_memory.md``."""
    t = report["tensors_gib"]
    a, k = t["activations_shape"], t["kv_cache_shape"]
    lines = ["| phase | calls | seconds | RSS at start (GiB) | peak RSS (GiB) |", "|---|---|---|---|---|"]
    for name, p in report["phases"].items():
        if not p["calls"]:  # samples outside any phase (after the run)
            continue
        lines.append(f"| {name} | {p['calls']} | {p['seconds']} | {p['start_gib']} | {p['peak_gib']} |")
    lines += ["", "| torch tensors | GiB |", "|---|---|",
              f"| weights ({t['parameters'] / 1e6:.0f}M parameters, {t['trainable_parameters'] / 1e6:.0f}M trainable) "
              f"| {t['weights']} |",
              f"| gradients | {t['grads']} |", f"| optimizer state | {t['optimizer_state']} |",
              f"| activations saved for backward, one micro-batch ({a.get('rows')} rows x {a.get('tokens')} tokens) | "
              f"{t['activations_one_micro_batch']} |",
              f"| log-probs + entropies, one micro-batch (fused LM head: no B x T x vocab logits kept) | "
              f"{t['logps_entropies_one_micro_batch'] * 1024:.3f} MiB |",
              f"| KV cache, one generation batch ({k.get('rows')} rows x {k.get('tokens')} tokens) | "
              f"{t['kv_cache_generation_batch']} |",
              "", f"peak RSS {report['peak_rss_gib']} GiB (baseline {report['baseline_rss_gib']}, after loading "
              f"{report['rss_after_load_gib']}); step times {report['step_times']} s"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from unified.config import add_recipe_arguments
    from unified.warmup.config import load_warmup_config

    parser = argparse.ArgumentParser(prog="python -m measurements.memory_profile", description=__doc__.splitlines()[0])
    add_recipe_arguments(parser)
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps to profile (default 2)")
    parser.add_argument("--interval", type=float, default=0.02, help="RSS sampling period in seconds")
    parser.add_argument("--output-dir", help="default: a fresh temporary directory")
    args = parser.parse_args(argv)
    out = args.output_dir or tempfile.mkdtemp(prefix="unified-memprof-")
    # the memory of every step is measured: a reward without variance must not stop the run early
    overrides = ["monitor.max_zero_variance_share=null", *args.set, f"output_dir={out}", f"train.max_steps={args.steps}",
                 "logging.wandb=false", "resume=never"]
    if not any(s.startswith("train.save_steps=") for s in args.set):
        overrides.append(f"train.save_steps={args.steps + 1000}")
    cfg = load_warmup_config(args.recipe, overrides)
    report = profile(cfg, steps=args.steps, interval=args.interval)
    report["overrides"] = list(args.set)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "memory_profile.json").write_text(json.dumps(report, indent=2))
    print(markdown(report))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
