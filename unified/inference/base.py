"""The chat model: one interface for every generation backend, a batch of chat requests in, completions out.

:class:`ChatModel` (the agent calls it its policy: ``ChatModel`` is the same class) serves the
policy, judges, simulated users, simulated search and the lwm eval. ``generate(requests)`` takes the next turn of many episodes at once (the agent loop
gathers every episode in flight that waits for the policy) and returns, per request, a
:class:`PolicyOutput` or the Exception that request raised (one failing request must not
take the batch down). Backends:

- ``hf``     (:mod:`unified.inference.hf`): in-process transformers, one left-padded batch;
- ``openai`` (:mod:`unified.inference.openai_backend`): any OpenAI-compatible server, concurrent;
- ``vllm``   (:mod:`unified.inference.vllm_backend`): a vLLM server this process starts (``make vllm``).

The spec ``gold`` names no chat model: the agent loop replays the tasks' reference actions in place
of a policy (:class:`unified.agent.replay.GoldReplayer`).

:func:`make_chat_model` picks one from a model spec (:mod:`unified.inference.spec`); single-shot
callers (a judge, a simulated user) use :meth:`ChatModel.chat` / :meth:`ChatModel.chat_many`, with
their own ``max_tokens`` per request. :func:`unified.inference.shared.shared_chat_model` hands
every caller in a process the same in-process copy of a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from concurrent.futures import Future
from typing import Any

from unified.config import bounded
from unified.registry import Registry
from unified.chatformat.reasoning import strip_reasoning
from unified.inference.spec import ModelSpec, SpecError, parse_spec


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings shared by all backends (``--temperature``, ``--top-p`` ...)."""

    temperature: float = bounded(0.0, ge=0)
    """0 = greedy."""
    top_p: float = bounded(1.0, gt=0, le=1)
    max_new_tokens: int = bounded(512, ge=1)
    """Per policy call."""
    thinking: bool = True
    """Open a ``<think>`` block in the generation prompt (the chat template's ``enable_thinking``)."""
    seed: int | None = None

    RENAMED = {"enable_thinking": "thinking"}  # old key -> new (unified.config.from_dict)


@dataclass
class PolicyRequest:
    """The next turn of one episode."""

    messages: list[dict[str, Any]]
    """Chat messages (``Message.to_chat()``), system prompt first."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI-style tool dicts."""
    prefix: str = ""
    """Text to prefill after the generation prompt (a prompting module's ``response_prefix``);
    backends that cannot prefill ignore it and leave ``PolicyOutput.prefix`` empty."""
    max_new_tokens: int | None = None
    """This request's completion budget (a judge's or a user's own ``max_tokens``); None: the
    model's :class:`SamplingConfig`."""
    temperature: float | None = None
    """This request's temperature; None: the model's :class:`SamplingConfig`."""
    thinking: bool | None = None
    """Open a ``<think>`` block for this request; None: the model's :class:`SamplingConfig`."""
    logprobs: bool = False
    """Ask for :attr:`PolicyOutput.logprobs` (in-process backends give them anyway)."""
    request_fields: tuple[str, ...] | None = None
    """The sampling fields an endpoint request carries (of
    :data:`unified.inference.openai_backend.SAMPLING_FIELDS`): an environment whose official agent's
    client sends only some (Terminus-2 through harbor's LiteLLM: none) sets it; None: the backend's
    own choice. In-process backends decode with the model's sampling whatever this says."""
    deadline: float | None = None
    """``time.monotonic()`` by which the episode must end (its ``--max-seconds``): ``hf`` stops the
    row there, ``openai`` bounds the request's timeout and retries by it; either way the output
    comes back with ``finish_reason="timeout"`` and the text generated so far. None: no deadline."""


class ContextFull(RuntimeError):
    """The conversation no longer fits the model's context window (a server's "maximum context length"
    400): a limit of the model, as ``max_turns`` is one of the run, not a failure of the infrastructure.
    The agent loop ends the episode with ``StopReason.CONTEXT_FULL`` and it is scored as it stands
    (inspect_ai ends such a sample with its ``model_length`` stop reason)."""


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


class ChatModel:
    """Base class; ``generate`` must keep the order of ``requests``."""

    name = "base"

    concurrency_option: str | None = None
    """The constructor option that ``make_chat_model(concurrency=N)`` sets (``hf``'s batch rows,
    ``openai``'s concurrent requests), so the backend never throttles ``--max-in-flight``."""

    def __init__(self, model: str = "", sampling: SamplingConfig = SamplingConfig()) -> None:
        self.model = model
        self.sampling = sampling

    @classmethod
    def from_spec(cls, spec: ModelSpec, sampling: SamplingConfig, **options: Any) -> "ChatModel":
        """The backend's model for a parsed spec (what :func:`make_chat_model` calls)."""
        return cls(spec, sampling, **options)

    supports_continuous_batching = False
    """True when :meth:`submit` sends each request on its own as it comes (an engine that batches
    continuously, or concurrent requests to a server); False: :meth:`submit_many` makes one
    :meth:`generate` call of the requests it is given."""

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        raise NotImplementedError

    def submit(self, request: PolicyRequest, *, continuous: bool | None = None) -> Future:
        """Start one request; the future resolves to its :class:`PolicyOutput` (or raises what it
        raised). ``continuous=False`` asks a backend that can do both (``hf``) to decode it in a
        gathered batch instead of joining the continuous one; the others ignore it."""
        return self.submit_many([request], continuous=continuous)[0]

    def submit_many(self, requests: list[PolicyRequest], *, continuous: bool | None = None) -> list[Future]:
        """:meth:`submit` for each request; a backend without its own ``submit`` answers them all
        with one :meth:`generate` call, made here (its futures are done when this returns)."""
        if type(self).submit is not ChatModel.submit:
            return [self.submit(request, continuous=continuous) for request in requests]
        futures: list[Future] = [Future() for _ in requests]
        try:
            outputs = self.generate(list(requests)) if requests else []
            if len(outputs) != len(requests):
                raise RuntimeError(f"the policy returned {len(outputs)} outputs for {len(requests)} requests")
        except Exception as exc:  # the whole call failed: every request reports it
            outputs = [exc] * len(requests)
        for future, output in zip(futures, outputs):
            future.set_exception(output) if isinstance(output, BaseException) else future.set_result(output)
        return futures

    def close(self) -> None:
        """Release resources (engines, servers)."""

    def sampling_for(self, request: PolicyRequest) -> SamplingConfig:
        """The model's sampling with ``request``'s own overrides (max_new_tokens, temperature, thinking)."""
        s = self.sampling
        return replace(s, max_new_tokens=s.max_new_tokens if request.max_new_tokens is None else request.max_new_tokens,
                       temperature=s.temperature if request.temperature is None else request.temperature,
                       thinking=s.thinking if request.thinking is None else request.thinking)

    def chat_many(self, conversations: list[list[dict[str, Any]]], *, max_tokens: int, temperature: float = 0.0,
                  thinking: bool = False) -> list[str | Exception]:
        """Single-shot answers (a judge's batch): each conversation's answer text, reasoning removed
        (:func:`unified.chatformat.reasoning.strip_reasoning`), or the Exception of a failed one."""
        requests = [PolicyRequest(messages=list(m), max_new_tokens=int(max_tokens), temperature=float(temperature),
                                  thinking=thinking) for m in conversations]
        if not requests:
            return []
        try:
            outputs = self.generate(requests)
        except Exception as exc:  # the whole call failed: every conversation reports it
            return [exc for _ in requests]
        return [out if isinstance(out, Exception) else strip_reasoning(out.prefix + out.text) for out in outputs]

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int, temperature: float = 0.0,
             thinking: bool = False) -> str:
        """One answer (a simulated user's reply, a simulated page); raises what generation raised."""
        answer = self.chat_many([messages], max_tokens=max_tokens, temperature=temperature, thinking=thinking)[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def __enter__(self) -> "ChatModel":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


BACKENDS: Registry[type[ChatModel]] = Registry("inference backend")
"""Backends by name (the ``backend`` of a parsed spec), imported on first use: ``hf`` needs torch and
transformers, ``vllm`` a vLLM install, and a process that only talks to an endpoint loads neither."""
BACKENDS.register_lazy("hf", "unified.inference.hf:HFPolicy")
BACKENDS.register_lazy("openai", "unified.inference.openai_backend:OpenAIPolicy")
BACKENDS.register_lazy("vllm", "unified.inference.vllm_backend:VLLMPolicy")


def make_chat_model(spec: str | ModelSpec, sampling: SamplingConfig = SamplingConfig(), *, backend: str | None = None,
                    concurrency: int | None = None, **options: Any) -> ChatModel:
    """A chat model from a model spec (:func:`unified.inference.spec.parse_spec`).

    An endpoint -> the OpenAI-compatible backend; a
    checkpoint (``embedded``, a directory, a .gguf, a hub id) is loaded in-process by ``hf``
    unless ``backend="vllm"`` (or the spec starts with ``vllm:``). ``concurrency`` (the agent
    loop's episodes in flight) becomes ``hf``'s batch rows and ``openai``'s concurrent requests,
    so neither throttles ``--max-in-flight``. An ``hf`` model takes its weights from the
    process's shared copy (:func:`unified.inference.shared.shared_checkpoint`) unless ``loaded``
    is given. ``gold`` is a SpecError: it is no model (:func:`unified.agent.replay.replayer_for`).
    """
    parsed = parse_spec(spec, backend=backend)
    if parsed.kind == "gold":
        raise SpecError("model spec 'gold' is not a chat model: the agent loop replays the tasks' reference "
                        "actions in place of a policy (unified.agent.replay.GoldReplayer)")
    cls = BACKENDS.get(parsed.backend)
    if concurrency and cls.concurrency_option:
        options.setdefault(cls.concurrency_option, concurrency)
    return cls.from_spec(parsed, sampling, **options)

