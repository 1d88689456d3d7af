"""``hf``: in-process transformers generation, a client of its checkpoint's one engine.

Prompts are rendered with the checkpoint's own chat template (tools included) and handed to the
model's :class:`unified.inference.engine.Engine` (one per loaded checkpoint, shared with judges,
simulated users and the loopback server on the same weights): ``submit(request)`` returns a
future at once, ``generate(requests)`` submits them all and waits. The engine decodes requests
by continuous batching (:class:`unified.models.continuous.ContinuousBatcher`: a request joins
the decoding batch at the next step and leaves it when it ends) where the model supports it
(SDPA attention and a plain KV cache); ``continuous=False`` (or a model it does not support)
gathers requests that arrive together into left-padded batches
(:func:`unified.models.generation.batched_generate`). Each output keeps its own token ids.

A :class:`unified.models.prefix_cache.PrefixCache` per policy keeps the KV of recent prompts +
completions, so an episode's next turn (its previous prompt and completion plus the new
observation) and tasks sharing a system prompt prefill only their new tokens. ``prefix_cache_mb``
sets its budget (0 turns it off; default ``$UNIFIED_PREFIX_CACHE_MB`` or 1024). ``stats``
accumulates this policy's prefill/decode seconds and token counts. ``max_batch_size`` is the
least number of rows the engine decodes together. A request's ``deadline`` ends its row when it
passes (``finish_reason="timeout"``, the text so far kept); a request whose deadline has already
passed is answered at once with no text.

The weights come from the process's shared copy (:func:`unified.inference.shared.shared_checkpoint`)
unless ``loaded`` is given. A request's own ``max_new_tokens``/``temperature``/``thinking``
override the model's sampling (rows of one batch may differ). Outputs carry each generated
token's log-probability (:func:`unified.models.generation.token_logprobs`).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from unified.inference.base import ChatModel, PolicyOutput, PolicyRequest, SamplingConfig
from unified.inference.engine import chain, engine_for
from unified.inference.shared import shared_checkpoint
from unified.inference.spec import ModelSpec, parse_spec
from unified.models.continuous import ContinuousStats
from unified.models.generation import SamplingParams
from unified.models.prefix_cache import PrefixCache


class HFPolicy(ChatModel):
    concurrency_option = "max_batch_size"
    name = "hf"

    def __init__(self, model: str | ModelSpec = "embedded", sampling: SamplingConfig = SamplingConfig(), *,
                 loaded: Any = None, max_batch_size: int = 16, prefix_cache_mb: float | None = None,
                 continuous: bool | None = None) -> None:
        spec = parse_spec(model) if loaded is None else None
        super().__init__(spec.text if spec is not None else str(model), sampling)
        if loaded is None:
            loaded = shared_checkpoint(spec)
        self.loaded = loaded
        self.max_batch_size = max_batch_size
        self.engine = engine_for(loaded, max_rows=max_batch_size)
        self.prefix_cache = PrefixCache(None if prefix_cache_mb is None else int(prefix_cache_mb * (1 << 20)))
        self.stats = ContinuousStats()
        supported, why = self.engine.continuous_supported, self.engine.why_not_continuous
        if continuous and not supported:
            raise ValueError(f"continuous batching was asked for but is not supported: {why}")
        self.supports_continuous_batching = supported if continuous is None else bool(continuous)
        """True when requests join the engine's continuous batch (else they are gathered into batches)."""

    def _sampling_params(self, request: PolicyRequest | None = None) -> SamplingParams:
        s = self.sampling_for(request) if request is not None else self.sampling
        return SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, seed=s.seed)

    def render(self, request: PolicyRequest) -> str:
        thinking = self.sampling.thinking if request.thinking is None else request.thinking
        return self.loaded.tokenizer.apply_chat_template(
            request.messages, tools=request.tools or None, tokenize=False, add_generation_prompt=True,
            enable_thinking=thinking) + request.prefix

    def submit(self, request: PolicyRequest, *, continuous: bool | None = None) -> Future:
        """Render ``request`` and queue it on the engine; a template error fails its future only."""
        try:
            prompt = self.render(request)
        except Exception as exc:  # a template error belongs to that request only
            failed: Future = Future()
            failed.set_exception(exc)
            return failed
        joins = self.supports_continuous_batching and continuous is not False
        future = self.engine.generate(prompt, self._sampling_params(request), deadline=request.deadline,
                                      continuous=joins, prefix_cache=self.prefix_cache, stats=self.stats)
        return chain(future, lambda out: _policy_output(out, prompt, request))

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        futures = [self.submit(request) for request in requests]
        results: list[PolicyOutput | Exception] = []
        for future in futures:
            try:
                results.append(future.result())
            except Exception as exc:  # one failing request must not take the batch down
                results.append(exc)
        return results

    def reset_stats(self) -> None:
        """Start counting afresh (benchmarks measure one mode at a time)."""
        self.stats = ContinuousStats()

    def close(self) -> None:
        self.prefix_cache.clear()


def _policy_output(out, prompt: str, request: PolicyRequest) -> PolicyOutput:
    """A :class:`GenerationOutput` as the policy's output for ``request``."""
    return PolicyOutput(text=out.text, prompt=prompt if out.prompt_token_ids else "",
                        token_ids=list(out.token_ids), prefix=request.prefix,
                        prompt_token_ids=list(out.prompt_token_ids), logprobs=out.logprobs,
                        prompt_tokens=out.prompt_tokens, completion_tokens=len(out.token_ids),
                        finish_reason=out.finish_reason, seconds=out.seconds)
