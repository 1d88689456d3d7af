"""The warmup's trainer class: TRL's ``GRPOTrainer`` configured as GSPO, with the additions below.

:func:`unified.warmup.trainer.build_trainer` builds it; what it adds to TRL (per-step memory, sample
dropping for unscorable judge answers, the vLLM rollout metrics and step-1 parity gate, generation under
autocast with its own CPU threads, resuming through transformers' loader) is in its docstrings.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from unified.warmup.callbacks import peak_memory_gib
from unified.warmup.routing import log_generation_metrics
from unified.warmup.failfast import zero_variance_share
from unified.warmup.rollout_check import (
    check_probe,
    check_rollout_parity,
    check_weight_sync,
    probe_logp_diff,
    rollout_parity,
)
from unified.warmup.sync_probe import check_weight_checksums, engine_logps, probe_token_ids, trainer_logps


@contextmanager
def torch_threads(n: int | None, device: torch.device | str | None = None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads on a CPU (no-op for ``None`` or another device)."""
    if n is None or torch.device(device or "cpu").type != "cpu":
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def gspo_trainer_class():
    """The :class:`GSPOTrainer` class (TRL is imported on first use)."""
    from trl import GRPOTrainer

    class GSPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer, configured as GSPO by :func:`build_grpo_config`, plus:

        - ``memory/peak_rss_gib`` (and ``memory/peak_cuda_gib``) in every log record;
        - in-process (``hf``) generation under the training autocast, so fp32 master weights
          generate with bf16 kernels (FlashAttention) on CUDA; a no-op on CPU;
        - ``moe.routing_replay`` (:mod:`unified.warmup.routing`): the rollout's routes recorded, carried in
          the batch and replayed (or compared) in every log-prob forward, ``moe/...`` metrics.
        """

        routing = None
        """The :class:`unified.warmup.routing.RoutingState` with ``moe.routing_replay`` on, else None."""

        extra_logs: dict[str, float]
        """Metrics that callbacks (the collapse guard) add to the next log record."""

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            logs.update(peak_memory_gib())
            extra = getattr(self, "extra_logs", None)
            if extra:
                logs.update(extra)
                extra.clear()
            super().log(logs, start_time)

        generation_cpu_threads: int | None = None
        """``generation.cpu_threads``: torch threads while generating on a CPU."""

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            """TRL's rewards (B_global x K, gathered over ranks), with every sample that a reward function
            marked by ``drops_sample_on_failure`` (the rubric judge) could not score made NaN across all K
            functions: TRL then leaves it out of its group's mean and std and gives it advantage 0
            (:mod:`unified.rewards.functions`). ``rewards/dropped_share`` logs how many."""
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            columns = [i for i, f in enumerate(self.reward_funcs) if getattr(f, "drops_sample_on_failure", False)]
            mode = "train" if self.model.training else "eval"
            shares = {}
            if columns:
                dropped = torch.isnan(rewards[:, columns]).any(dim=1)
                rewards[dropped] = float("nan")
                shares["rewards/dropped_share"] = dropped.float().mean().item()
            group = self.num_generations if mode == "train" else self.num_generations_eval
            if group and rewards.shape[0] % group == 0:
                shares["rewards/zero_variance_share"] = zero_variance_share(rewards, self.reward_weights, group)
            for key, value in shares.items():
                self._metrics[mode][key].append(value)
            if mode == "train":
                self.batch_shares = shares
            return rewards

        failfast = None
        """The :class:`~unified.warmup.failfast.FailFastMonitor` that sees every generation batch's shares."""
        batch_shares: dict[str, float] = {}

        rollout_bounds: tuple[float | None, float | None] = (None, None)
        """``monitor.rollout_max_mean_logp_diff`` and ``monitor.rollout_min_mean_weight`` (the step-1 gate)."""
        rollout_checked: bool = False

        def _generate_and_score_completions(self, inputs):
            """TRL's generation and scoring, plus, with vLLM rollouts, ``rollout/...`` metrics of every
            generation batch and the step-1 parity gate on the first (:mod:`unified.warmup.rollout_check`)."""
            if self.routing is not None:
                self.routing.begin_generation()
            self.batch_shares = {}
            output = super()._generate_and_score_completions(inputs)
            if self.failfast is not None and self.model.training:
                self.failfast.observe(self.batch_shares)
            if self.routing is not None:
                self.routing.end_generation(output)
                log_generation_metrics(self, self.routing, output)
            if self.use_vllm and self.vllm_importance_sampling_correction and self.model.training \
                    and output.get("sampling_per_token_logps") is not None:
                self._check_rollouts(output)
            return output

        def _check_rollouts(self, output: dict) -> None:
            mask = output["completion_mask"]
            if output.get("tool_mask") is not None:
                mask = mask * output["tool_mask"]
            parity = rollout_parity(output["old_per_token_logps"], output["sampling_per_token_logps"], mask,
                                    output.get("importance_sampling_ratio"))
            for key, value in parity.metrics().items():
                self._metrics["train"][key].append(value)
            # every rank decides on the worst rank's figures, so that all of them stop together
            worst = self.accelerator.gather(torch.tensor(
                [[parity.mean_abs_logp_diff, -parity.mean_weight, -parity.geometric_mean_token_weight]],
                device=self.accelerator.device)).max(dim=0).values
            step = self.state.global_step + 1
            if self.rollout_checked:  # every later generation batch: against batch 1's difference
                check_weight_sync(float(worst[0]), self.rollout_baseline, max_rise=self.sync_bounds[0], step=step)
                return
            self.rollout_checked = True
            parity = type(parity)(**{**parity.__dict__, "mean_abs_logp_diff": float(worst[0]),
                                     "mean_weight": float(-worst[1]), "geometric_mean_token_weight": float(-worst[2])})
            max_diff, min_weight = self.rollout_bounds
            check_rollout_parity(parity, max_mean_logp_diff=max_diff, min_mean_weight=min_weight, step=step)
            self.rollout_baseline = parity.mean_abs_logp_diff

        sync_bounds: tuple[float | None, float | None] = (None, None)
        """``monitor.rollout_max_logp_diff_rise`` and ``monitor.rollout_probe_max_logp_diff`` (every batch)."""
        rollout_baseline: float = 0.0
        """Batch 1's mean |logp_train - logp_rollout| (worst rank), right after the first sync."""
        _probe_ids: list[int] | None = None

        def _generate(self, prompts):
            """TRL's generation; with vLLM rollouts, when it synced the weights (once per optimizer step), the
            rollout engine and the trainer then score the probe sequence (:mod:`unified.warmup.sync_probe`)."""
            syncs = self.use_vllm and self.state.global_step != self._last_loaded_step
            output = super()._generate(prompts)
            if syncs and self.model.training and self.sync_bounds[1] is not None:
                self._check_sync_probe()
            return output

        def _check_sync_probe(self) -> None:
            check_weight_checksums(self, self.state.global_step + 1)  # the engine's bytes (lr-independent)
            if self._probe_ids is None:
                self._probe_ids = probe_token_ids(self)
            diff, tokens = probe_logp_diff(trainer_logps(self, self._probe_ids), engine_logps(self, self._probe_ids))
            worst = float(self.accelerator.gather(torch.tensor([diff], device=self.accelerator.device)).max())
            self._metrics["train"]["rollout/probe_abs_logp_diff"].append(worst)
            check_probe(worst, tokens, max_diff=self.sync_bounds[1], step=self.state.global_step + 1)

        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            with self.accelerator.autocast(), torch_threads(self.generation_cpu_threads, self.accelerator.device):
                if self.routing is None:
                    return super()._generate_single_turn(prompt_ids, *args, **kwargs)
                in_process = not self.use_vllm and not self.use_transformers_continuous_batching
                return self.routing.generate(lambda: super(GSPOTrainer, self)._generate_single_turn(
                    prompt_ids, *args, **kwargs), prompt_ids, records=in_process,
                    model=self.accelerator.unwrap_model(self.model), temperature=self.temperature)

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                               batch_size=None, **kwargs):
            parent = super()._get_per_token_logps_and_entropies
            if self.routing is None:
                return parent(model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs)
            return self.routing.logps(lambda i, a, k, b, **kw: parent(model, i, a, k, b, **kw), input_ids,
                                      attention_mask, logits_to_keep, batch_size, kwargs)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if self.routing is not None:
                self.routing.use_batch(inputs)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def training_step(self, model, inputs, num_items_in_batch=None):
            if self.routing is None:
                return super().training_step(model, inputs, num_items_in_batch)
            try:  # the routes stay set through the backward (a checkpointed forward is recomputed there)
                return super().training_step(model, inputs, num_items_in_batch)
            finally:
                self.routing.clear()
                share = self.routing.take_agreement()
                if share is not None:
                    self._metrics["train"]["moe/router_agreement"].append(share)

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
            """Restore the weights through transformers' own loading path.

            ``save_pretrained`` writes MoE experts in the original per-expert layout (Mixtral's
            ``block_sparse_moe.experts.N.w1``, Qwen3-MoE's ``experts.N.gate_proj``), which
            ``from_pretrained`` fuses back into ``experts.gate_up_proj``; the Trainer's plain
            state-dict load does not, and would resume with the pre-resume experts and router.
            DeepSpeed and FSDP checkpoints keep the Trainer's own path.
            """
            if self.is_deepspeed_enabled or self.is_fsdp_enabled:
                return super()._load_from_checkpoint(resume_from_checkpoint, model)
            target = self.accelerator.unwrap_model(model if model is not None else self.model)
            dtype = next(target.parameters()).dtype
            restored = type(target).from_pretrained(resume_from_checkpoint, dtype=dtype)
            target.load_state_dict(restored.state_dict(), strict=True)

    return GSPOTrainer


__all__ = ["gspo_trainer_class", "torch_threads"]
