"""The probe of the weight sync: one fixed token sequence scored by the rollout engine and by the trainer.

After every weight sync (TRL pushes the trainer's weights into vLLM before the first generation of each
optimizer step), both sides score the same sequence ``x_1..x_n`` (the first training prompt, rendered with
the chat template, at most :data:`PROBE_TOKENS` tokens) at temperature 1:

    logp_side(t) = log softmax(f_side(x_<t))[x_t],   t = 2..n

and :func:`unified.warmup.rollout_check.check_probe` compares them. Where the engine's scores come from:

- ``vllm_server``: ``VLLMClient.get_sequence_logprobs`` (the server's ``/v1/completions`` with
  ``prompt_logprobs``), asked by the main process and broadcast to the other ranks;
- ``vllm_colocate``: the in-process ``LLM.generate`` with ``prompt_logprobs=0`` on every rank;
- any other engine object that has ``sequence_logprobs(token_ids) -> list[float]`` (log-probs of
  tokens 2..n; the tests' rollout engines through TRL's ``rollout_func``).
"""

from __future__ import annotations

import hashlib

import torch

from unified.warmup.rollout_check import WeightSyncError

PROBE_TOKENS = 128
"""Longest probe sequence (tokens)."""


def probe_token_ids(trainer) -> list[int]:
    """The probe: the first training prompt rendered by the trainer's chat template, cut to PROBE_TOKENS."""
    prompt = trainer.train_dataset[0]["prompt"]
    processing = trainer.processing_class
    tokenizer = getattr(processing, "tokenizer", processing)
    if isinstance(prompt, list):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    else:
        text = str(prompt)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:PROBE_TOKENS]
    if len(ids) < 2:
        raise ValueError("the weight-sync probe needs a training prompt of at least 2 tokens")
    return ids


@torch.no_grad()
def trainer_logps(trainer, ids: list[int]) -> list[float]:
    """The trainer's log-probs of tokens 2..n of ``ids`` (every rank runs it: sharded weights gather)."""
    x = torch.tensor([ids], device=trainer.accelerator.device)
    with trainer.accelerator.autocast():
        logits = trainer.model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()


def engine_logps(trainer, ids: list[int]) -> list[float]:
    """The rollout engine's log-probs of tokens 2..n of ``ids`` (module docstring for the engines)."""
    engine = trainer.vllm_generation
    own = getattr(engine, "sequence_logprobs", None)
    if callable(own):
        return [float(v) for v in own(ids)]
    mode = getattr(engine, "mode", None)
    if mode == "server":
        from accelerate.utils import broadcast_object_list

        box: list = [None]
        if trainer.accelerator.is_main_process:
            scored = engine.vllm_client.get_sequence_logprobs([ids], [1], top_logprobs=1, temperature=1.0)
            box[0] = [float(position[0]) for position in scored["actual_logprobs"][0]]
        if trainer.accelerator.num_processes > 1:
            broadcast_object_list(box, from_process=0)
        return box[0]
    if mode == "colocate":
        from vllm import SamplingParams

        out = engine.llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0),
                                  use_tqdm=False)
        scored = out[0].prompt_logprobs
        return [float(scored[t][ids[t]].logprob) if scored[t] and ids[t] in scored[t] else float("-inf")
                for t in range(1, len(ids))]
    raise TypeError(f"cannot score the weight-sync probe with rollout engine {type(engine).__name__}")


# ---- weight checksums: a sync check that does not depend on the learning rate ------------------------------
#
# The probe above compares log-probs: at lr 1e-6 one update moves them far less than bf16 noise, so a sync
# that stopped after step 1 is not seen for many steps. Right after each sync the engine also reports a
# checksum (SHA-256 of the bytes, in the engine's own dtype) of a few named tensors, and the trainer hashes
# its own copies cast to that dtype (what the sync sends): equal bytes or "weights not synced". At lr 1e-6 a
# few of a large matrix's bf16 elements still change each update (an Adam step of ~lr against a bf16 spacing
# of ~1e-4 at |w| ~ 0.02), so a stale engine's bytes differ from the first missed sync on.
# Where the checksums come from: any engine with ``weight_checksums(names) -> {name: (dtype, hexdigest)}``
# (the tests' CPU engines); ``vllm_colocate``: the in-process ``LLM.collective_rpc`` over the workers'
# ``named_parameters`` (names vLLM keeps unfused and unsharded: not verified on a GPU yet); ``vllm_server``:
# trl vllm-serve has no endpoint for it (the check is skipped, said once; the log-prob probe remains).

CHECKSUM_TENSORS = 4
"""How many of the trainer's largest trainable matrices (embeddings and LM head left out) are hashed."""


def tensor_checksum(tensor: torch.Tensor, dtype: torch.dtype) -> str:
    """SHA-256 of ``tensor``'s bytes once cast to ``dtype`` (round to nearest, as a sync's ``copy_`` does)."""
    flat = tensor.detach().to(dtype).contiguous().reshape(-1).cpu()
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def checksum_names(model, count: int = CHECKSUM_TENSORS) -> list[str]:
    """The ``count`` largest trainable 2-d parameters outside the embeddings / LM head (ties by name)."""
    rows = [(p.numel(), n) for n, p in model.named_parameters()
            if p.requires_grad and p.dim() >= 2 and "embed" not in n and "lm_head" not in n]
    return [n for _, n in sorted(rows, key=lambda r: (-r[0], r[1]))[:count]]


def engine_checksums(trainer, names: list[str]) -> dict[str, tuple[str, str]] | None:
    """The rollout engine's ``{name: (dtype, sha256)}`` for ``names`` (None: the engine cannot say)."""
    engine = trainer.vllm_generation
    own = getattr(engine, "weight_checksums", None)
    if callable(own):
        return own(names)
    if getattr(engine, "mode", None) == "colocate":
        answers = engine.llm.collective_rpc(_worker_checksums, args=(names,))
        return answers[0] if answers else None
    return None


def _worker_checksums(worker, names):  # runs inside a vLLM worker (collective_rpc)
    params = dict(worker.model_runner.model.named_parameters())
    return {n: (str(params[n].dtype).removeprefix("torch."), tensor_checksum(params[n], params[n].dtype))
            for n in names if n in params}


def check_weight_checksums(trainer, step: int) -> bool:
    """After a sync: raise ``WeightSyncError`` when the engine's bytes of the chosen tensors differ from the
    trainer's; False when the engine reports none (nothing checked)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    names = getattr(trainer, "_checksum_names", None)
    if names is None:
        names = trainer._checksum_names = checksum_names(model)
    theirs = engine_checksums(trainer, names) or {}
    params = dict(model.named_parameters())
    bad = []
    for name in names:
        if name not in theirs:
            continue
        dtype, digest = theirs[name]
        if tensor_checksum(params[name], getattr(torch, dtype)) != digest:
            bad.append(name)
    flag = torch.tensor([float(len(bad))], device=trainer.accelerator.device)
    if float(trainer.accelerator.gather(flag).max()) > 0:
        raise WeightSyncError(
            f"unified.warmup: weights not synced: after the weight sync before step {step} the rollout engine's "
            f"bytes of {', '.join(bad) or 'the checksummed tensors (another rank)'} differ from the trainer's "
            f"(SHA-256 in the engine's dtype, {len(theirs)} of {len(names)} tensors checked; a check that does not "
            f"depend on the learning rate). " + WeightSyncError.HINT)
    return bool(theirs)


__all__ = ["CHECKSUM_TENSORS", "PROBE_TOKENS", "check_weight_checksums", "checksum_names", "engine_checksums",
           "engine_logps", "probe_token_ids", "tensor_checksum", "trainer_logps"]
