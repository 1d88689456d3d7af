"""``hf``: in-process transformers generation, the next turn of all episodes in one batch.

Prompts are rendered with the checkpoint's own chat template (tools included) and generated
together by :func:`unified.models.generation.batched_generate` (left-padded batches); each
output keeps its own token ids. A :class:`unified.models.prefix_cache.PrefixCache` keeps the KV
of recent prompts + completions, so an episode's next turn (its previous prompt and completion
plus the new observation) and tasks sharing a system prompt prefill only their new tokens.
``prefix_cache_mb`` sets its budget (0 turns it off; default ``$UNIFIED_PREFIX_CACHE_MB`` or
1024). ``stats`` accumulates prefill/decode seconds and token counts over all calls.

Two ways in: ``generate(requests)`` (one batch, the agent loop's *rounds*) and
``submit`` / ``poll`` (continuous batching through
:class:`unified.models.continuous.ContinuousBatcher`: requests join the decoding batch when
they arrive and leave when they end). ``continuous`` (default: when the model supports it, i.e.
SDPA attention and a plain KV cache) turns the second way on; ``max_batch_size`` bounds the
rows decoded together in both. A request's ``deadline`` ends its row when it passes
(``finish_reason="timeout"``, the text so far kept); a request whose deadline has already
passed is answered at once with no text.
"""

from __future__ import annotations

import json
from typing import Any, Hashable

from unified.policy.base import Policy, PolicyOutput, PolicyRequest, SamplingConfig


class HFPolicy(Policy):
    name = "hf"

    def __init__(self, model: str = "embedded", sampling: SamplingConfig = SamplingConfig(), *,
                 loaded: Any = None, max_batch_size: int = 16, prefix_cache_mb: float | None = None,
                 continuous: bool | None = None) -> None:
        from unified.models.continuous import ContinuousStats, continuous_batching_supported
        from unified.models.prefix_cache import PrefixCache

        super().__init__(str(model), sampling)
        if loaded is None:
            from unified.models import load_checkpoint

            loaded = load_checkpoint(model)
        self.loaded = loaded
        self.max_batch_size = max_batch_size
        self.prefix_cache = PrefixCache(None if prefix_cache_mb is None else int(prefix_cache_mb * (1 << 20)))
        self.stats = ContinuousStats()
        supported, why = continuous_batching_supported(loaded.model)
        if continuous and not supported:
            raise ValueError(f"continuous batching was asked for but is not supported: {why}")
        self.supports_continuous_batching = supported if continuous is None else bool(continuous)
        self._batcher = None
        self._requests: dict[Hashable, tuple[PolicyRequest, str]] = {}  # submitted: (request, rendered prompt)
        self._ready: list[tuple[Hashable, PolicyOutput | Exception]] = []

    def _sampling_params(self):
        from unified.models.generation import SamplingParams

        s = self.sampling
        return SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, seed=s.seed)

    def render(self, request: PolicyRequest) -> str:
        return self.loaded.tokenizer.apply_chat_template(
            request.messages, tools=request.tools or None, tokenize=False, add_generation_prompt=True,
            enable_thinking=self.sampling.enable_thinking) + request.prefix

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        from unified.models.generation import batched_generate, past_deadline

        results: list[PolicyOutput | Exception | None] = [None] * len(requests)
        prompts, index = [], []
        for i, request in enumerate(requests):
            if past_deadline(request.deadline):
                results[i] = _timed_out(request)
                continue
            try:
                prompts.append(self.render(request))
                index.append(i)
            except Exception as exc:  # a template error belongs to that request only
                results[i] = exc
        if prompts:
            outputs = batched_generate(self.loaded.model, self.loaded.tokenizer, prompts, self._sampling_params(),
                                       max_batch_size=self.max_batch_size, prefix_cache=self.prefix_cache,
                                       stats=self.stats, deadlines=[requests[i].deadline for i in index])
            for i, prompt, out in zip(index, prompts, outputs):
                results[i] = _policy_output(out, prompt, requests[i])
        return results  # type: ignore[return-value]

    # continuous batching ------------------------------------------------------------------
    def submit(self, key: Hashable, request: PolicyRequest) -> None:
        if not self.supports_continuous_batching:
            return super().submit(key, request)
        if key in self._requests:
            raise ValueError(f"request key {key!r} is already being generated")
        if self._batcher is None:
            from unified.models.continuous import ContinuousBatcher

            self._batcher = ContinuousBatcher(self.loaded.model, self.loaded.tokenizer, self._sampling_params(),
                                              max_rows=self.max_batch_size, prefix_cache=self.prefix_cache,
                                              stats=self.stats)
        from unified.models.generation import past_deadline

        if past_deadline(request.deadline):
            self._ready.append((key, _timed_out(request)))
            return
        try:
            prompt = self.render(request)
            self._batcher.add(key, prompt, deadline=request.deadline)
        except Exception as exc:  # a template error belongs to that request only
            self._ready.append((key, exc))
            return
        self._requests[key] = (request, prompt)

    def poll(self) -> list[tuple[Hashable, PolicyOutput | Exception]]:
        if not self.supports_continuous_batching:
            return super().poll()
        done, self._ready = self._ready, []
        if self._batcher is None or not self._batcher.busy:
            return done
        try:
            finished = self._batcher.step()
        except Exception as exc:  # the engine's state is unknown: fail every request in it, start afresh
            done += [(key, exc) for key in self._requests]
            self._requests.clear()
            self._batcher = None
            return done
        for key, out in finished:
            request, prompt = self._requests.pop(key)
            done.append((key, _policy_output(out, prompt, request)))
        return done

    def reset_stats(self) -> None:
        """Start counting afresh (benchmarks measure one mode at a time)."""
        from unified.models.continuous import ContinuousStats

        self.stats = ContinuousStats()
        if self._batcher is not None:
            self._batcher.stats = self.stats

    def close(self) -> None:
        self.prefix_cache.clear()
        self._batcher = None


def _timed_out(request: PolicyRequest) -> PolicyOutput:
    """The answer to a request whose deadline passed before generation started."""
    return PolicyOutput(text="", prefix=request.prefix, finish_reason="timeout")


def _policy_output(out, prompt: str, request: PolicyRequest) -> PolicyOutput:
    """A :class:`GenerationOutput` as the policy's output for ``request``."""
    return PolicyOutput(text=out.text, prompt=prompt, token_ids=list(out.token_ids), prefix=request.prefix,
                        prompt_token_ids=list(out.prompt_token_ids),
                        prompt_tokens=out.prompt_tokens, completion_tokens=len(out.token_ids),
                        finish_reason=out.finish_reason, seconds=out.seconds)


def request_json(request: PolicyRequest) -> str:
    """The request as JSON (the ``prompt`` record of remote backends)."""
    return json.dumps({"messages": request.messages, "tools": request.tools}, default=str)
