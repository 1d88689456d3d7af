"""Batched generation with a transformers model: the one place prompts become completions.

Used by the in-process ``hf`` policy backend and by the local OpenAI-compatible server. Many
prompts are left-padded into one batch and generated together (on CPU this is several times
faster than one at a time); each output keeps its own token ids, so nothing is re-tokenised
downstream (verl's convention).
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass, field

import torch

from unified.models.prefix_cache import PrefixCache, is_plain_dynamic_cache


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
    prompt_token_ids: list[int] = field(default_factory=list)
    """The prompt's ids as fed to the model (no padding)."""
    logprobs: list[float] | None = None
    """Log-probability of each generated token under the distribution it was drawn from
    (:func:`token_logprobs`), aligned with ``token_ids``."""
    finish_reason: str = "stop"
    """``stop`` (EOS generated), ``length`` (max_new_tokens reached) or ``timeout`` (the row's
    deadline passed; the text generated until then is kept)."""
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


def _cache_kwarg(model) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values``: the name ``forward`` takes."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _prefill_kwargs(model) -> dict:
    """``logits_to_keep=1`` where ``forward`` takes it: a prefill needs no logits, and computing them
    for every prompt position costs ``n x d x V`` (for SmolLM2, 13% of the prefill's FLOPs) and an
    ``(n, V)`` tensor."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def _output_cache(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


@torch.no_grad()
def prefill_row(model, ids: torch.Tensor, prefix_cache: PrefixCache | None = None):
    """The KV cache of one unpadded token sequence ``ids`` (1, n), reusing a cached prefix.

    With ``prefix_cache`` the longest cached prefix ``p`` of ``ids`` is taken from it and only
    ``ids[:, p:]`` is run (positions ``p..n-1``, attending to the cached ``p`` columns); the new
    sequence is then stored for later calls. Returns ``(cache, p)`` with a ``DynamicCache`` of
    (1, H_kv, n, D) per layer, or ``(None, 0)`` when the model's cache is not a plain
    DynamicCache (sliding windows, linear-attention states).
    """
    n = ids.shape[1]
    reused, cache = prefix_cache.lookup(ids[0], max_length=n) if prefix_cache is not None else (0, None)
    if reused < n:
        kwargs = {_cache_kwarg(model): cache} if cache is not None else {}
        cache = _output_cache(model(input_ids=ids[:, reused:], use_cache=True, **kwargs, **_prefill_kwargs(model)))
    if not is_plain_dynamic_cache(cache):
        return None, 0
    if prefix_cache is not None and reused < n:
        # the tensors were just made by this forward pass (torch.cat): owned by this row only
        prefix_cache.insert(ids[0], [layer.keys for layer in cache.layers],
                            [layer.values for layer in cache.layers], copy=False)
    return cache, reused


@functools.cache  # one class for the process (transformers is imported lazily, hence not at module level)
def _preallocated_layer_class():
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A DynamicLayer whose keys/values are views of a buffer allocated once, (B, H_kv, capacity, D).

        ``DynamicLayer.update`` concatenates the whole cache at every decoding step (a copy of
        B x H_kv x L x D per layer and step: for 8 rows of 400 tokens about 12% of a CPU decode
        step, more for longer prompts); here a step writes only its new column. The buffer
        doubles when full. It is owned by one batch cache: nothing else reads it.
        """

        def update(self, key_states, value_states, *args, **kwargs):
            length, new = self.keys.shape[-2], key_states.shape[-2]
            if length + new > self.buffer_keys.shape[-2]:
                grow = max(length + new, 2 * self.buffer_keys.shape[-2]) - self.buffer_keys.shape[-2]
                self.buffer_keys = torch.nn.functional.pad(self.buffer_keys, (0, 0, 0, grow))
                self.buffer_values = torch.nn.functional.pad(self.buffer_values, (0, 0, 0, grow))
            self.buffer_keys[:, :, length:length + new] = key_states
            self.buffer_values[:, :, length:length + new] = value_states
            self.keys = self.buffer_keys[:, :, :length + new]
            self.values = self.buffer_values[:, :, :length + new]
            return self.keys, self.values

    return PreallocatedLayer


def left_pad_caches(caches: list, width: int, capacity: int | None = None):
    """Stack per-row caches (1, H_kv, n_b, D) into one (B, H_kv, width, D), zero-padded on the left.

    The batch cache's layers are views of buffers of ``capacity`` columns (default ``width``),
    so ``capacity = width + max_new_tokens`` lets decoding write in place instead of
    concatenating (see ``PreallocatedLayer``).
    """
    from transformers import DynamicCache

    layer_class = _preallocated_layer_class()
    capacity = max(width, capacity or width)
    batched = DynamicCache()
    batched.layers = []
    for layer_idx in range(len(caches[0].layers)):
        first = caches[0].layers[layer_idx].keys
        shape = (len(caches), first.shape[1], capacity, first.shape[3])
        layer = layer_class()
        layer.lazy_initialization(first, first)
        layer.buffer_keys = torch.zeros(shape, dtype=first.dtype, device=first.device)
        layer.buffer_values = torch.zeros(shape, dtype=first.dtype, device=first.device)
        for row, cache in enumerate(caches):
            source = cache.layers[layer_idx]
            n = source.keys.shape[2]
            layer.buffer_keys[row, :, width - n:width] = source.keys[0]
            layer.buffer_values[row, :, width - n:width] = source.values[0]
        layer.keys, layer.values = layer.buffer_keys[:, :, :width], layer.buffer_values[:, :, :width]
        batched.layers.append(layer)
    return batched


@torch.no_grad()
def prefilled_batch_cache(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          prefix_cache: PrefixCache | None = None, capacity: int | None = None):
    """Prefill each prompt on its own, then left-pad the KV caches into one batch cache.

    Padding a batch to its longest prompt makes the prefill cost ``B * L_max`` tokens instead of
    ``sum_b L_b``; on a CPU, where prefill is compute-bound, that waste can cancel what batching
    gains in decoding. Here row ``b`` (true length ``L_b``) is run alone over its first
    ``L_b - 1`` tokens (only those after its longest cached prefix when ``prefix_cache`` is
    given, see :func:`prefill_row`); its per-layer keys/values (1, H_kv, L_b - 1, D) are
    left-padded with zeros to (1, H_kv, L_max - 1, D) and concatenated to (B, H_kv, L_max - 1, D).
    ``generate`` then feeds only the last column of the left-padded ``input_ids`` (B, L_max); the
    padded cache slots are hidden by ``attention_mask`` and positions come from its cumulative
    sum, exactly as for a padded prefill. Returns None when the model's cache is not a plain
    DynamicCache (sliding windows, linear-attention states): the caller then prefills the padded
    batch.
    """
    width = input_ids.shape[1]
    lengths = attention_mask.sum(dim=1).tolist()
    if width < 2 or min(lengths) < 2:
        return None
    caches = []
    for row, length in enumerate(lengths):
        cache, _ = prefill_row(model, input_ids[row:row + 1, width - length:width - 1], prefix_cache)
        if cache is None:
            return None
        caches.append(cache)
    return left_pad_caches(caches, width - 1, capacity)


def _sampling_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(b, V) logits -> the (unnormalised) probabilities tokens are drawn from at ``temperature`` > 0:
    softmax(logits / T), zero outside the top-p nucleus (the most likely token is always kept)."""
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs > params.top_p  # keeps the first token always
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(outside, 0.0))
    return probs


def _next_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> torch.Tensor:
    """(b, V) logits -> (b,) tokens: argmax, or top-p (nucleus) sampling at ``temperature``
    (drawn from ``generator`` when given, else from torch's global generator)."""
    if params.temperature <= 0:
        return logits.argmax(dim=-1)
    return torch.multinomial(_sampling_probs(logits, params), 1, generator=generator).squeeze(-1)


def token_logprobs(logits: torch.Tensor, tokens: list[int], params: list[SamplingParams]) -> list[float]:
    """Log-probability of ``tokens[b]`` under the distribution row b drew it from; ``logits`` (b, V).

    Greedy rows (temperature 0): ``log softmax(logits_b)[x_b]``, the model's own distribution
    (the argmax is its most likely token). Sampled rows: ``log(p_b[x_b] / sum_v p_b[v])`` with
    ``p_b`` the tempered top-p probabilities of :func:`_sampling_probs` (what the token was
    drawn from). One log-softmax over the vocabulary per row and step.
    """
    index = torch.tensor(tokens, device=logits.device)[:, None]
    out = torch.log_softmax(logits.float(), dim=-1).gather(-1, index)[:, 0].tolist()
    for b, p in enumerate(params):
        if p.temperature > 0:
            probs = _sampling_probs(logits[b:b + 1], p)[0]
            out[b] = float(torch.log(probs[tokens[b]] / probs.sum()))
    return out


def past_deadline(deadline: float | None) -> bool:
    """True when ``deadline`` (a ``time.monotonic()`` value) has passed; None never passes."""
    return deadline is not None and time.monotonic() >= deadline


class DeadlineCriteria:
    """A transformers ``StoppingCriteria``: row b stops once ``deadlines[b]`` (monotonic) has passed."""

    def __init__(self, deadlines: list[float | None]) -> None:
        self.deadlines = deadlines

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.BoolTensor:
        return torch.tensor([past_deadline(d) for d in self.deadlines], dtype=torch.bool, device=input_ids.device)


def finish_reason(ids: list[int], eos, max_new_tokens: int) -> str:
    """``stop`` (an EOS was generated), ``length`` (``max_new_tokens`` reached), else ``timeout``
    (only a deadline ends a row earlier)."""
    if any(t in eos for t in ids):
        return "stop"
    return "length" if len(ids) >= max_new_tokens else "timeout"


@torch.no_grad()
def decode_shrinking_batch(model, cache, enc: dict, params: SamplingParams, eos: list[int],
                           on_row_done=None, deadlines: list[float | None] | None = None,
                           logprobs: list[list[float]] | None = None) -> list[list[int]]:
    """Batched decoding over a prefilled left-padded cache; a row leaves the batch when it ends.

    ``cache`` holds (B, H_kv, L_max - 1, D) per layer (:func:`prefilled_batch_cache`); step t
    feeds one token per live row at position ``L_b - 1 + t`` (``L_b``: the row's true length)
    with a 2-D attention mask (b, L_max + t) that hides the left padding. A row that generates
    an EOS or reaches ``max_new_tokens`` is dropped from the cache, the mask and the inputs, so
    later steps cost what the remaining rows need (``generate`` keeps decoding finished rows
    until the last one ends); so is a row whose ``deadlines[row]`` (``time.monotonic()``) has
    passed. ``on_row_done(row, ids, cache, batch_row)`` is called before the
    row is dropped, while its KV (columns ``L_max - L_b : L_max - 1 + len(ids) - 1``) is in
    ``cache`` at index ``batch_row``. Returns each row's generated ids (EOS included); when
    ``logprobs`` (one empty list per row) is given, each token's :func:`token_logprobs` is
    appended to its row's list.
    """
    mask = enc["attention_mask"]
    tokens = enc["input_ids"][:, -1:]
    positions = mask.sum(dim=1, keepdim=True) - 1
    live = list(range(tokens.shape[0]))
    generated: list[list[int]] = [[] for _ in live]
    name = _cache_kwarg(model)
    stop = set(eos)
    for _ in range(params.max_new_tokens):
        logits = model(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True,
                       **{name: cache}).logits[:, -1, :]
        chosen = _next_tokens(logits, params)
        done = []
        now = time.monotonic()
        chosen_list = chosen.tolist()
        step_logprobs = token_logprobs(logits, chosen_list, [params] * len(chosen_list)) if logprobs is not None else None
        for i, token in enumerate(chosen_list):
            generated[live[i]].append(token)
            if step_logprobs is not None:
                logprobs[live[i]].append(step_logprobs[i])
            deadline = deadlines[live[i]] if deadlines else None
            if token in stop or len(generated[live[i]]) >= params.max_new_tokens or (
                    deadline is not None and now >= deadline):
                done.append(i)
        if done:
            if on_row_done is not None:
                for i in done:
                    on_row_done(live[i], generated[live[i]], cache, i)
            keep = [i for i in range(len(live)) if i not in done]
            if not keep:
                break
            index = torch.tensor(keep, device=mask.device)
            for layer in cache.layers:
                length = layer.keys.shape[-2]
                if hasattr(layer, "buffer_keys"):
                    layer.buffer_keys, layer.buffer_values = layer.buffer_keys[index], layer.buffer_values[index]
                    layer.keys, layer.values = layer.buffer_keys[:, :, :length], layer.buffer_values[:, :, :length]
                else:
                    layer.keys, layer.values = layer.keys[index], layer.values[index]
            mask, chosen, positions = mask[index], chosen[index], positions[index]
            live = [live[i] for i in keep]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        tokens, positions = chosen[:, None], positions + 1
    return generated


@dataclass
class GenerationStats:
    """Cumulative counters of :func:`batched_generate` calls (pass one to collect them)."""

    calls: int = 0
    rows: int = 0
    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache."""
    completion_tokens: int = 0
    prefill_seconds: float = 0.0
    """Separate per-row prefill (0 when the padded batch is prefilled inside ``generate``)."""
    decode_seconds: float = 0.0
    """``generate`` (the batched decode, plus the padded prefill when rows are not prefilled apart)."""


def _encode_left_padded(tokenizer, prompts: list[str], pad_id: int, device) -> tuple[list[list[int]], dict]:
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(len(i) for i in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, row_ids in enumerate(ids):
        if row_ids:
            input_ids[row, width - len(row_ids):] = torch.tensor(row_ids)
            mask[row, width - len(row_ids):] = 1
    return ids, {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}


@torch.no_grad()
def batched_generate(model, tokenizer, prompts: list[str], params: SamplingParams = SamplingParams(),
                     max_batch_size: int = 16, prefill_separately: bool = True,
                     prefix_cache: PrefixCache | None = None,
                     stats: GenerationStats | None = None,
                     deadlines: list[float | None] | None = None) -> list[GenerationOutput]:
    """Generate a completion for every prompt text (already chat-templated), in batches.

    Shapes: each batch is ``input_ids`` (B, L_max) left-padded with ``attention_mask`` (B, L_max);
    the completion of row b is cut at its first EOS. With ``prefill_separately`` (default) the
    prompts are prefilled one by one (see :func:`prefilled_batch_cache`) and decoded together by
    :func:`decode_shrinking_batch`; otherwise (or when the model's cache is not a plain
    DynamicCache) ``generate`` prefills the padded batch and returns (B, L_max + T). With ``prefix_cache`` each
    prompt's longest cached token prefix is reused, and after decoding each row's prompt +
    completion KV (columns ``L_max - L_b : L_max + n_b - 1`` of the final cache, the last
    generated token never having been fed) is stored for the next turn of the same episode.
    ``deadlines`` (one ``time.monotonic()`` value or None per prompt) end a row's generation
    when they pass, with ``finish_reason="timeout"`` and the tokens generated so far.
    """
    outputs: list[GenerationOutput] = []
    eos = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    caching = prefix_cache is not None and prefix_cache.enabled
    for start in range(0, len(prompts), max_batch_size):
        chunk = prompts[start:start + max_batch_size]
        chunk_deadlines = list(deadlines[start:start + max_batch_size]) if deadlines else None
        t0 = time.perf_counter()
        row_ids, enc = _encode_left_padded(tokenizer, chunk, pad_id, model.device)
        kwargs = dict(max_new_tokens=params.max_new_tokens, eos_token_id=eos, pad_token_id=pad_id,
                      return_dict_in_generate=True, output_scores=True)  # ``generate`` serves batches without a prefilled cache
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
            if params.seed is not None:
                torch.manual_seed(params.seed)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if chunk_deadlines and any(d is not None for d in chunk_deadlines):
            from transformers import StoppingCriteriaList

            kwargs["stopping_criteria"] = StoppingCriteriaList([DeadlineCriteria(chunk_deadlines)])
        cache, reused_before = None, prefix_cache.stats.reused_tokens if caching else 0
        if caching or prefill_separately:
            cache = prefilled_batch_cache(model, enc["input_ids"], enc["attention_mask"],
                                          prefix_cache if caching else None,
                                          capacity=enc["input_ids"].shape[1] + params.max_new_tokens)
        t1 = time.perf_counter()
        width = enc["input_ids"].shape[1]

        def store(row: int, ids: list[int], batch_cache, batch_row: int) -> None:
            seq = row_ids[row] + ids[:-1]  # every token fed to the model for this row
            begin = width - len(row_ids[row])
            if batch_cache.get_seq_length() >= begin + len(seq):
                prefix_cache.insert_row(seq, batch_cache, batch_row, begin)

        row_logprobs: list[list[float]] = [[] for _ in chunk]
        if cache is not None:
            generated = decode_shrinking_batch(model, cache, enc, params, eos, on_row_done=store if caching else None,
                                               deadlines=chunk_deadlines, logprobs=row_logprobs)
        else:  # ``scores`` are the processed logits tokens were chosen from (tempered, top-p masked)
            result = model.generate(**enc, **kwargs)
            generated = [result.sequences[row, width:].tolist() for row in range(len(chunk))]
            for t, scores in enumerate(result.scores):
                chosen = result.sequences[:, width + t]
                step = torch.log_softmax(scores.float(), dim=-1).gather(-1, chosen[:, None])[:, 0].tolist()
                for row in range(len(chunk)):
                    row_logprobs[row].append(step[row])
        t2 = time.perf_counter()
        for row in range(len(chunk)):
            ids = generated[row]
            cut = next((i for i, t in enumerate(ids) if t in eos), None)
            ids = ids[: cut + 1] if cut is not None else [t for t in ids if t != pad_id]
            finish = finish_reason(ids, eos, params.max_new_tokens)
            text_ids = ids[:-1] if finish == "stop" else ids
            text = tokenizer.decode(text_ids, skip_special_tokens=False)
            outputs.append(GenerationOutput(
                text=_strip_padding_tokens(text, tokenizer), token_ids=ids, logprobs=row_logprobs[row][:len(ids)],
                prompt_tokens=len(row_ids[row]), prompt_token_ids=list(row_ids[row]), finish_reason=finish, seconds=t2 - t0))
        if stats is not None:
            stats.calls += 1
            stats.rows += len(chunk)
            stats.prompt_tokens += sum(len(i) for i in row_ids)
            stats.reused_prompt_tokens += (prefix_cache.stats.reused_tokens - reused_before) if caching else 0
            stats.completion_tokens += sum(len(o.token_ids) for o in outputs[-len(chunk):])
            stats.prefill_seconds += t1 - t0
            stats.decode_seconds += t2 - t1
    return outputs


def _strip_padding_tokens(text: str, tokenizer) -> str:
    for token in {tokenizer.pad_token, "<|endoftext|>"} - {None}:
        text = text.replace(token, "")
    return text
