"""Continuous batching for in-process generation: rows join and leave between decode steps.

The round-based :func:`unified.models.generation.batched_generate` decodes a fixed batch until
its last row ends; rows that end early leave, but no new row can enter, so with episodes of
uneven length the batch shrinks (8, 2, 2 rows in session 2's BFCL mix) and the machine decodes
one or two rows at a time while the other episodes wait. :class:`ContinuousBatcher` is the
scheduler of vLLM / TGI ("continuous" or "in-flight" batching, Yu et al., 2022, *Orca*) for a
transformers model on one device:

- ``add(key, prompt, params)`` queues a prompt with its own sampling settings (default: the
  batcher's; a seeded row samples from its own ``torch.Generator``, so its completion does not
  depend on which rows it shared steps with); every :meth:`ContinuousBatcher.step` first admits queued
  rows (up to ``max_rows`` live), prefilling each one alone (its longest cached prefix reused,
  see :func:`unified.models.generation.prefill_row`), then runs **one** decode step over every
  live row and returns the rows that ended (EOS, ``max_new_tokens``, or the row's ``deadline``,
  a ``time.monotonic()`` value given to ``add``: ``finish_reason="timeout"``).
- Each row owns its KV buffers, ``(H_kv, capacity, D)`` per layer with ``capacity = n - 1 +
  max_new_tokens`` for a prompt of ``n`` tokens, so joining and leaving move no other row's KV
  and nothing is padded: row ``b`` at length ``L_b`` writes its new key/value at column
  ``L_b`` (position ``L_b``) and attends to columns ``0..L_b``.
- Attention over rows of different lengths: :class:`RowKVCache` hands each layer's attention a
  *list* of per-row ``(H_kv, L_b + 1, D)`` views, and the registered attention function
  ``unified_rows`` runs SDPA row by row with the query's heads grouped by their KV head,
  ``q_b: (H, 1, D) -> (H_kv, H / H_kv, D)`` (GQA without ``repeat_kv``), so a decode step reads
  ``sum_b L_b`` cached columns, not ``B * max_b L_b`` as a left-padded batch does. Tensors
  (prefill, training) go to transformers' SDPA unchanged.

Greedy completions equal the round-based path's up to float round-off (tested). Models whose
cache is not a plain ``DynamicCache`` (sliding windows, linear-attention layers) or whose
attention is not SDPA are not supported: :func:`continuous_batching_supported` says so and the
callers keep the round-based path.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable

import torch
from einops import rearrange

from unified.models.generation import (GenerationOutput, GenerationStats, SamplingParams, _cache_kwarg, _eos_ids,
                                       _next_tokens, _strip_padding_tokens, prefill_row,
                                       token_logprobs)
from unified.models.prefix_cache import PrefixCache
from unified.models.generation import batched_generate

_BATCHERS = object()
"""``ContinuousBatcher.add``'s default ``prefix_cache``: the batcher's own."""

ROW_ATTENTION = "unified_rows"
"""The attention implementation name registered with transformers' ``AttentionInterface``."""


@functools.cache  # registered once per process; transformers is imported lazily
def register_row_attention() -> str:
    """Register ``unified_rows``: per-row SDPA over lists of KV views, transformers' SDPA otherwise."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    def row_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """query (B, H, 1, D); key/value: B views (H_kv, L_b, D). Returns (B, 1, H, D), None."""
        if not isinstance(key, list):
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, **kwargs)
        batch, heads, q_len, dim = query.shape
        if q_len != 1:
            raise ValueError(f"row attention decodes one token per row, got a query of length {q_len}")
        # the query heads that share a KV head (GQA) become that head's "query length": one row's
        # attention is (1, H_kv, H / H_kv, D) x (1, H_kv, L_b, D), no KV head is repeated
        grouped = rearrange(query, "b (kv group) 1 d -> b 1 kv group d", kv=key[0].shape[0])
        # 4-D inputs without a mask take torch's fused CPU kernel (3-D ones the math path: 1.4x slower)
        rows = [torch.nn.functional.scaled_dot_product_attention(grouped[b], key[b][None], value[b][None],
                                                                 scale=scaling) for b in range(batch)]
        return rearrange(torch.cat(rows), "b kv group d -> b 1 (kv group) d"), None

    AttentionInterface.register(ROW_ATTENTION, row_attention)
    AttentionMaskInterface.register(ROW_ATTENTION, sdpa_mask)
    return ROW_ATTENTION


def continuous_batching_supported(model) -> tuple[bool, str]:
    """``(ok, why_not)``: SDPA attention and a plain per-layer KV cache are required (the text config's
    layers: a vision-language config such as Qwen3.5-MoE's keeps them in ``text_config``)."""
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in ("sdpa", ROW_ATTENTION):
        return False, f"attention implementation {attention!r} (continuous batching needs sdpa)"
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("sliding_window", "layer_types"):
        value = getattr(text, name, None)
        if name == "sliding_window" and value:
            return False, "sliding-window attention"
        if name == "layer_types" and value and any(t != "full_attention" for t in value):
            return False, "layers other than full attention (linear attention or sliding windows)"
    return True, ""


def _kv_shape(config) -> tuple[int, int, int]:
    """(layers, H_kv, D) of a decoder config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return text.num_hidden_layers, kv_heads, dim


@dataclass
class _Row:
    key: Hashable
    prompt_ids: list[int]
    keys: list[torch.Tensor]
    """Per layer (H_kv, capacity, D)."""
    values: list[torch.Tensor]
    length: int
    """Cached columns: the prompt minus its last token, plus every generated token but the last."""
    next_token: int
    started: float
    params: SamplingParams
    generator: torch.Generator | None = None
    """Per-row sampler state when ``params.seed`` is set (sampling only)."""
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    """Per generated token, :func:`unified.models.generation.token_logprobs`."""
    deadline: float | None = None
    """``time.monotonic()`` after which the row ends with ``finish_reason="timeout"``."""
    cache: PrefixCache | None = None
    """The prefix cache this row reads its prompt from and stores its KV in (its client's)."""
    stats: "ContinuousStats | None" = None
    """The counters this row adds to (its client's)."""


class RowKVCache:
    """The cache object of one decode step: writes each row's new column, returns per-row views.

    ``update(k, v, layer)`` takes ``k, v: (B, H_kv, 1, D)``, writes row b at column ``L_b`` of its
    own buffers and returns two lists of ``(H_kv, L_b + 1, D)`` views (read by ``unified_rows``).
    Lengths advance once per step (:meth:`advance`), after every layer ran.
    """

    def __init__(self, rows: list[_Row]) -> None:
        self.rows = rows

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys, values = [], []
        for b, row in enumerate(self.rows):
            n = row.length
            k, v = row.keys[layer_idx], row.values[layer_idx]
            k[:, n] = key_states[b, :, 0]
            v[:, n] = value_states[b, :, 0]
            keys.append(k[:, :n + 1])
            values.append(v[:, :n + 1])
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max((row.length for row in self.rows), default=0)

    def advance(self) -> None:
        for row in self.rows:
            row.length += 1


@dataclass
class ContinuousStats(GenerationStats):
    """:class:`GenerationStats` plus the occupancy of decode steps.

    In continuous batching ``calls`` counts the steps that admitted rows (each admission prefills
    its rows one by one; ``prefill_seconds`` is their time) and ``decode_seconds`` the decode steps.
    """

    decode_steps: int = 0
    row_steps: int = 0
    """Sum over decode steps of the rows decoded in that step."""
    admitted_while_decoding: int = 0
    """Rows that joined while other rows were mid-completion (what rounds cannot do)."""

    @property
    def mean_rows_per_step(self) -> float:
        return self.row_steps / self.decode_steps if self.decode_steps else 0.0


class ContinuousBatcher:
    """Generates completions for prompts that arrive at any time; see the module docstring.

    ``add(key, prompt)`` (a chat-templated string or token ids) queues a prompt; ``step()`` admits
    queued rows, decodes one token for every live row and returns ``[(key, GenerationOutput)]``
    for the rows that ended. ``busy`` is true while anything is queued or live.

    A row may bring its own ``prefix_cache`` and ``stats`` (several clients of one engine, each with
    its own cache budget and counters); by default it uses the batcher's. A decode step counts in
    the stats of every client with a row in it (``row_steps`` counts all its rows: the occupancy).
    """

    def __init__(self, model, tokenizer, params: SamplingParams = SamplingParams(), *, max_rows: int = 16,
                 prefix_cache: PrefixCache | None = None, stats: ContinuousStats | None = None) -> None:
        ok, why = continuous_batching_supported(model)
        if not ok:
            raise ValueError(f"continuous batching is not supported for this model: {why}")
        model.set_attn_implementation(register_row_attention())
        self.model, self.tokenizer, self.params = model, tokenizer, params
        self.max_rows = max(1, max_rows)
        self.prefix_cache = prefix_cache if prefix_cache is not None and prefix_cache.enabled else None
        self.stats = stats if stats is not None else ContinuousStats()
        self.eos = set(_eos_ids(model, tokenizer))
        self.pad_id = tokenizer.pad_token_id
        self._layers, self._kv_heads, self._head_dim = _kv_shape(model.config)
        self._cache_kwarg = _cache_kwarg(model)
        self._queue: deque[tuple] = deque()  # (key, ids, params, deadline, cache, stats)
        self._live: list[_Row] = []

    @property
    def busy(self) -> bool:
        return bool(self._queue or self._live)

    @property
    def live_rows(self) -> int:
        return len(self._live)

    def add(self, key: Hashable, prompt: str | list[int], params: SamplingParams | None = None,
            deadline: float | None = None, *, prefix_cache: PrefixCache | None | object = _BATCHERS,
            stats: ContinuousStats | None = None) -> None:
        ids = prompt if isinstance(prompt, list) else self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"empty prompt for {key!r}")
        params = params or self.params
        if params.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 for {key!r}, got {params.max_new_tokens}")
        cache = self.prefix_cache if prefix_cache is _BATCHERS else prefix_cache
        cache = cache if cache is not None and cache.enabled else None
        self._queue.append((key, list(ids), params, deadline, cache, stats if stats is not None else self.stats))

    @torch.no_grad()
    def _admit(self, key: Hashable, ids: list[int], params: SamplingParams | None = None,
               deadline: float | None = None, cache: PrefixCache | None = None,
               stats: ContinuousStats | None = None) -> _Row:
        device = self.model.device
        params = params or self.params
        n = len(ids)
        capacity = n - 1 + params.max_new_tokens
        dtype = next(self.model.parameters()).dtype
        shape = (self._kv_heads, capacity, self._head_dim)
        keys = [torch.empty(shape, dtype=dtype, device=device) for _ in range(self._layers)]
        values = [torch.empty(shape, dtype=dtype, device=device) for _ in range(self._layers)]
        reused = 0
        if n > 1:
            prompt = torch.tensor([ids[:-1]], device=device)
            before = cache.stats.reused_tokens if cache is not None else 0
            kv, _ = prefill_row(self.model, prompt, cache)
            if kv is None:
                raise ValueError("the model's cache is not a plain DynamicCache: continuous batching cannot run it")
            for k, v, layer in zip(keys, values, kv.layers):
                k[:, :n - 1] = layer.keys[0]
                v[:, :n - 1] = layer.values[0]
            reused = cache.stats.reused_tokens - before if cache is not None else 0
        stats = stats if stats is not None else self.stats
        stats.rows += 1
        stats.prompt_tokens += n
        stats.reused_prompt_tokens += reused
        generator = None
        if params.temperature > 0 and params.seed is not None:
            generator = torch.Generator(device=device).manual_seed(params.seed)
        return _Row(key=key, prompt_ids=ids, keys=keys, values=values, length=n - 1, next_token=ids[-1],
                    started=time.perf_counter(), params=params, generator=generator, deadline=deadline,
                    cache=cache, stats=stats)

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, GenerationOutput]]:
        """Admit queued rows, run one decode step over all live rows, return the rows that ended."""
        if self._queue and len(self._live) < self.max_rows:
            decoding = bool(self._live)
            admitted: dict[int, ContinuousStats] = {}
            while self._queue and len(self._live) < self.max_rows:
                t0 = time.perf_counter()
                row = self._admit(*self._queue.popleft())
                self._live.append(row)
                row.stats.admitted_while_decoding += int(decoding)
                row.stats.prefill_seconds += time.perf_counter() - t0
                admitted[id(row.stats)] = row.stats
            for stats in admitted.values():
                stats.calls += 1
        if not self._live:
            return []
        t0 = time.perf_counter()
        rows = list(self._live)
        device = self.model.device
        tokens = torch.tensor([[r.next_token] for r in rows], device=device)
        positions = torch.tensor([[r.length] for r in rows], device=device)
        # a 4-D mask is passed through unchanged by transformers' mask builders; row attention ignores it
        mask = torch.ones((len(rows), 1, 1, 1), dtype=torch.bool, device=device)
        cache = RowKVCache(rows)
        logits = self.model(input_ids=tokens, position_ids=positions, attention_mask=mask, use_cache=True,
                            logits_to_keep=1, **{self._cache_kwarg: cache}).logits[:, -1, :]
        cache.advance()
        chosen = self._choose(rows, logits)
        chosen_logprobs = token_logprobs(logits, chosen, [r.params for r in rows])
        clients = {id(r.stats): r.stats for r in rows}.values()
        for stats in clients:
            stats.decode_steps += 1
            stats.row_steps += len(rows)
        finished: list[tuple[Hashable, GenerationOutput]] = []
        now = time.monotonic()
        for row, token, logprob in zip(rows, chosen, chosen_logprobs):
            row.generated.append(token)
            row.logprobs.append(logprob)
            row.next_token = token
            reason = ("stop" if token in self.eos else "length" if len(row.generated) >= row.params.max_new_tokens
                      else "timeout" if row.deadline is not None and now >= row.deadline else "")
            if reason:
                self._live.remove(row)
                finished.append((row.key, self._finish(row, reason)))
        for stats in clients:
            stats.decode_seconds += time.perf_counter() - t0
        return finished

    @staticmethod
    def _choose(rows: list[_Row], logits: torch.Tensor) -> list[int]:
        """Next token per row: one argmax for the greedy rows, each sampled row with its own settings."""
        chosen = logits.argmax(dim=-1).tolist()
        for b, row in enumerate(rows):
            if row.params.temperature > 0:
                chosen[b] = int(_next_tokens(logits[b:b + 1], row.params, row.generator)[0])
        return chosen

    def _finish(self, row: _Row, reason: str) -> GenerationOutput:
        if row.cache is not None:
            seq = row.prompt_ids + row.generated[:-1]  # every token fed to the model (== row.length columns)
            row.cache.insert(seq, [k[None, :, :row.length] for k in row.keys],
                                     [v[None, :, :row.length] for v in row.values], copy=True)
        text_ids = row.generated[:-1] if reason == "stop" else row.generated
        text = _strip_padding_tokens(self.tokenizer.decode(text_ids, skip_special_tokens=False), self.tokenizer)
        row.stats.completion_tokens += len(row.generated)
        return GenerationOutput(text=text, token_ids=list(row.generated), logprobs=list(row.logprobs),
                                prompt_tokens=len(row.prompt_ids),
                                prompt_token_ids=list(row.prompt_ids),
                                finish_reason=reason, seconds=time.perf_counter() - row.started)

    def run(self, prompts: list[str | list[int]]) -> list[GenerationOutput]:
        """Generate every prompt (all queued at once); outputs in the order of ``prompts``."""
        for i, prompt in enumerate(prompts):
            self.add(i, prompt)
        outputs: dict[Hashable, GenerationOutput] = {}
        while self.busy:
            outputs.update(self.step())
        return [outputs[i] for i in range(len(prompts))]


def generate_all(model, tokenizer, prompts: list[str], params: SamplingParams = SamplingParams(), *,
                 max_batch_size: int = 16, prefix_cache: PrefixCache | None = None) -> list[GenerationOutput]:
    """Completions of a list of prompts, in order: continuous batching where the model supports it
    (a finished row's slot goes to the next prompt at once), else round-based
    :func:`unified.models.generation.batched_generate`."""
    if continuous_batching_supported(model)[0]:
        return ContinuousBatcher(model, tokenizer, params, max_rows=max_batch_size, prefix_cache=prefix_cache).run(prompts)
    return batched_generate(model, tokenizer, prompts, params, max_batch_size=max_batch_size, prefix_cache=prefix_cache)
