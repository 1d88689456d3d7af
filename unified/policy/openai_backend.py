"""``openai``: any OpenAI-compatible server (vLLM, SGLang, ``transformers serve``, our local server).

Requests of one batch go out concurrently through
:class:`unified.clients.openai_compat.OpenAICompatClient` (bounded concurrency, retries with
backoff on 429/5xx/connection errors, per-request timeouts). The server's split-out reasoning
is put back in front of the answer as ``...</think>`` so that every backend hands the agent
loop the same raw-completion shape; calls the server already parsed are passed through.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from unified.policy.base import Policy, PolicyOutput, PolicyRequest, SamplingConfig
from unified.policy.hf import request_json


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


class OpenAIPolicy(Policy):
    name = "openai"

    def __init__(self, spec: str, sampling: SamplingConfig = SamplingConfig(), *, timeout_s: float = 300.0,
                 max_retries: int = 4, max_concurrency: int = 8, api_key: str | None = None) -> None:
        from unified.clients.openai_compat import OpenAICompatClient, parse_endpoint_spec

        super().__init__(spec, sampling)
        self.config = parse_endpoint_spec(spec, timeout_s=timeout_s, max_retries=max_retries,
                                          max_concurrency=max_concurrency, api_key=api_key)
        self.client = OpenAICompatClient(self.config)

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        s = self.sampling
        payloads = [dict(messages=to_wire(r.messages), tools=r.tools or None, max_tokens=s.max_new_tokens,
                         temperature=s.temperature, top_p=s.top_p, seed=s.seed,
                         chat_template_kwargs={"enable_thinking": s.enable_thinking}) for r in requests]
        answers = self.client.chat_many(payloads)
        outputs: list[PolicyOutput | Exception] = []
        for request, answer in zip(requests, answers):
            if isinstance(answer, Exception):
                outputs.append(answer)
                continue
            text = answer.text or ""
            if answer.reasoning:
                text = f"{answer.reasoning}\n</think>\n\n{text}"
            outputs.append(PolicyOutput(
                text=text, prompt=request_json(request), prompt_tokens=answer.prompt_tokens,
                completion_tokens=answer.completion_tokens, finish_reason=answer.finish_reason,
                seconds=answer.latency_s, tool_calls=answer.tool_calls or None))
        return outputs
