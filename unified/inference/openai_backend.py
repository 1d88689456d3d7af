"""``openai``: any OpenAI-compatible server (vLLM, SGLang, ``transformers serve``, our local server).

Requests of one batch go out concurrently through
:class:`unified.inference.openai_compat.OpenAICompatClient` (bounded concurrency, retries with
backoff on 429/5xx/connection errors, per-request timeouts). The server's split-out reasoning
is put back in front of the answer as ``...</think>`` so that every backend hands the agent
loop the same raw-completion shape; calls the server already parsed are passed through.

``submit`` / ``poll`` send each request the moment the agent loop has it (a thread pool of
``max_concurrency`` workers), so an episode's next turn never waits for other episodes' turns:
the server (vLLM, SGLang, our local server) batches continuously on its side.

A request's ``deadline`` bounds its HTTP timeout and retries; when it passes the output is empty
with ``finish_reason="timeout"`` (the agent loop then ends the episode as ``timeout``).

``logprobs=True`` (an option of the backend, or a request's ``logprobs``) asks the server for
each generated token's log-probability (``"logprobs": true``); servers that return them
(vLLM, SGLang, our local server) fill :attr:`PolicyOutput.logprobs`.

``request_fields`` (of the backend, or of one :class:`PolicyRequest`, which wins) names the sampling fields a request carries besides ``model``, ``messages`` and
``tools`` (of :data:`SAMPLING_FIELDS`); None sends them all. A protocol that must send what an
official client sends (AgentWorldBench's eval.py: ``max_tokens`` and ``temperature`` only) sets it,
so that neither an unknown field (``chat_template_kwargs``, which some endpoints refuse) nor a
template switch the official client never sends changes the answer.
"""

from __future__ import annotations

import copy
import json
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from unified.inference.base import ChatModel, PolicyOutput, PolicyRequest, SamplingConfig
from unified.inference.openai_compat import DeadlineExceeded, OpenAICompatClient, parse_endpoint_spec
from unified.chatformat.reasoning import join_reasoning
from unified.inference.spec import ModelSpec


def to_wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat dicts -> OpenAI wire messages (tool-call arguments as JSON strings)."""
    out = []
    for message in messages:
        message = copy.deepcopy(message)
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments") or {})
        out.append(message)
    return out


SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "seed", "chat_template_kwargs")
"""The optional request fields :class:`OpenAIPolicy` can send (``request_fields`` picks among them)."""


class OpenAIPolicy(ChatModel):
    concurrency_option = "max_concurrency"
    name = "openai"
    supports_continuous_batching = True

    def __init__(self, spec: str | ModelSpec, sampling: SamplingConfig = SamplingConfig(), *, timeout_s: float = 300.0,
                 max_retries: int = 4, max_concurrency: int = 8, api_key: str | None = None,
                 logprobs: bool = False, request_fields: tuple[str, ...] | None = None) -> None:
        super().__init__(spec.text if isinstance(spec, ModelSpec) else spec, sampling)
        self.logprobs = logprobs
        unknown = set(request_fields or ()) - set(SAMPLING_FIELDS)
        if unknown:
            raise ValueError(f"request_fields: unknown {sorted(unknown)} (known: {', '.join(SAMPLING_FIELDS)})")
        self.request_fields = tuple(request_fields) if request_fields is not None else None
        self.config = parse_endpoint_spec(spec, timeout_s=timeout_s, max_retries=max_retries,
                                          max_concurrency=max_concurrency, api_key=api_key)
        self.client = OpenAICompatClient(self.config)
        self._pool: ThreadPoolExecutor | None = None

    def _payload(self, request: PolicyRequest) -> dict[str, Any]:
        s = self.sampling_for(request)
        fields = dict(max_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, seed=s.seed,
                      chat_template_kwargs={"enable_thinking": s.thinking})
        allowed = request.request_fields if request.request_fields is not None else self.request_fields
        if allowed is not None:
            fields = {k: v for k, v in fields.items() if k in allowed}
        payload = dict(messages=to_wire(request.messages), tools=request.tools or None, deadline=request.deadline,
                       **fields)
        if self.logprobs or request.logprobs:
            payload["logprobs"] = True
        return payload

    @staticmethod
    def _output(request: PolicyRequest, answer) -> PolicyOutput | Exception:
        if isinstance(answer, DeadlineExceeded):
            return PolicyOutput(text="", prompt=request_json(request), finish_reason="timeout")
        if isinstance(answer, Exception):
            return answer
        text = join_reasoning(answer.reasoning, answer.text or "")
        return PolicyOutput(text=text, prompt=request_json(request), prompt_tokens=answer.prompt_tokens,
                            logprobs=answer.logprobs,
                            completion_tokens=answer.completion_tokens, finish_reason=answer.finish_reason,
                            seconds=answer.latency_s, tool_calls=answer.tool_calls or None)

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        answers = self.client.chat_many([self._payload(r) for r in requests])
        return [self._output(request, answer) for request, answer in zip(requests, answers)]

    def submit(self, request: PolicyRequest, *, continuous: bool | None = None) -> Future:
        """Send the request on a thread of its own (up to ``max_concurrency`` at once); the server batches."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.config.max_concurrency, thread_name_prefix="openai-policy")
        sent = self._pool.submit(self.client.chat, **self._payload(request))
        out: Future = Future()

        def done(f: Future) -> None:
            try:
                error = f.exception()
                out.set_result(self._output(request, error if error is not None else f.result()))
            except BaseException as exc:  # noqa: BLE001 (handed to the waiter)
                out.set_exception(exc)

        sent.add_done_callback(done)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def request_json(request: PolicyRequest) -> str:
    """The request as JSON (the ``prompt`` record of remote backends)."""
    return json.dumps({"messages": request.messages, "tools": request.tools}, default=str)
