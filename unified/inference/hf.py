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

The weights come from the process's shared copy (:func:`unified.inference.shared.shared_checkpoint`:
a judge or a local server on the same spec uses the same tensors) unless ``loaded`` is given;
every forward pass runs under the model's :func:`unified.inference.shared.model_lock`. A request's
own ``max_new_tokens``/``temperature``/``thinking`` override the model's sampling (rows
of one batch may differ). Outputs carry each generated token's log-probability
(:func:`unified.models.generation.token_logprobs`).
"""

from __future__ import annotations

from typing import Any, Hashable

from unified.inference.base import ChatModel, PolicyOutput, PolicyRequest, SamplingConfig
from unified.inference.shared import model_lock, shared_checkpoint
from unified.inference.spec import ModelSpec, parse_spec
from unified.models.continuous import ContinuousBatcher, ContinuousStats, continuous_batching_supported
from unified.models.generation import SamplingParams, batched_generate, past_deadline
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
        self.lock = model_lock(loaded.model)
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

    def _sampling_params(self, request: PolicyRequest | None = None) -> SamplingParams:
        s = self.sampling_for(request) if request is not None else self.sampling
        return SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, seed=s.seed)

    def render(self, request: PolicyRequest) -> str:
        thinking = self.sampling.thinking if request.thinking is None else request.thinking
        return self.loaded.tokenizer.apply_chat_template(
            request.messages, tools=request.tools or None, tokenize=False, add_generation_prompt=True,
            enable_thinking=thinking) + request.prefix

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
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
        groups: dict[SamplingParams, list[int]] = {}  # rows with the same sampling decode together
        for j, i in enumerate(index):
            groups.setdefault(self._sampling_params(requests[i]), []).append(j)
        for params, rows in groups.items():
            with self.lock:
                outputs = batched_generate(self.loaded.model, self.loaded.tokenizer, [prompts[j] for j in rows], params,
                                           max_batch_size=self.max_batch_size, prefix_cache=self.prefix_cache,
                                           stats=self.stats, deadlines=[requests[index[j]].deadline for j in rows])
            for j, out in zip(rows, outputs):
                results[index[j]] = _policy_output(out, prompts[j], requests[index[j]])
        return results  # type: ignore[return-value]

    # continuous batching ------------------------------------------------------------------
    def submit(self, key: Hashable, request: PolicyRequest) -> None:
        if not self.supports_continuous_batching:
            return super().submit(key, request)
        if key in self._requests:
            raise ValueError(f"request key {key!r} is already being generated")
        if self._batcher is None:
            with self.lock:
                self._batcher = ContinuousBatcher(self.loaded.model, self.loaded.tokenizer, self._sampling_params(),
                                                  max_rows=self.max_batch_size, prefix_cache=self.prefix_cache,
                                                  stats=self.stats)
        if past_deadline(request.deadline):
            self._ready.append((key, _timed_out(request)))
            return
        try:
            prompt = self.render(request)
            self._batcher.add(key, prompt, self._sampling_params(request), deadline=request.deadline)
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
            with self.lock:
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
                        prompt_token_ids=list(out.prompt_token_ids), logprobs=out.logprobs,
                        prompt_tokens=out.prompt_tokens, completion_tokens=len(out.token_ids),
                        finish_reason=out.finish_reason, seconds=out.seconds)

