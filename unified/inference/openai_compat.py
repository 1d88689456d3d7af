"""A small async client for OpenAI-compatible chat-completion endpoints.

Used by the ``openai`` policy backend, the rubric judge and the simulated users. It speaks the
plain HTTP API (``POST {base_url}/chat/completions``) so that any server works: vLLM, SGLang,
``transformers serve`` or :mod:`unified.inference.server`. Concurrency is bounded by a
semaphore; 429, 5xx, connection errors and timeouts are retried with exponential backoff and
jitter; other 4xx answers fail at once with the server's message. A request may carry a
``deadline`` (``time.monotonic()``): no attempt or backoff outlasts it, and passing it raises
:class:`DeadlineExceeded`. An answer's ``content`` that is not text (a number, an object: a
broken or hostile server) is never handed on as such: text parts are joined, anything else
becomes its JSON text.

A model endpoint is written ``openai:URL#MODEL`` on command lines, e.g.
``openai:http://127.0.0.1:8000/v1#Qwen/Qwen3.5-35B-A3B``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from unified.inference.base import ContextFull
from unified.inference.spec import ENDPOINT_EXAMPLE, ModelSpec, SpecError, is_endpoint_spec, parse_spec
from unified.chatformat.untrusted import UntrustedJSONError, load_untrusted_json

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class EndpointError(RuntimeError):
    """The endpoint answered with an error that retrying will not fix (or retries ran out)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class DeadlineExceeded(EndpointError):
    """The request's deadline passed before an answer came."""


class EndpointContextFull(EndpointError, ContextFull):
    """The server refused the request because the prompt (with its answer budget) does not fit the model's
    context: vLLM's and OpenAI's 400 "maximum context length" / ``context_length_exceeded``."""


CONTEXT_FULL_MARKERS = ("maximum context length", "context_length_exceeded")
"""How a 400 says the prompt no longer fits (vLLM: "This model's maximum context length is N tokens";
OpenAI: the error code ``context_length_exceeded``)."""


def _content_text(content: Any) -> str:
    """``message.content`` as text: a string as is, a list of ``{"type": "text", "text"}`` parts
    joined, None empty, anything else (a number, an object) as its JSON text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    try:
        return json.dumps(content)
    except (TypeError, ValueError, RecursionError):
        return repr(type(content))


@dataclass(frozen=True)
class EndpointConfig:
    """Where and how to reach an endpoint."""

    base_url: str
    """e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended)."""
    model: str
    """The served model name sent in each request."""
    api_key: str | None = None
    """Bearer token; defaults to ``$OPENAI_API_KEY`` when unset."""
    timeout_s: float = 120.0
    """Per-request timeout (connect + read)."""
    max_retries: int = 4
    """Retries after the first attempt for retryable failures."""
    backoff_s: float = 1.0
    """First backoff; doubles each retry (with +-25% jitter), capped at 30 s."""
    max_concurrency: int = 8
    """Requests in flight at once."""


def parse_endpoint_spec(spec: str | ModelSpec, **overrides: Any) -> EndpointConfig:
    """``openai:URL#MODEL`` (or ``http(s)://URL#MODEL``) -> EndpointConfig (grammar: :mod:`unified.inference.spec`)."""
    text = spec.text if isinstance(spec, ModelSpec) else str(spec)
    if not is_endpoint_spec(text):
        raise SpecError(f"model spec {text!r} is not an endpoint: expected openai:URL#MODEL, e.g. {ENDPOINT_EXAMPLE}")
    parsed = parse_spec(text)
    return EndpointConfig(base_url=parsed.target, model=parsed.served_name, **overrides)


@dataclass
class ChatResult:
    """One chat completion, normalised across servers."""

    text: str
    """``message.content`` (may contain tool-call markup when the server has no tool parser)."""
    reasoning: str | None = None
    """``reasoning_content``/``reasoning`` when the server splits it out."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Server-parsed calls as ``{"id", "name", "arguments"}``; arguments a dict, or the raw string if not JSON."""
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    logprobs: list[float] | None = None
    """Per generated token, when the request asked for ``logprobs`` and the server gave them."""
    raw: dict[str, Any] = field(default_factory=dict)


def _logprobs(choice: dict[str, Any]) -> list[float] | None:
    """``choices[0].logprobs.content[i].logprob`` as floats; None when absent or not all finite numbers."""
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, dict) else None
    if not isinstance(content, list):
        return None
    values = [item.get("logprob") if isinstance(item, dict) else None for item in content]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v <= 0
               for v in values):
        return None
    return [float(v) for v in values]


def _parse_response(body: dict[str, Any], latency: float) -> ChatResult:
    try:
        choice = body["choices"][0]
        message = choice.get("message") or {}
        if not isinstance(message, dict):
            raise TypeError
    except (KeyError, IndexError, TypeError, AttributeError):
        raise EndpointError(f"malformed chat completion (no choices[0].message): {str(body)[:500]}") from None
    calls = []
    raw_calls = message.get("tool_calls")
    for i, call in enumerate(raw_calls if isinstance(raw_calls, list) else []):
        if not isinstance(call, dict):
            calls.append({"id": f"call_{i}", "name": "", "arguments": _content_text(call)})
            continue
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        args: Any = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = load_untrusted_json(args) if args.strip() else {}
            except UntrustedJSONError:
                pass  # kept as the raw string; the agent turns it into an error observation
        calls.append({"id": call.get("id") or f"call_{i}", "name": fn.get("name", ""), "arguments": args})
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return ChatResult(
        text=_content_text(message.get("content")),
        reasoning=_content_text(reasoning) if reasoning else None,
        tool_calls=calls, finish_reason=str(choice.get("finish_reason") or ""),
        prompt_tokens=_count(usage.get("prompt_tokens")), completion_tokens=_count(usage.get("completion_tokens")),
        latency_s=latency, logprobs=_logprobs(choice), raw=body)


def _count(value: Any) -> int:
    """A token count from a server's usage block (anything that is not a sane count is 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else 0


class OpenAICompatClient:
    """Chat completions with bounded concurrency, retries and timeouts."""

    def __init__(self, config: EndpointConfig) -> None:
        self.config = config
        self._semaphores: dict[int, asyncio.Semaphore] = {}

    def _headers(self) -> dict[str, str]:
        key = self.config.api_key or os.environ.get("OPENAI_API_KEY")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _semaphore(self) -> asyncio.Semaphore:
        loop_id = id(asyncio.get_running_loop())
        if loop_id not in self._semaphores:
            self._semaphores[loop_id] = asyncio.Semaphore(self.config.max_concurrency)
        return self._semaphores[loop_id]

    def payload(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                **sampling: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if tools:
            body["tools"] = tools
        body.update({k: v for k, v in sampling.items() if v is not None})
        return body

    async def achat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    *, client: httpx.AsyncClient | None = None, deadline: float | None = None,
                    **sampling: Any) -> ChatResult:
        """One chat completion; ``sampling`` holds OpenAI fields (max_tokens, temperature, seed, ...);
        ``deadline`` (``time.monotonic()``) bounds every attempt and backoff (:class:`DeadlineExceeded`)."""
        if client is None:
            async with httpx.AsyncClient(timeout=self.config.timeout_s) as own:
                return await self.achat(messages, tools, client=own, deadline=deadline, **sampling)
        url = f"{self.config.base_url}/chat/completions"
        body = self.payload(messages, tools, **sampling)
        last_error = ""

        def time_left() -> float:
            if deadline is None:
                return self.config.timeout_s
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(f"{url}: the request's deadline passed"
                                       + (f" (last error: {last_error})" if last_error else ""))
            return min(self.config.timeout_s, left)

        async with self._semaphore():
            for attempt in range(self.config.max_retries + 1):
                start = time.perf_counter()
                try:
                    response = await client.post(url, json=body, headers=self._headers(), timeout=time_left())
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                    time_left()  # a timeout cut short by the deadline is the deadline's
                else:
                    if response.status_code == 200:
                        try:
                            data = response.json()
                        except (ValueError, RecursionError):
                            raise EndpointError(f"{url}: answer is not JSON: {response.text[:300]}") from None
                        if not isinstance(data, dict):
                            raise EndpointError(f"{url}: answer is not a JSON object: {response.text[:300]}")
                        return _parse_response(data, time.perf_counter() - start)
                    last_error = f"HTTP {response.status_code}: {response.text[:500]}"
                    if response.status_code == 400 and any(m in response.text for m in CONTEXT_FULL_MARKERS):
                        raise EndpointContextFull(f"{url}: {last_error}", status=400)
                    if response.status_code not in RETRYABLE_STATUS:
                        raise EndpointError(f"{url}: {last_error}", status=response.status_code)
                if attempt < self.config.max_retries:
                    delay = min(30.0, self.config.backoff_s * 2 ** attempt) * random.uniform(0.75, 1.25)
                    if deadline is not None and time.monotonic() + delay >= deadline:
                        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
                        time_left()
                    await asyncio.sleep(delay)
        raise EndpointError(f"{url}: gave up after {self.config.max_retries + 1} attempts; last error: {last_error}")

    async def achat_many(self, requests: list[dict[str, Any]]) -> list[ChatResult | Exception]:
        """Run many requests concurrently (each a dict of ``achat`` keyword arguments)."""
        limits = httpx.Limits(max_connections=self.config.max_concurrency * 2)
        async with httpx.AsyncClient(timeout=self.config.timeout_s, limits=limits) as client:
            tasks = [self.achat(client=client, **request) for request in requests]
            return await asyncio.gather(*tasks, return_exceptions=True)

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
             *, deadline: float | None = None, **sampling: Any) -> ChatResult:
        """Synchronous ``achat``."""
        return run_sync(self.achat(messages, tools, deadline=deadline, **sampling))

    def chat_many(self, requests: list[dict[str, Any]]) -> list[ChatResult | Exception]:
        """Synchronous ``achat_many``; failures come back as the Exception in their slot."""
        return run_sync(self.achat_many(requests))


def run_sync(coroutine):
    """Run a coroutine to completion, also from code that already runs an event loop (notebooks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
