"""The model endpoints an adapter's judge or simulated user talks to, under an SDK name.

A benchmark whose grader asks an LLM judge, or whose checkout's own client code plays the user, needs an
OpenAI-compatible URL for a model spec the user gave (``--set benchmarks.NAME.judge=SPEC``):
:func:`resolve_endpoint` turns any spec into one (an endpoint spec as is; a checkpoint served on loopback,
shared with the policy where it runs the same checkpoint; a ``vllm:`` spec on the process's vLLM server).
The work is :func:`unified.inference.endpoints.resolve_endpoint`'s; this module imports it on first use, so
importing the SDK does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from unified.inference.endpoints import ResolvedEndpoint


def resolve_endpoint(spec: str, *, timeout_s: float = 600.0) -> ResolvedEndpoint:
    """An endpoint for the model spec ``spec``: ``.config`` (``base_url``, ``model``, and the ``api_key`` a
    loopback server requires), ``.client`` (an OpenAI-compatible client), ``.describe()`` (the line to record),
    ``.local`` (True when this process serves it); a bad spec is a ``SpecError`` naming it and the forms
    that work. ``timeout_s``: the client's request timeout."""
    from unified.inference.endpoints import resolve_endpoint as resolve  # torch: only when a judge/user is used

    return resolve(spec, timeout_s=timeout_s)
