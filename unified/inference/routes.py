"""Which engine serves, in this process, a checkpoint that a spec names without a backend.

A bare checkpoint spec (``embedded``, a directory, a .gguf, a hub id) runs in-process (``hf``)
wherever it is used. When the eval serves its policy with vLLM (``python -m unified.eval``'s engine
choice, :mod:`unified.eval.engine`), it calls :func:`serve_with_vllm` for that checkpoint, so that a
judge, a simulated user or simulated search naming the same checkpoint reach the same vLLM server
(:func:`unified.inference.endpoints.resolve_endpoint`, :func:`unified.inference.shared.shared_chat_model`
apply :func:`routed`) instead of loading a second, in-process copy next to it; it calls
:func:`stop_serving_with_vllm` when its policy closes. Nothing else registers a route: the warmup,
notebooks and library callers keep the spec's own backend. A spec that names its backend
(``vllm:SPEC``, an endpoint, ``gold``) is never rerouted.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace

from unified.inference.spec import ModelSpec, parse_spec

_VLLM: dict[str, int] = {}
"""Checkpoint key -> how many registrations (the policy of each running eval in this process)."""
_LOCK = threading.Lock()


def _key(parsed: ModelSpec) -> str:
    return os.path.realpath(parsed.target) if parsed.kind in ("local", "gguf") else parsed.target


def serve_with_vllm(spec: str | ModelSpec) -> None:
    """From now on, bare specs naming ``spec``'s checkpoint go to the process's vLLM server for it."""
    key = _key(parse_spec(spec))
    with _LOCK:
        _VLLM[key] = _VLLM.get(key, 0) + 1


def stop_serving_with_vllm(spec: str | ModelSpec) -> None:
    """Undo one :func:`serve_with_vllm` (the route goes once every registration is undone)."""
    key = _key(parse_spec(spec))
    with _LOCK:
        left = _VLLM.get(key, 0) - 1
        if left > 0:
            _VLLM[key] = left
        else:
            _VLLM.pop(key, None)


def routed(parsed: ModelSpec) -> ModelSpec:
    """``parsed`` as this process serves it: a bare checkpoint spec whose checkpoint is routed to vLLM
    comes back with ``backend="vllm"`` (same text, kind and target); every other spec unchanged."""
    if parsed.backend != "hf" or not parsed.is_checkpoint or parsed.text.startswith("vllm:"):
        return parsed
    with _LOCK:
        served = _key(parsed) in _VLLM
    return replace(parsed, backend="vllm") if served else parsed
