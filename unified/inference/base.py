"""One interface for every generation backend: a batch of chat requests in, completions out.

``Policy.generate(requests)`` takes the next turn of many episodes at once (the agent loop
gathers every episode in flight that waits for the policy) and returns, per request, a
:class:`PolicyOutput` or the Exception that request raised (one failing request must not
take the batch down). Backends:

- ``hf``     (:mod:`unified.policy.hf`): in-process transformers, one left-padded batch;
- ``openai`` (:mod:`unified.policy.openai_backend`): any OpenAI-compatible server, concurrent;
- ``vllm``   (:mod:`unified.policy.vllm_backend`): vLLM's offline engine (``gpu`` extra);
- ``gold``   (:mod:`unified.policy.gold`): replays an adapter's ground truth (adapter checks).

:func:`make_policy` picks one from a ``--model`` spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings shared by all backends (``--temperature``, ``--top-p`` ...)."""

    temperature: float = 0.0
    """0 = greedy."""
    top_p: float = 1.0
    max_new_tokens: int = 512
    """Per policy call."""
    enable_thinking: bool = True
    """Open a ``<think>`` block in the generation prompt (Qwen3.5 templates)."""
    seed: int | None = None


@dataclass
class PolicyRequest:
    """The next turn of one episode."""

    messages: list[dict[str, Any]]
    """Chat messages (``Message.to_chat()``), system prompt first."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI-style tool dicts."""
    context: dict[str, Any] = field(default_factory=dict)
    """What special backends need (``gold``: the task and the adapter). Ignored by the others."""
    prefix: str = ""
    """Text to prefill after the generation prompt (a prompting module's ``response_prefix``);
    backends that cannot prefill ignore it and leave ``PolicyOutput.prefix`` empty."""
    deadline: float | None = None
    """``time.monotonic()`` by which the episode must end (its ``--max-seconds``): ``hf`` stops the
    row there, ``openai`` bounds the request's timeout and retries by it; either way the output
    comes back with ``finish_reason="timeout"`` and the text generated so far. None: no deadline."""


@dataclass
class PolicyOutput:
    """One completion."""

    text: str
    """The raw completion: reasoning as ``...</think>`` when the backend produced it, tool-call markup kept."""
    prompt: str = ""
    """The rendered prompt (remote backends: the JSON of the request)."""
    token_ids: list[int] = field(default_factory=list)
    """Generated token ids when the backend has them (never re-tokenised)."""
    prompt_token_ids: list[int] = field(default_factory=list)
    """The prompt's token ids as the backend fed them (in-process backends; empty for remote ones
    that do not return them)."""
    logprobs: list[float] | None = None
    """Log-probability of each generated token under the sampling distribution, aligned with
    ``token_ids``; None when the backend does not give them."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    """``stop``, ``length``, or ``timeout`` (generation stopped at ``PolicyRequest.deadline``)."""
    seconds: float = 0.0
    """Wall time of the call (of the batch, for batched backends)."""
    tool_calls: list[dict[str, Any]] | None = None
    """Calls a server already parsed (``{"id","name","arguments"}``); None when the text holds them."""
    prefix: str = ""
    """The prefill the backend put before the generated ``text`` (the whole completion is
    ``prefix + text``; ``token_ids`` are the generated tokens only)."""


class Policy:
    """Base class; ``generate`` must keep the order of ``requests``."""

    name = "base"
    needs_context = False
    """True for policies that read ``PolicyRequest.context`` (the task and adapter): ``gold``."""

    def __init__(self, model: str = "", sampling: SamplingConfig = SamplingConfig()) -> None:
        self.model = model
        self.sampling = sampling

    supports_continuous_batching = False
    """True when :meth:`submit` / :meth:`poll` are implemented (the agent loop then schedules
    episodes continuously instead of by rounds)."""

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        raise NotImplementedError

    def submit(self, key: Hashable, request: PolicyRequest) -> None:
        """Queue one request; its output comes back from a later :meth:`poll` under ``key``."""
        raise NotImplementedError(f"the {self.name!r} backend has no continuous batching; use generate()")

    def poll(self) -> list[tuple[Hashable, PolicyOutput | Exception]]:
        """Advance generation (one decode step) and return the requests that finished."""
        raise NotImplementedError(f"the {self.name!r} backend has no continuous batching; use generate()")

    def close(self) -> None:
        """Release resources (engines, servers)."""

    def __enter__(self) -> "Policy":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def make_policy(spec: str, sampling: SamplingConfig = SamplingConfig(), *, backend: str | None = None,
                concurrency: int | None = None, **options: Any) -> Policy:
    """A policy from a ``--model`` spec.

    ``gold`` -> the ground-truth replayer; ``openai:URL#MODEL`` -> the OpenAI-compatible
    backend; anything else (``embedded``, a checkpoint dir, a .gguf, a hub id) is loaded
    in-process by ``hf`` unless ``backend="vllm"`` (or the spec starts with ``vllm:``).
    ``concurrency`` (the agent loop's episodes in flight) becomes ``hf``'s batch rows and
    ``openai``'s concurrent requests, so neither throttles ``--max-in-flight``.
    """
    if spec == "gold":
        from unified.policy.gold import GoldPolicy

        return GoldPolicy(sampling=sampling)
    if spec.startswith("openai:") or backend == "openai":
        from unified.policy.openai_backend import OpenAIPolicy

        if concurrency:
            options.setdefault("max_concurrency", concurrency)
        return OpenAIPolicy(spec, sampling, **options)
    if spec.startswith("vllm:") or backend == "vllm":
        from unified.policy.vllm_backend import VLLMPolicy

        return VLLMPolicy(spec.removeprefix("vllm:"), sampling, **options)
    if backend not in (None, "hf"):
        from unified.registry import UnknownNameError

        raise UnknownNameError("policy backend", str(backend), ["hf", "openai", "vllm", "gold"])
    from unified.policy.hf import HFPolicy

    if concurrency:
        options.setdefault("max_batch_size", concurrency)
    return HFPolicy(spec, sampling, **options)
