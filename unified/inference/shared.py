"""One copy of a model per process: the registry every in-process caller goes through.

The policy, the rubric judge, simulated users, simulated search, the lwm eval and the warmup's
judge may all name the same checkpoint (``embedded`` on a laptop). :func:`shared_checkpoint`
loads it once per process and hands every caller the same :class:`unified.models.LoadedCheckpoint`,
keyed by the resolved checkpoint (a local path made absolute, a hub id, ``embedded``), the
device, the dtype and the loader's other options. Concurrent first callers wait for the one load.

Generation on a loaded model has one driver, its :class:`unified.inference.engine.Engine` (one
thread per model, :func:`unified.inference.engine.engine_for`): the ``hf`` policy, judges,
simulated users and the loopback server submit to it and wait on futures, so their requests share
decode steps instead of loading copies or racing on the same weights. The engine holds
:func:`model_lock` (one re-entrant lock per model) for each step; code that runs the model outside
the engine takes the same lock.

:func:`shared_chat_model` is the convenience for single-shot users: a :class:`ChatModel` per
spec (an ``hf`` model over the shared weights, or an OpenAI-compatible client), reused by every
caller; :meth:`ChatModel.chat` takes each request's own ``max_tokens``.
:data:`LOAD_COUNTS` counts loads per key (the tests check that a process loads a model once).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import Counter
from typing import Any

import torch

from unified.inference.base import ChatModel, SamplingConfig, make_chat_model
from unified.inference.routes import routed
from unified.inference.spec import ModelSpec, SpecError, parse_spec
from unified import models
from unified.models.checkpoint import default_dtype

_LOCK = threading.Lock()
_LOAD_LOCK = threading.Lock()
_CHECKPOINTS: dict[tuple, Any] = {}
_CHAT_MODELS: dict[tuple, ChatModel] = {}
_MODEL_LOCKS: "weakref.WeakKeyDictionary[Any, threading.RLock]" = weakref.WeakKeyDictionary()
LOAD_COUNTS: Counter = Counter()
"""Loads done by :func:`shared_checkpoint`, per key."""


def checkpoint_key(spec: str | ModelSpec, *, device: Any = None, dtype: Any = None, **load_options: Any) -> tuple:
    """What makes two loads the same copy: resolved checkpoint, device, dtype, loader options."""
    parsed = parse_spec(spec)
    if not parsed.is_checkpoint:
        raise SpecError(f"model spec {parsed.text!r} is not a checkpoint (it is of kind {parsed.kind}): only "
                        "checkpoints are loaded in-process")
    target = os.path.realpath(parsed.target) if parsed.kind in ("local", "gguf") else parsed.target
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return (target, str(dev), str(dtype or default_dtype(dev)), tuple(sorted(load_options.items())))


def shared_checkpoint(spec: str | ModelSpec, *, device: Any = None, dtype: Any = None, **load_options: Any):
    """The process's one loaded copy of ``spec`` (loaded on first use; see the module docstring)."""
    key = checkpoint_key(spec, device=device, dtype=dtype, **load_options)
    with _LOAD_LOCK:
        loaded = _CHECKPOINTS.get(key)
        if loaded is None:
            loaded = models.load_checkpoint(parse_spec(spec).checkpoint, device=device, dtype=dtype, **load_options)
            LOAD_COUNTS[key] += 1
            _CHECKPOINTS[key] = loaded
        return loaded


def model_lock(model: Any) -> threading.RLock:
    """The generation lock of ``model`` (one per model object, created on first use)."""
    with _LOCK:
        lock = _MODEL_LOCKS.get(model)
        if lock is None:
            lock = _MODEL_LOCKS[model] = threading.RLock()
        return lock


def shared_chat_model(spec: str | ModelSpec, *, sampling: SamplingConfig | None = None,
                      **options: Any) -> ChatModel:
    """One :class:`ChatModel` per spec and options for single-shot callers (judges, users, search).

    In-process checkpoints share their weights with every other caller (:func:`shared_checkpoint`);
    endpoints get one client; a checkpoint the eval serves with vLLM goes to that server
    (:func:`unified.inference.routes.routed`). ``sampling`` sets the defaults a request does not override.
    """
    parsed = routed(parse_spec(spec))
    if parsed.backend == "gold":
        raise SpecError("model spec 'gold' replays an adapter's ground truth; it cannot judge, answer or search")
    sampling = sampling or SamplingConfig(max_new_tokens=256, thinking=False)
    key = (parsed.text if not parsed.is_checkpoint else checkpoint_key(parsed), parsed.backend, sampling,
           tuple(sorted(options.items())))
    with _LOCK:
        model = _CHAT_MODELS.get(key)
    if model is None:
        model = make_chat_model(parsed, sampling, **options)
        with _LOCK:
            model = _CHAT_MODELS.setdefault(key, model)
    return model


def clear() -> None:
    """Forget every shared model (tests; weights are freed once no caller holds them)."""
    with _LOCK:
        models = list(_CHAT_MODELS.values())
        _CHAT_MODELS.clear()
    with _LOAD_LOCK:
        _CHECKPOINTS.clear()
    for model in models:
        model.close()
