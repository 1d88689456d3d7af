"""``hf``: in-process transformers generation, the next turn of all episodes in one batch.

Prompts are rendered with the checkpoint's own chat template (tools included) and generated
together by :func:`unified.models.generation.batched_generate` (left-padded batches); each
output keeps its own token ids. A :class:`unified.models.prefix_cache.PrefixCache` keeps the KV
of recent prompts + completions, so an episode's next turn (its previous prompt and completion
plus the new observation) and tasks sharing a system prompt prefill only their new tokens.
``prefix_cache_mb`` sets its budget (0 turns it off; default ``$UNIFIED_PREFIX_CACHE_MB`` or
1024). ``stats`` accumulates prefill/decode seconds and token counts over all calls.
"""

from __future__ import annotations

import json
from typing import Any

from unified.policy.base import Policy, PolicyOutput, PolicyRequest, SamplingConfig


class HFPolicy(Policy):
    name = "hf"

    def __init__(self, model: str = "embedded", sampling: SamplingConfig = SamplingConfig(), *,
                 loaded: Any = None, max_batch_size: int = 16, prefix_cache_mb: float | None = None) -> None:
        from unified.models.generation import GenerationStats
        from unified.models.prefix_cache import PrefixCache

        super().__init__(str(model), sampling)
        if loaded is None:
            from unified.models import load_checkpoint

            loaded = load_checkpoint(model)
        self.loaded = loaded
        self.max_batch_size = max_batch_size
        self.prefix_cache = PrefixCache(None if prefix_cache_mb is None else int(prefix_cache_mb * (1 << 20)))
        self.stats = GenerationStats()

    def render(self, request: PolicyRequest) -> str:
        return self.loaded.tokenizer.apply_chat_template(
            request.messages, tools=request.tools or None, tokenize=False, add_generation_prompt=True,
            enable_thinking=self.sampling.enable_thinking) + request.prefix

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        from unified.models.generation import SamplingParams, batched_generate

        results: list[PolicyOutput | Exception | None] = [None] * len(requests)
        prompts, index = [], []
        for i, request in enumerate(requests):
            try:
                prompts.append(self.render(request))
                index.append(i)
            except Exception as exc:  # a template error belongs to that request only
                results[i] = exc
        s = self.sampling
        params = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, seed=s.seed)
        if prompts:
            outputs = batched_generate(self.loaded.model, self.loaded.tokenizer, prompts, params,
                                       max_batch_size=self.max_batch_size, prefix_cache=self.prefix_cache,
                                       stats=self.stats)
            for i, prompt, out in zip(index, prompts, outputs):
                results[i] = PolicyOutput(text=out.text, prompt=prompt, token_ids=list(out.token_ids),
                                          prefix=requests[i].prefix,
                                          prompt_tokens=out.prompt_tokens, completion_tokens=len(out.token_ids),
                                          finish_reason=out.finish_reason, seconds=out.seconds)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        self.prefix_cache.clear()


def request_json(request: PolicyRequest) -> str:
    """The request as JSON (the ``prompt`` record of remote backends)."""
    return json.dumps({"messages": request.messages, "tools": request.tools}, default=str)
