"""KV-cache reuse across calls ("prefix caching") for in-process generation.

In a multi-turn episode each turn's prompt is the previous turn's prompt + completion + the new
observation, and BFCL tasks of one category share a long tool-doc system prompt. Recomputing the
keys/values of those shared tokens is most of the work on a CPU. :class:`PrefixCache` keeps the
per-layer keys/values of recent sequences, keyed by their token ids, and hands back the longest
cached *token* prefix of a new prompt (token ids, never text: a re-rendered chat template may
tokenise a boundary differently, and only identical ids may share KV).

Shapes. An entry holds the ids ``(n,)`` (int64) of a sequence and, per decoder layer ``l``,
``keys[l]`` and ``values[l]`` of shape ``(1, H_kv, n, D)``: the KV of token ``i`` is computed
from tokens ``0..i`` only (causal attention), so the first ``p`` columns of an entry are exactly
the KV of any sequence that shares its first ``p`` ids. :meth:`PrefixCache.lookup` returns a
fresh ``DynamicCache`` over views ``[..., :p, :]`` of the best entry; extending it (``update``
concatenates) allocates new tensors, so a cached entry is never written to, whichever rows
share it.

Bound. Entries are evicted least-recently-used first while their total size
``sum_l 2 * H_kv * n * D * itemsize`` exceeds ``max_bytes`` (or their count exceeds
``max_entries``). A new entry that extends an old one replaces it (the old is its prefix); a new
entry that is a prefix of an old one only refreshes the old one. ``max_bytes=0`` disables the
cache. Only plain ``DynamicCache`` states with ``DynamicLayer`` layers are cached: sliding-window
and linear-attention (recurrent) states cannot be cropped to a prefix.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

DEFAULT_MAX_BYTES = 1 << 30
"""1 GiB: about 23k tokens of the embedded model (30 layers x 3 KV heads x 64 dims, fp32)."""
ENV_MAX_MB = "UNIFIED_PREFIX_CACHE_MB"
"""Environment override of the default budget in MiB (``0`` turns prefix caching off)."""


_PLAIN_LAYERS = ("DynamicLayer", "PreallocatedLayer")
"""Full-attention layers holding (B, H_kv, L, D) keys/values (``PreallocatedLayer``: generation.py)."""


def is_plain_dynamic_cache(cache) -> bool:
    """True for a ``DynamicCache`` made only of full-attention ``DynamicLayer`` layers."""
    from transformers import DynamicCache

    return type(cache) is DynamicCache and all(type(layer).__name__ in _PLAIN_LAYERS for layer in cache.layers)


def cache_from_layers(keys: list[torch.Tensor], values: list[torch.Tensor]):
    """A ``DynamicCache`` holding the given per-layer tensors (no copy)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer_idx, (k, v) in enumerate(zip(keys, values)):
        cache.update(k, v, layer_idx)
    return cache


@dataclass
class PrefixCacheStats:
    """Counters since creation (or :meth:`PrefixCache.clear`)."""

    lookups: int = 0
    hits: int = 0
    """Lookups that reused at least one token."""
    prompt_tokens: int = 0
    """Tokens asked for (the prefill lengths of every lookup)."""
    reused_tokens: int = 0
    """Tokens whose KV came from the cache instead of a forward pass."""
    inserted: int = 0
    evicted: int = 0


@dataclass
class _Entry:
    ids: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(t.nbytes for t in self.keys) + sum(t.nbytes for t in self.values)


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """Number of leading ids two 1-D id tensors share."""
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if differ.numel() else n


def _host_ids(ids: list[int] | torch.Tensor) -> torch.Tensor:
    """Token ids as a 1-D CPU tensor: keys are compared on the host whatever device the model is on
    (a prompt's ids arrive on the GPU with a CUDA model; comparing there would also sync per entry)."""
    return torch.as_tensor(ids, dtype=torch.long).flatten().cpu()


def default_max_bytes() -> int:
    """``$UNIFIED_PREFIX_CACHE_MB`` MiB when set, else :data:`DEFAULT_MAX_BYTES`."""
    text = os.environ.get(ENV_MAX_MB, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return int(float(text) * (1 << 20))
    except ValueError:
        raise ValueError(f"${ENV_MAX_MB}={text!r} is not a number of MiB (0 disables prefix caching)") from None


class PrefixCache:
    """A bounded LRU store of per-sequence KV states, looked up by longest common token prefix."""

    def __init__(self, max_bytes: int | None = None, max_entries: int = 256) -> None:
        self.max_bytes = default_max_bytes() if max_bytes is None else int(max_bytes)
        self.max_entries = int(max_entries)
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self._lock = threading.Lock()
        self.stats = PrefixCacheStats()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0 and self.max_entries > 0

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.stats = PrefixCacheStats()

    def lookup(self, ids: list[int] | torch.Tensor, max_length: int | None = None):
        """``(p, cache)``: the longest cached prefix of ``ids`` (at most ``max_length`` tokens).

        ``cache`` is a new ``DynamicCache`` of length ``p`` (views of the stored tensors, batch 1)
        or None when ``p == 0``. The caller may extend it freely: stored tensors are never written.
        """
        ids = _host_ids(ids)
        limit = ids.numel() if max_length is None else min(max_length, ids.numel())
        with self._lock:
            self.stats.lookups += 1
            self.stats.prompt_tokens += limit
            if not self.enabled or limit <= 0:
                return 0, None
            best_key, best = None, 0
            for key, entry in self._entries.items():
                p = common_prefix_length(ids[:limit], entry.ids)
                if p > best:
                    best_key, best = key, p
            if best_key is None:
                return 0, None
            entry = self._entries[best_key]
            self._entries.move_to_end(best_key)
            self.stats.hits += 1
            self.stats.reused_tokens += best
            keys = [k[:, :, :best] for k in entry.keys]
            values = [v[:, :, :best] for v in entry.values]
        return best, cache_from_layers(keys, values)

    def insert(self, ids: list[int] | torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
               *, copy: bool = True) -> bool:
        """Store the KV ``(1, H_kv, n, D)`` per layer of the sequence ``ids`` ``(n,)``.

        ``copy`` clones the tensors (needed when they are views of a larger batch tensor, which
        would otherwise stay alive). Returns False when the entry was not stored (cache off, or the
        entry alone exceeds the budget).
        """
        ids = _host_ids(ids)
        n = ids.numel()
        if not self.enabled or n == 0:
            return False
        for t in (*keys, *values):
            if t.dim() != 4 or t.shape[0] != 1 or t.shape[2] != n:
                raise ValueError(f"prefix cache entries are (1, H_kv, {n}, D) per layer; got {tuple(t.shape)}")
        if sum(t.nbytes for t in (*keys, *values)) > self.max_bytes:
            return False
        with self._lock:
            for key, entry in list(self._entries.items()):
                p = common_prefix_length(ids, entry.ids)
                if p == n:  # already covered by a longer (or equal) entry
                    self._entries.move_to_end(key)
                    return True
                if p == entry.ids.numel():  # the old entry is a prefix of the new one
                    del self._entries[key]
            if copy:
                keys = [k.clone(memory_format=torch.contiguous_format) for k in keys]
                values = [v.clone(memory_format=torch.contiguous_format) for v in values]
            entry = _Entry(ids.clone(), list(keys), list(values))
            self._entries[self._next_key] = entry
            self._next_key += 1
            self.stats.inserted += 1
            total = sum(e.nbytes for e in self._entries.values())
            while self._entries and (total > self.max_bytes or len(self._entries) > self.max_entries):
                _, old = self._entries.popitem(last=False)
                total -= old.nbytes
                self.stats.evicted += 1
        return True

    def insert_row(self, ids: list[int] | torch.Tensor, cache, row: int, start: int, *, copy: bool = True) -> bool:
        """Store row ``row`` of a batch ``DynamicCache``, columns ``start : start + len(ids)``."""
        if not self.enabled or not is_plain_dynamic_cache(cache):
            return False
        n = len(ids)
        keys = [layer.keys[row:row + 1, :, start:start + n] for layer in cache.layers]
        values = [layer.values[row:row + 1, :, start:start + n] for layer in cache.layers]
        return self.insert(ids, keys, values, copy=copy)
