"""``vllm``: a checkpoint served by a real vLLM server that this process starts (``vllm:SPEC``).

The server runs from vLLM's own environment (``make vllm``; :mod:`unified.inference.vllm_server`),
on a free loopback port, one per checkpoint and process: the policy, a judge and a simulated user
on the same checkpoint share it (:func:`unified.inference.endpoints.resolve_endpoint` hands them
its endpoint). Requests go through the ``openai`` backend (:class:`OpenAIPolicy`: concurrent,
``submit``/``poll``; vLLM batches continuously on its side), with two additions vLLM answers:

- ``return_token_ids``: the response carries the prompt's token ids (``prompt_token_ids``) and
  each choice its generated ids (``token_ids``), so :attr:`PolicyOutput.prompt_token_ids` and
  ``token_ids`` (hence ``Step.prompt_token_ids``/``completion_token_ids``) are vLLM's own;
- ``logprobs``: each generated token's log-probability (``Step.completion_logprobs``).

With a tool-call parser (``tool_parser``; default by checkpoint kind or by the checkpoint's chat template,
:func:`unified.inference.vllm_server.tool_parser_for`; ``"none"``
turns it off) the server is started with ``--enable-auto-tool-choice`` and its parser: calls come
back parsed (``PolicyOutput.tool_calls``) and their markup leaves ``content``. The policy's text
is still the *raw* completion, as every other backend gives it: the generated ids decoded with the
checkpoint's tokenizer exactly as the in-process engine decodes them (final EOS dropped, special
tokens kept), so the agent loop parses the same markup whatever served it and ``Step.completion``
stays what the model wrote (the server's parsed calls are the fallback when the text has none).
A request's ``prefix`` (prefill) is not sent: the chat API has no place for it, and
``PolicyOutput.prefix`` stays empty.
"""

from __future__ import annotations

from typing import Any

from unified.inference.base import PolicyOutput, PolicyRequest, SamplingConfig
from unified.inference.openai_backend import OpenAIPolicy
from unified.inference.spec import ModelSpec, parse_spec
from unified.inference.vllm_server import VLLMServer, VLLMUnavailable, checkpoint_dir, tool_parser_for, vllm_server_for
from unified.models.checkpoint import load_tokenizer

__all__ = ["VLLMPolicy", "VLLMUnavailable", "checkpoint_dir", "server_for_spec"]


def server_for_spec(spec: str | ModelSpec, *, tool_parser: str | None = "auto",
                    max_model_len: int | None = None) -> VLLMServer:
    """The process's vLLM server for a checkpoint spec (started on first use)."""
    model_dir, kind = checkpoint_dir(spec)
    parser = tool_parser_for(model_dir, kind) if tool_parser == "auto" else tool_parser
    return vllm_server_for(model_dir, tool_parser=None if parser in (None, "", "none") else parser,
                           max_model_len=max_model_len)


class VLLMPolicy(OpenAIPolicy):
    name = "vllm"

    def __init__(self, model: str | ModelSpec, sampling: SamplingConfig = SamplingConfig(), *,
                 tool_parser: str | None = "auto", max_model_len: int | None = None, max_concurrency: int = 8,
                 timeout_s: float = 600.0, max_retries: int = 2) -> None:
        spec = parse_spec(model, backend="vllm")
        self.server = server_for_spec(spec, tool_parser=tool_parser, max_model_len=max_model_len)
        super().__init__(self.server.spec, sampling, timeout_s=timeout_s, max_retries=max_retries,
                         max_concurrency=max_concurrency, logprobs=True, api_key=self.server.token)
        self.model = spec.text
        self.tokenizer = load_tokenizer(self.server.model_dir)

    def _payload(self, request: PolicyRequest) -> dict[str, Any]:
        payload = super()._payload(request)
        payload["return_token_ids"] = True
        return payload

    def _output(self, request: PolicyRequest, answer) -> PolicyOutput | Exception:
        out = OpenAIPolicy._output(request, answer)
        if isinstance(out, PolicyOutput) and not isinstance(answer, Exception):
            body = answer.raw or {}
            choice = (body.get("choices") or [{}])[0]
            out.prompt_token_ids = _ids(body.get("prompt_token_ids"))
            out.token_ids = _ids(choice.get("token_ids"))
            if out.logprobs is not None and len(out.logprobs) != len(out.token_ids):
                out.logprobs = None  # misaligned: better none than wrong
            if out.token_ids:
                out.text = raw_completion(self.tokenizer, out.token_ids)
        return out


def raw_completion(tokenizer, ids: list[int]) -> str:
    """The completion text of generated ``ids`` as the in-process engine writes it: a final EOS dropped,
    special tokens kept, padding tokens removed (:mod:`unified.models.generation`)."""
    eos = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    text = tokenizer.decode(ids[:-1] if ids and ids[-1] in eos else ids, skip_special_tokens=False)
    for token in {tokenizer.pad_token, "<|endoftext|>"} - {None}:
        text = text.replace(token, "")
    return text


def _ids(value: Any) -> list[int]:
    """A list of token ids from a server answer (anything else: empty)."""
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return list(value)
    return []
