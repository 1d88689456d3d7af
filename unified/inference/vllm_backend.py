"""``vllm``: vLLM's offline engine (``pip install unified[gpu]``; imported only when used).

Prompts are rendered with the checkpoint's chat template and generated in one
``LLM.generate`` call, which schedules the whole batch with continuous batching; each request
has its own ``SamplingParams`` (its ``max_new_tokens``/``temperature``), with ``logprobs=0`` so
that vLLM returns the log-probability of every sampled token.
"""

from __future__ import annotations

import time

from unified.inference.base import ChatModel, PolicyOutput, PolicyRequest, SamplingConfig
from unified.inference.spec import ModelSpec, parse_spec
from unified.models.embedded import ensure_embedded_checkpoint


class VLLMUnavailable(RuntimeError):
    """vLLM is not installed (CPU installs never have it)."""


class VLLMPolicy(ChatModel):
    name = "vllm"

    def __init__(self, model: str | ModelSpec, sampling: SamplingConfig = SamplingConfig(), **engine_kwargs) -> None:
        spec = parse_spec(model, backend="vllm")
        super().__init__(spec.text, sampling)
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise VLLMUnavailable("the vllm backend needs vLLM: pip install 'unified[gpu]' on a CUDA machine") from None
        path = spec.checkpoint
        if spec.kind == "embedded":
            path = str(ensure_embedded_checkpoint())
        self.llm = vllm.LLM(model=path, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        from vllm import SamplingParams

        settings = [self.sampling_for(r) for r in requests]
        prompts = [self.tokenizer.apply_chat_template(r.messages, tools=r.tools or None, tokenize=False,
                                                      add_generation_prompt=True, enable_thinking=s.thinking)
                   + r.prefix for r, s in zip(requests, settings)]
        params = [SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_new_tokens, seed=s.seed,
                                 logprobs=0) for s in settings]
        t0 = time.perf_counter()
        results = self.llm.generate(prompts, params)
        seconds = time.perf_counter() - t0
        outputs: list[PolicyOutput | Exception] = []
        for request, prompt, result in zip(requests, prompts, results):
            out = result.outputs[0]
            logprobs = None
            if out.logprobs:  # one {token_id: Logprob} per generated token, the sampled one included
                logprobs = [float(step[t].logprob) for t, step in zip(out.token_ids, out.logprobs)]
            outputs.append(PolicyOutput(text=out.text, prompt=prompt, token_ids=list(out.token_ids), prefix=request.prefix,
                                        logprobs=logprobs,
                                        prompt_token_ids=list(result.prompt_token_ids or []),
                                        prompt_tokens=len(result.prompt_token_ids or []),
                                        completion_tokens=len(out.token_ids), finish_reason=out.finish_reason or "",
                                        seconds=seconds))
        return outputs
