"""The one place a model spec becomes a chat model.

- :mod:`~unified.inference.spec`: the spec grammar (``embedded``, a directory, a ``.gguf``, a hub
  id, ``openai:URL#MODEL``, ``vllm:SPEC``, ``gold``) parsed into a :class:`ModelSpec`;
- :mod:`~unified.inference.base`: :class:`ChatModel` (the model an episode calls; one call is one ``Step``): batched
  ``generate``, ``submit`` (a future per request), single-shot ``chat``; :func:`make_chat_model`;
  backends ``hf``, ``openai``, ``vllm`` (``gold`` is no backend: the agent loop's replayer);
- :mod:`~unified.inference.engine`: one generation thread per loaded model, every in-process
  caller (policy, judge, simulated user, loopback server) a client holding futures;
- :mod:`~unified.inference.shared`: one copy of a model per process;
- :mod:`~unified.inference.server`, :mod:`~unified.inference.endpoints`,
  :mod:`~unified.inference.openai_compat`: the OpenAI-compatible server (subprocess or in-process),
  endpoints for graders and simulated users, and the client.

See ``docs/inference.md``.
"""

import importlib
from typing import Any

_EXPORTS = {
    "ChatModel": "base", "PolicyOutput": "base", "PolicyRequest": "base",
    "SamplingConfig": "base", "make_chat_model": "base",
    "shared_chat_model": "shared", "shared_checkpoint": "shared",
    "ModelSpec": "spec", "SpecError": "spec", "parse_spec": "spec",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Names are imported from their module on first use, so that importing one light module of this
    package (``spec``) does not pull torch in through ``base``."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'unified.inference' has no attribute {name!r}")
    return getattr(importlib.import_module(f"unified.inference.{_EXPORTS[name]}"), name)
