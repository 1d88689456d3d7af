"""The one model-spec grammar: what ``--model``, judge, user and search specs may say.

=========================  ===========  ========  =============================================
spec                       kind         backend   meaning
=========================  ===========  ========  =============================================
``embedded``               embedded     hf        the embedded default SFT MoE (built once)
``DIR`` (has config.json)  local        hf        a Hugging Face checkpoint directory
``FILE.gguf``              gguf         hf        a GGUF file (dequantised on load)
``org/name``               hub          hf        a hub id (``from_pretrained``)
``openai:URL#MODEL``       endpoint     openai    an OpenAI-compatible server; ``URL`` starts
                                                  with http(s):// and ends before ``/chat/...``
``http(s)://URL#MODEL``    endpoint     openai    the same without the ``openai:`` prefix
``vllm:SPEC``              (of SPEC)    vllm      a checkpoint spec served by a vLLM server
                                                  started for it (``make vllm``)
``gold``                   gold         gold      no model: the agent loop replays the tasks'
                                                  reference actions (unified.agent.replay)
=========================  ===========  ========  =============================================

:func:`parse_spec` classifies a spec without loading anything and returns a :class:`ModelSpec`;
every problem is a :class:`SpecError` (a ``ValueError``) or, for a local path that does not
exist or is not a checkpoint, :class:`unified.models.CheckpointNotFoundError`; both messages
name the spec. The checkpoint forms (embedded, dir, .gguf, hub id) are classified by
:func:`unified.models.checkpoint.resolve_spec`, the part of this grammar that the loader
itself needs (models sit below inference); every other caller goes through :func:`parse_spec`.

``backend`` may force ``hf``, ``vllm`` or ``openai`` on a spec that allows it (``--backend``):
a checkpoint spec runs under ``hf`` or ``vllm``; an endpoint only under ``openai``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from unified.models.checkpoint import CheckpointNotFoundError, resolve_spec
from unified.registry import UnknownNameError

SpecKind = Literal["embedded", "local", "gguf", "hub", "endpoint", "gold"]
Backend = Literal["hf", "vllm", "openai", "gold"]
BACKENDS: tuple[str, ...] = ("hf", "vllm", "openai", "gold")
CHECKPOINT_KINDS: tuple[str, ...] = ("embedded", "local", "gguf", "hub")
ENDPOINT_EXAMPLE = "openai:http://127.0.0.1:8000/v1#my-model"


class SpecError(ValueError):
    """A model spec that the grammar does not accept; the message names the spec and the forms."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec (see the module docstring's table)."""

    text: str
    """The spec as given (recorded with results)."""
    kind: SpecKind
    backend: Backend
    """What runs it: ``hf`` (in-process transformers), ``vllm``, ``openai`` (HTTP), ``gold``."""
    target: str = ""
    """Checkpoints: the local path, hub id or ``embedded``; endpoints: the base URL (no trailing
    slash); gold: empty."""
    served_name: str = ""
    """Endpoints: the model name sent with each request (after ``#``)."""

    @property
    def is_endpoint(self) -> bool:
        return self.kind == "endpoint"

    @property
    def is_checkpoint(self) -> bool:
        """Weights this process (or a server it starts) can load."""
        return self.kind in CHECKPOINT_KINDS

    @property
    def checkpoint(self) -> str:
        """The checkpoint spec without a ``vllm:`` prefix (what :func:`unified.models.load_checkpoint` takes)."""
        if not self.is_checkpoint:
            raise SpecError(f"model spec {self.text!r} is not a checkpoint (it is of kind {self.kind})")
        return self.target


def is_endpoint_spec(spec: str) -> bool:
    """True for ``openai:...`` and bare ``http(s)://...`` specs (well-formed or not: :func:`parse_spec` checks)."""
    return str(spec).strip().startswith(("openai:", "http://", "https://"))


def _endpoint(text: str, body: str) -> ModelSpec:
    if "#" not in body:
        raise SpecError(f"model spec {text!r}: expected openai:URL#MODEL, e.g. {ENDPOINT_EXAMPLE}")
    url, name = body.split("#", 1)
    if not url.startswith(("http://", "https://")) or not name:
        raise SpecError(f"model spec {text!r}: in openai:URL#MODEL the URL must start with http(s):// and MODEL "
                        f"must be non-empty, e.g. {ENDPOINT_EXAMPLE}")
    return ModelSpec(text=text, kind="endpoint", backend="openai", target=url.rstrip("/"), served_name=name)


_SPEC_WORDS = ("embedded", "gold")


def _resolve(text: str) -> tuple[SpecKind, str]:
    """:func:`resolve_spec`, whose not-found error says "did you mean" for a misspelt bare word
    (``embeded`` -> ``embedded``)."""
    try:
        return resolve_spec(text)
    except CheckpointNotFoundError:
        close = difflib.get_close_matches(text.lower(), _SPEC_WORDS, n=1, cutoff=0.6) if "/" not in text else []
        if close:
            raise CheckpointNotFoundError(f"model spec {text!r}: no such checkpoint; did you mean {close[0]!r}?") \
                from None
        raise


def parse_spec(spec: object, *, backend: str | None = None) -> ModelSpec:
    """Classify ``spec`` (a string or path) by the grammar in the module docstring; loads nothing.

    A local path must exist (a missing one raises :class:`unified.models.CheckpointNotFoundError`).
    """
    if isinstance(spec, ModelSpec):
        return spec if backend in (None, spec.backend) else parse_spec(spec.text, backend=backend)
    text = str(spec).strip() if spec is not None else ""
    if backend is not None and backend not in BACKENDS[:3]:
        raise UnknownNameError("model backend", str(backend), list(BACKENDS[:3]))
    if not text:
        raise SpecError("empty model spec: expected embedded, a checkpoint directory, a .gguf file, a hub id "
                        f"org/name, {ENDPOINT_EXAMPLE}, vllm:SPEC or gold")
    if text == "gold":
        if backend is not None:
            raise SpecError(f"model spec 'gold' replays ground truth; it cannot run under the {backend} backend")
        return ModelSpec(text=text, kind="gold", backend="gold")
    if text.startswith("openai:"):
        parsed = _endpoint(text, text[len("openai:"):])
    elif text.startswith(("http://", "https://")):
        parsed = _endpoint(text, text)
    elif text.startswith("vllm:"):
        inner = text[len("vllm:"):].strip()
        if not inner or inner == "gold" or is_endpoint_spec(inner) or inner.startswith("vllm:"):
            raise SpecError(f"model spec {text!r}: vllm: takes a checkpoint spec (embedded, a directory, a .gguf "
                            "or a hub id), e.g. vllm:Qwen/Qwen3.5-35B-A3B")
        if backend not in (None, "vllm"):
            raise SpecError(f"model spec {text!r} names the vllm backend; --backend {backend} contradicts it")
        kind, target = _resolve(inner)
        return ModelSpec(text=text, kind=kind, backend="vllm", target=target)
    else:
        if backend == "openai":
            raise SpecError(f"model spec {text!r} is a checkpoint; the openai backend needs an endpoint "
                            f"({ENDPOINT_EXAMPLE}): serve it with python -m unified.inference.server --model {text}")
        kind, target = _resolve(text)
        return ModelSpec(text=text, kind=kind, backend="vllm" if backend == "vllm" else "hf", target=target)
    if backend not in (None, "openai"):
        raise SpecError(f"model spec {text!r} is an OpenAI-compatible endpoint; it cannot run under the "
                        f"{backend} backend (serve it, or pass a checkpoint spec)")
    return parsed

