"""Batched generation with a transformers model: the one place prompts become completions.

Used by the in-process ``hf`` policy backend and by the local OpenAI-compatible server. Many
prompts are left-padded into one batch and generated together (on CPU this is several times
faster than one at a time); each output keeps its own token ids, so nothing is re-tokenised
downstream (verl's convention).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings (OpenAI names)."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    """0 means greedy."""
    top_p: float = 1.0
    seed: int | None = None
    """Seeds torch's generator for this batch when set (reproducible sampling)."""


@dataclass
class GenerationOutput:
    """One completion."""

    text: str
    """Decoded completion, special tokens removed except the chat tags the parser needs."""
    token_ids: list[int] = field(default_factory=list)
    """Generated ids, EOS included when generated, padding excluded."""
    prompt_tokens: int = 0
    finish_reason: str = "stop"
    """``stop`` (EOS generated) or ``length`` (max_new_tokens reached)."""
    seconds: float = 0.0
    """Wall time of the batch this output was generated in."""


def _eos_ids(model, tokenizer) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id and im_end not in ids:
        ids.append(im_end)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


@torch.no_grad()
def prefilled_batch_cache(model, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """Prefill each prompt on its own, then left-pad the KV caches into one batch cache.

    Padding a batch to its longest prompt makes the prefill cost ``B * L_max`` tokens instead of
    ``sum_b L_b``; on a CPU, where prefill is compute-bound, that waste can cancel what batching
    gains in decoding. Here row ``b`` (true length ``L_b``) is run alone over its first
    ``L_b - 1`` tokens; its per-layer keys/values (1, H_kv, L_b - 1, D) are left-padded with zeros
    to (1, H_kv, L_max - 1, D) and concatenated to (B, H_kv, L_max - 1, D). ``generate`` then
    feeds only the last column of the left-padded ``input_ids`` (B, L_max); the padded cache slots
    are hidden by ``attention_mask`` and positions come from its cumulative sum, exactly as for a
    padded prefill. Returns None when the model's cache is not a plain DynamicCache (sliding
    windows, linear-attention states): the caller then prefills the padded batch.
    """
    from transformers import DynamicCache

    width = input_ids.shape[1]
    lengths = attention_mask.sum(dim=1).tolist()
    if width < 2 or min(lengths) < 2:
        return None
    caches = []
    for row, length in enumerate(lengths):
        ids = input_ids[row:row + 1, width - length:width - 1]
        output = model(input_ids=ids, use_cache=True)
        cache = getattr(output, "cache", None) or output.past_key_values  # `cache` since transformers 5.2x
        if type(cache) is not DynamicCache or any(type(layer).__name__ != "DynamicLayer" for layer in cache.layers):
            return None
        caches.append(cache)
    batched = DynamicCache()
    for layer_idx in range(len(caches[0].layers)):
        keys, values = [], []
        for cache in caches:
            layer = cache.layers[layer_idx]
            pad = (width - 1) - layer.keys.shape[2]
            keys.append(torch.nn.functional.pad(layer.keys, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(layer.values, (0, 0, pad, 0)))
        batched.update(torch.cat(keys), torch.cat(values), layer_idx)
    return batched


@torch.no_grad()
def batched_generate(model, tokenizer, prompts: list[str], params: SamplingParams = SamplingParams(),
                     max_batch_size: int = 16, prefill_separately: bool = True) -> list[GenerationOutput]:
    """Generate a completion for every prompt text (already chat-templated), in batches.

    Shapes: each batch is ``input_ids`` (B, L_max) left-padded with ``attention_mask`` (B, L_max);
    ``generate`` returns (B, L_max + T); the completion of row b is ``out[b, L_max:]`` cut at its
    first EOS. With ``prefill_separately`` (default) the prompts are prefilled one by one and only
    the decoding is batched (see :func:`prefilled_batch_cache`).
    """
    outputs: list[GenerationOutput] = []
    eos = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        for start in range(0, len(prompts), max_batch_size):
            chunk = prompts[start:start + max_batch_size]
            t0 = time.perf_counter()
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            kwargs = dict(max_new_tokens=params.max_new_tokens, eos_token_id=eos, pad_token_id=pad_id)
            if params.temperature > 0:
                kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
                if params.seed is not None:
                    torch.manual_seed(params.seed)
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            if prefill_separately and len(chunk) > 1:
                cache = prefilled_batch_cache(model, enc["input_ids"], enc["attention_mask"])
                if cache is not None:
                    kwargs["cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"] = cache
            out = model.generate(**enc, **kwargs)
            seconds = time.perf_counter() - t0
            width = enc["input_ids"].shape[1]
            for row in range(len(chunk)):
                ids = out[row, width:].tolist()
                cut = next((i for i, t in enumerate(ids) if t in eos), None)
                finish = "stop" if cut is not None else "length"
                ids = ids[: cut + 1] if cut is not None else [t for t in ids if t != pad_id]
                text_ids = ids[:-1] if finish == "stop" else ids
                text = tokenizer.decode(text_ids, skip_special_tokens=False)
                outputs.append(GenerationOutput(
                    text=_strip_padding_tokens(text, tokenizer), token_ids=ids,
                    prompt_tokens=int(enc["attention_mask"][row].sum()), finish_reason=finish, seconds=seconds))
    finally:
        tokenizer.padding_side = old_side
    return outputs


def _strip_padding_tokens(text: str, tokenizer) -> str:
    for token in {tokenizer.pad_token, "<|endoftext|>"} - {None}:
        text = text.replace(token, "")
    return text
