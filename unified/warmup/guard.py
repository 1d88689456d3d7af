"""The collapse guard: degenerate completions visible at every step, and stop/rollback on a collapse.

A warmup that collapses turns its greedy answers into repetition loops (``"#\\n\\n#..."``) while its
sampled rollouts, and so its reward curve, may still look healthy. :class:`CollapseGuard`, a
``TrainerCallback``, measures after every optimizer step:

- the rollouts (through :class:`~unified.warmup.degenerate.DegenerateMonitor`, a weight-0 reward
  function): share of loops and of truncated completions;
- with ``monitor.probe_size`` P > 0, a *probe*: P training prompts decoded greedily (the decoding
  the held-out score uses), scored with the recipe's rewards (no shaping): ``probe/loop_share``,
  ``probe/reward``, and the drift from the start, the mean per-token

  .. math::

      \\mathrm{KL}(\\pi_{start} \\,\\|\\, \\pi_\\theta) = \\frac{1}{\\sum_j T_j}\\sum_j \\sum_{t=1}^{T_j}
          \\sum_{v} \\pi_{start}(v \\mid x_j, y_{j,<t}) \\log\\frac{\\pi_{start}(v \\mid x_j, y_{j,<t})}
          {\\pi_\\theta(v \\mid x_j, y_{j,<t})}

  on the start's greedy answers ``y_j`` (``T_j`` tokens; start log-probs ``(T_j, V)`` kept in memory).

It adds them to the step's log record (``metrics.jsonl``) and prints one progress line a step. A step
*collapses* when the probe's loop share rose by ``max_probe_loop_rise`` over the start, or when
``max_rollout_loop_share`` of the rollouts are loops; ``on_collapse`` then logs it, stops training, or
restores the trainable weights of the last step that did not collapse (kept in memory, one copy of
the trainable parameters) and stops, so that ``final/`` holds the last good weights.

With ``monitor.keep_best`` the probe reads the recipe's *validation* split (rows never trained on,
disjoint from the held-out rows) and the guard keeps a copy of the trainable weights of the step
``s* = argmax_s probe/reward(s)`` over s = start, 1, ..., S (ties: the earliest); at the end of
training it restores them, so ``final/`` holds step s*: early stopping on a validation split, the
model selection of supervised training applied to the warmup's greedy answers. A resumed run starts
its selection at the resumed step (the copy lives in memory). Under data parallelism every rank holds
the whole model and runs the same greedy probe, so every rank selects (and restores) the same step;
sharded backends (ZeRO-3, FSDP) turn the probe and keep_best off at the recipe check, with a line
saying so.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from transformers import TrainerCallback

from unified.warmup.config import MonitorSection
from unified.warmup.degenerate import DegenerateMonitor, find_loop
from unified.warmup.gspo_trainer import torch_threads
from unified.warmup.heldout import heldout_reward


class CollapseGuard(TrainerCallback):
    """Per-step collapse metrics, the progress line, and the ``monitor.on_collapse`` action."""

    def __init__(self, monitor: MonitorSection, rollouts: DegenerateMonitor, *, probe=None,
                 score_funcs: Sequence[Callable] = (), score_weights: Sequence[float] = (), tokenizer=None,
                 max_new_tokens: int = 32, cpu_threads: int | None = None, thinking: bool = False):
        self.cfg = monitor
        self.rollouts = rollouts
        self.probe = probe if monitor.probe_size > 0 else None
        self.score_funcs, self.score_weights = list(score_funcs), list(score_weights)
        self.tokenizer = tokenizer
        self.max_new_tokens, self.cpu_threads, self.thinking = max_new_tokens, cpu_threads, thinking
        self.trainer = None
        self.start: dict[str, Any] | None = None
        self._start_logprobs: list[torch.Tensor] = []
        self._start_inputs: list[torch.Tensor] = []
        self._good: dict[str, torch.Tensor] = {}
        self.good_step = 0
        self._best: dict[str, torch.Tensor] = {}
        self.best_step: int | None = None
        self.best_reward = float("-inf")
        self.outcome: dict[str, Any] = {}
        """``{"collapsed_at": step, "action": ..., "kept_step": step}`` once a collapse was detected."""

    def attach(self, trainer) -> "CollapseGuard":
        """The trainer whose log records receive the guard's metrics (``GSPOTrainer.extra_logs``)."""
        self.trainer = trainer
        return self

    # ---------------------------------------------------------------- the probe

    @torch.no_grad()
    def measure_probe(self, model) -> dict[str, Any]:
        """Greedy answers on the probe prompts: loops, mean reward, KL to the start (0 at the start)."""
        was_training = model.training
        # heldout_reward seeds torch's global RNG; the rollouts of the next steps must not see that, so a
        # run with the guard samples exactly what the same run without it would
        rng = torch.random.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        try:
            scored = heldout_reward(model, self.tokenizer, self.probe, self.score_funcs, self.score_weights,
                                    samples_per_prompt=1, max_new_tokens=self.max_new_tokens, temperature=0.0,
                                    batch_size=len(self.probe), thinking=self.thinking,
                                    cpu_threads=self.cpu_threads)
            loops = [find_loop(t, i) is not None for t, i in zip(scored["completions_text"], scored["completion_ids"])]
            out = {"probe/loop_share": sum(loops) / len(loops), "probe/reward": scored["mean_reward"],
                   "probe/completion_tokens": scored["mean_completion_tokens"]}
            if not self.cfg.probe_kl:
                return out
            if self.start is None:
                self._keep_start_logprobs(model, scored["completion_ids"])
                out["probe/kl_to_start"] = 0.0
            else:
                out["probe/kl_to_start"] = self._kl_to_start(model)
            return out
        finally:
            torch.random.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)
            model.train(was_training)

    def _inputs(self, ids: list[int], row) -> torch.Tensor:
        text = self.tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True,
                                                  enable_thinking=self.thinking)
        prompt = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return torch.tensor([prompt + list(ids)])

    def _completion_logprobs(self, model, inputs: torch.Tensor, n: int) -> torch.Tensor:
        """``(n, V)`` log-probs of the next token at each of the last ``n`` positions' predictions."""
        device = next(model.parameters()).device
        logits = model(input_ids=inputs.to(device), logits_to_keep=n + 1).logits[0, :-1].float()
        return torch.log_softmax(logits, dim=-1).cpu()

    def _keep_start_logprobs(self, model, completion_ids: list[list[int]]) -> None:
        with torch_threads(self.cpu_threads, next(model.parameters()).device):
            for ids, row in zip(completion_ids, (self.probe[i] for i in range(len(self.probe)))):
                if not ids:
                    continue
                inputs = self._inputs(ids, row)
                self._start_inputs.append(inputs)
                self._start_logprobs.append(self._completion_logprobs(model, inputs, len(ids)))

    def _kl_to_start(self, model) -> float:
        total, tokens = 0.0, 0
        with torch_threads(self.cpu_threads, next(model.parameters()).device):
            for inputs, start in zip(self._start_inputs, self._start_logprobs):
                now = self._completion_logprobs(model, inputs, start.shape[0])  # (T, V)
                total += float((start.exp() * (start - now)).sum())
                tokens += start.shape[0]
        return total / tokens if tokens else 0.0

    # ---------------------------------------------------------------- the snapshot

    def _trainable(self, model) -> dict[str, torch.Tensor]:
        return {name: p for name, p in model.named_parameters() if p.requires_grad}

    def _snapshot(self, model, copy: dict[str, torch.Tensor]) -> None:
        """Copy the trainable weights into ``copy`` (its tensors reused after the first time)."""
        for name, p in self._trainable(model).items():
            if name in copy:
                copy[name].copy_(p.detach())
            else:
                copy[name] = p.detach().clone()

    def _keep_good(self, model, step: int) -> None:
        if self.cfg.on_collapse != "rollback":
            return
        self._snapshot(model, self._good)
        self.good_step = step

    def _restore_good(self, model) -> None:
        self._restore(model, self._good)

    def _restore(self, model, copy: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, p in self._trainable(model).items():
                p.copy_(copy[name])

    def _consider_best(self, model, step: int, reward: float) -> None:
        """``keep_best``: copy the trainable weights when the probe reward beats every earlier step's."""
        if not self.cfg.keep_best or reward <= self.best_reward:
            return
        self._snapshot(model, self._best)
        self.best_step, self.best_reward = step, reward

    # ---------------------------------------------------------------- callback hooks

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.good_step = state.global_step
        self._keep_good(model, state.global_step)
        if self.probe is not None:
            self.start = self.measure_probe(model)
            # the start's probe (no metrics.jsonl line: that file holds training steps): run.json's collapse
            self.outcome["start_probe_reward"] = round(self.start["probe/reward"], 6)
            self._consider_best(model, state.global_step, self.start["probe/reward"])
            if state.is_world_process_zero:
                print(f"unified.warmup: probe at step {state.global_step}: greedy loops "
                      f"{self._count(self.start['probe/loop_share'])}/{len(self.probe)}, "
                      f"reward {self.start['probe/reward']:.3f}", flush=True)

    def _count(self, share: float) -> int:
        return round(share * len(self.probe)) if self.probe is not None else 0

    def on_step_end(self, args, state, control, model=None, **kwargs):
        metrics: dict[str, float] = {}
        reasons = []
        rollout_loops = self.rollouts.last.get("degenerate/loop_share")
        if self.cfg.max_rollout_loop_share is not None and rollout_loops is not None \
                and rollout_loops >= self.cfg.max_rollout_loop_share:
            reasons.append(f"rollout loop share {rollout_loops:.2f} >= {self.cfg.max_rollout_loop_share}")
        if self.probe is not None:
            metrics.update(self.measure_probe(model))
            rise = metrics["probe/loop_share"] - self.start["probe/loop_share"]
            metrics["probe/loop_rise"] = rise
            if self.cfg.max_probe_loop_rise is not None and rise >= self.cfg.max_probe_loop_rise - 1e-9:
                reasons.append(f"probe loops {self._count(metrics['probe/loop_share'])}/{len(self.probe)} vs "
                               f"{self._count(self.start['probe/loop_share'])} at the start")
        if reasons:
            metrics["collapse/detected"] = 1.0
            self.outcome = {"collapsed_at": state.global_step, "action": self.cfg.on_collapse,
                            "reason": "; ".join(reasons), "kept_step": state.global_step}
            if self.cfg.on_collapse in ("stop", "rollback"):
                control.should_training_stop = True
            if self.cfg.on_collapse == "rollback":
                self._restore_good(model)
                self.outcome["kept_step"] = self.good_step
                metrics["collapse/kept_step"] = float(self.good_step)
        else:
            self._keep_good(model, state.global_step)
            if "probe/reward" in metrics:  # a collapsed step is never the best one
                self._consider_best(model, state.global_step, metrics["probe/reward"])
        if self.trainer is not None:
            self.trainer.extra_logs.update(metrics)
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        """``keep_best``: leave the model with the best step's weights (``final/`` is saved after this)."""
        if not self.cfg.keep_best or self.best_step is None or model is None:
            return
        self.outcome.update({"best_step": self.best_step, "best_probe_reward": round(self.best_reward, 6)})
        last_step = self.outcome.get("kept_step", state.global_step)
        if self.best_step != last_step:
            self._restore(model, self._best)
            self.outcome["kept_step"] = self.best_step
        if state.is_world_process_zero and self.best_step != last_step:
            print(f"unified.warmup: keep_best: final weights are step {self.best_step}'s (validation reward "
                  f"{self.best_reward:.3f}), not step {last_step}'s", flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs or not state.is_world_process_zero:
            return
        print(progress_line(state.global_step, state.max_steps, logs, probe_size=len(self.probe or ()),
                            outcome=self.outcome if self.outcome.get("collapsed_at") == state.global_step else None),
              flush=True)


def final_weights_step(collapse: dict[str, Any], global_step: int) -> int:
    """The training step whose weights ``final/`` holds: the guard's ``kept_step`` (rollback or
    keep_best), else the last step. 0 means the starting weights, unchanged."""
    kept = collapse.get("kept_step")
    return int(kept) if isinstance(kept, int) else global_step


def final_weights_note(collapse: dict[str, Any], global_step: int) -> str:
    """What ``final/`` holds, in words, for recaps (the CLI's last line, ``make demo``)."""
    step = final_weights_step(collapse, global_step)
    if step == global_step:
        return f"final/ holds the weights of the last step, {global_step}"
    why = ("no step beat the start on the validation reward (monitor.keep_best)" if collapse.get("best_step") == step
           and not collapse.get("collapsed_at") else f"the collapse guard rolled back ({collapse.get('reason', '?')})")
    if step == 0:
        return (f"final/ holds the STARTING weights, unchanged after {global_step} steps: {why}; "
                "evaluated, it is the same model as the start")
    return f"final/ holds step {step}'s weights, not step {global_step}'s: {why}"


def progress_line(step: int, max_steps: int, logs: dict[str, Any], *, probe_size: int = 0,
                  outcome: dict[str, Any] | None = None) -> str:
    """One line per step: reward and its spread within groups, degenerate shares, probe, drift, action."""
    def f(key: str, fmt: str) -> str:
        value = logs.get(key)
        return format(value, fmt) if isinstance(value, (int, float)) else "-"

    parts = [f"step {step}/{max_steps}", f"reward {f('reward', '.3f')} (group std {f('reward_std', '.3f')})",
             f"rollouts: loops {f('degenerate/loop_share', '.0%')} truncated {f('degenerate/truncated_share', '.0%')}",
             f"grad {f('grad_norm', '.3g')}"]
    if probe_size:
        parts.append(f"probe: loops {f('probe/loop_share', '.0%')} of {probe_size} reward "
                     f"{f('probe/reward', '.3f')} KL {f('probe/kl_to_start', '.2e')}")
    line = "unified.warmup: " + " | ".join(parts)
    if outcome:
        kept = f", weights of step {outcome['kept_step']} kept" if outcome["action"] == "rollback" else ""
        line += f" | COLLAPSE ({outcome['reason']}): {outcome['action']}{kept}"
    return line
