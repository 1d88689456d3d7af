"""One GSPO optimizer step on a fixed global batch, in the process layout it was launched in.

Run as ``python tests/_gspo_step_program.py OUT [OVERRIDE...]`` (one process) or under ``accelerate launch
--num_processes N`` (N data-parallel ranks). Every rank builds the same trainer
(:func:`unified.warmup.trainer.build_trainer` on a tiny random Qwen3-MoE, ``unified.models.tiny``),
takes its contiguous slice of one global batch of 8 completions (fixed token ids and advantages,
as GRPO's generation would hand them to the loss), computes TRL's GSPO loss on it, backpropagates
through the accelerator (DDP all-reduces the gradients; under DeepSpeed ZeRO-3 the engine
reduce-scatters them into each rank's slice), and takes one AdamW step. Rank 0 writes
``OUT/step.pt``: the global loss (mean of the ranks' losses), the gradients after the all-reduce and
the updated weights.

Fixed completions instead of sampled ones: a rank samples its own completions with its own seed,
so the rollouts of N processes never equal those of one; the step after the rollouts is what the
layout can change. ``model.router_aux_loss_coef=0``: the MoE load-balancing loss is computed per rank
on the rank's tokens (a product of two means, not a mean), so with it a data-parallel step differs
from a one-process step by design, in every DDP trainer of an MoE.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accelerate.utils import DistributedType

sys.path.insert(0, str(Path(__file__).parent))
from _warmup_support import build_tiny_trainer, completion_batch  # noqa: E402

GLOBAL_BATCH = 8


def main(out: Path, *overrides: str) -> None:
    trainer = build_tiny_trainer(out / "run", "model.router_aux_loss_coef=0", "train.learning_rate=1e-3",
                                 "train.per_device_train_batch_size=2", *overrides)
    acc = trainer.accelerator
    rank, world = acc.process_index, acc.num_processes
    assert GLOBAL_BATCH % world == 0, f"{world} processes do not split a batch of {GLOBAL_BATCH}"
    lengths = [3, 5, 2, 6, 4, 6, 1, 5]
    completions = [[10 + (7 * i + 3 * j) % 150 for j in range(n)] for i, n in enumerate(lengths)]
    advantages = [1.2, -0.4, 0.7, -1.5, 0.3, 0.9, -0.8, -0.2]
    batch = completion_batch(completions, advantages, prompt_len=6, pad_to=6, seed=3)
    part = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
    local = {k: (v[part] if torch.is_tensor(v) and v.dim() else v) for k, v in batch.items()}
    local["num_items_in_batch"] = batch["completion_mask"].sum()  # the global count, as TRL gathers it

    if acc.distributed_type == DistributedType.DEEPSPEED:
        grads, weights, loss = _deepspeed_step(trainer, local)
    else:
        model = acc.prepare(trainer.model)
        trainer.create_optimizer()
        optimizer = acc.prepare(trainer.optimizer)
        optimizer.zero_grad()
        loss = trainer._compute_loss(model, local)
        acc.backward(loss)
        grads = {n: p.grad.detach().clone() for n, p in acc.unwrap_model(model).named_parameters()
                 if p.grad is not None}
        optimizer.step()
        weights = {n: p.detach().clone() for n, p in acc.unwrap_model(model).named_parameters()}
    global_loss = acc.gather(loss.detach().reshape(1)).mean().item()
    if acc.is_main_process:
        torch.save({"world": world, "loss": global_loss, "grads": grads, "weights": weights,
                    "layout": acc.distributed_type.value}, out / "step.pt")
    acc.wait_for_everyone()


def _deepspeed_step(trainer, local):
    """The same step through DeepSpeed's engine (ZeRO-3: each rank holds a slice of every parameter,
    gradient and optimizer state). accelerate prepares model and optimizer together; the engine's
    ``backward`` reduce-scatters the averaged gradients, read whole with ``safe_get_full_grad`` (a
    collective: every rank calls it) before ``step``; the weights are gathered after it."""
    import deepspeed
    from deepspeed.utils import safe_get_full_grad

    acc = trainer.accelerator
    trainer.create_optimizer()
    engine, _ = acc.prepare(trainer.model, trainer.optimizer)
    loss = trainer._compute_loss(engine, local)
    engine.backward(loss)
    grads = {}
    for name, param in engine.module.named_parameters():
        grad = safe_get_full_grad(param)
        if grad is not None:
            grads[name] = grad.detach().clone()
    engine.step()
    params = list(engine.module.named_parameters())
    with deepspeed.zero.GatheredParameters([p for _, p in params]):
        weights = {n: p.detach().clone() for n, p in params}
    return grads, weights, loss


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
