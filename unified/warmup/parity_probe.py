"""The step-0 parity probe (``parity_probe`` in the recipe): rollout engine vs trainer before step 1.

The importance-sampling correction and the step-1 gate (:mod:`unified.warmup.rollout_check`) judge the
rollout engine's log-probs against the trainer's *during* training. This probe checks the two paths on
the same tokens before any of that, with the start's weights, so that a broken kernel, a cache path
that returns garbage (vLLM 0.28's NaN logits after a prefix-cache hit on Gated DeltaNet, the 0.125 max
logit difference of transformers#46190 between full-sequence and prefill+decode without causal-conv1d)
or a wrong dtype stops the run with numbers instead of training on them.

For each of ``parity_probe.sequences`` training prompts ``x`` (token ids, ``P`` of them):

1. the **engine** decodes ``n = completion_tokens`` tokens greedily the way in-process rollouts run
   (prefill of the prompt, then one token at a time through the KV cache, under the trainer's autocast),
   giving the continuation ``y`` and ``logp_engine(y_j | x, y_<j)`` = ``log_softmax(z_j / temperature)``;
2. with a **prefix cache** (our engine's :class:`~unified.models.prefix_cache.PrefixCache`, where the
   model's cache is a plain KV cache: not for linear-attention hybrids), the prompt is stored first and
   the same ``y`` is scored again with the first ``P - 1`` prompt positions taken from the cache;
3. the **trainer** scores ``x + y`` in one forward, as TRL does (``_get_per_token_logps_and_entropies``).

Reported per engine path: ``mean |d|`` and ``max |d|`` of ``d_j = logp_trainer - logp_engine`` over the
``sequences x n`` tokens, and the NaN count (either side). The run is refused
(:class:`ParityProbeError`) when ``mean |d|`` exceeds ``parity_probe.max_mean_abs_logp_diff`` or more
than ``parity_probe.max_nan`` values are NaN. vLLM engines are scored by
:func:`vllm_prompt_logps` (``prompt_logprobs`` of the whole sequence: vLLM reads no prefix cache for those) and
:func:`vllm_decode_logps` (greedy decoding; a second call reads the prompts from the prefix cache).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from unified.models.generation import _cache_kwarg, _output_cache
from unified.models.prefix_cache import PrefixCache, is_plain_dynamic_cache
from unified.store import write_json_atomic


class ParityProbeError(RuntimeError):
    """The rollout engine's log-probs of the probe's tokens disagree with the trainer's beyond the bound."""


@dataclass(frozen=True)
class ProbeResult:
    """One engine path against the trainer over the probe's tokens."""

    engine: str
    """``hf`` (our in-process decoding), ``hf+prefix_cache``, ``vllm``, ``vllm+prefix_cache``."""
    sequences: int
    tokens: int
    mean_abs_logp_diff: float
    max_abs_logp_diff: float
    nan_count: int

    def line(self) -> str:
        return (f"{self.engine}: {self.sequences} sequences, {self.tokens} tokens, mean |d logp| = "
                f"{self.mean_abs_logp_diff:.3g}, max = {self.max_abs_logp_diff:.3g}, NaN = {self.nan_count}")


def compare(engine: str, engine_logps: Sequence[torch.Tensor], trainer_logps: Sequence[torch.Tensor]) -> ProbeResult:
    """:class:`ProbeResult` of per-sequence ``(n_i,)`` log-prob vectors of the same tokens."""
    e = torch.cat([t.float().reshape(-1).cpu() for t in engine_logps])
    t = torch.cat([x.float().reshape(-1).cpu() for x in trainer_logps])
    if e.shape != t.shape:
        raise ValueError(f"parity probe: {e.numel()} engine log-probs for {t.numel()} trainer log-probs")
    nan = torch.isnan(e) | torch.isnan(t)
    d = (t - e)[~nan].abs()
    return ProbeResult(engine, len(engine_logps), int(e.numel()), float(d.mean()) if d.numel() else math.nan,
                       float(d.max()) if d.numel() else math.nan, int(nan.sum()))


def _logps(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.log_softmax(logits.float() / temperature, dim=-1)


@torch.no_grad()
def engine_decode(model, prompt: torch.Tensor, new_tokens: int, *, temperature: float = 1.0,
                  tokens: torch.Tensor | None = None, prefix_cache=None, autocast=None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy (or, with ``tokens``, teacher-forced) decoding of ``prompt`` ``(P,)`` through the KV cache:
    ``(tokens (n,), logps (n,))``. With ``prefix_cache`` (:class:`unified.models.prefix_cache.PrefixCache`)
    the prompt's first ``P - 1`` positions come from the cache (stored first if absent), as a cache hit
    does in generation; the last prompt position is computed on top of them."""

    ctx = autocast() if autocast is not None else nullcontext()
    ids = prompt.reshape(1, -1).to(model.device)
    kwarg = _cache_kwarg(model)
    with ctx:
        if prefix_cache is not None:
            out = model(input_ids=ids, use_cache=True)
            cache = _output_cache(out)
            if not is_plain_dynamic_cache(cache):
                raise ValueError("parity probe: the prefix cache needs a plain KV cache (not a linear-attention state)")
            prefix_cache.insert(ids[0], [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers])
            reused, cache = prefix_cache.lookup(ids[0], max_length=ids.shape[1] - 1)
            out = model(input_ids=ids[:, reused:], use_cache=True, **{kwarg: cache})
        else:
            out = model(input_ids=ids, use_cache=True)
        picked, logps = [], []
        for j in range(new_tokens):
            lp = _logps(out.logits[:, -1], temperature)[0]
            nxt = int(tokens[j]) if tokens is not None else int(lp.argmax())
            picked.append(nxt)
            logps.append(lp[nxt])
            if j + 1 < new_tokens:
                out = model(input_ids=torch.tensor([[nxt]], device=ids.device), use_cache=True,
                            **{kwarg: _output_cache(out)})
    return torch.tensor(picked), torch.stack(logps).cpu()


def supports_prefix_cache(model) -> bool:
    """Whether the model's cache is a plain KV cache that :class:`PrefixCache` can hold."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[1, 2]], device=model.device), use_cache=True)
    return is_plain_dynamic_cache(_output_cache(out))


def probe_in_process(model, prompts: Sequence[torch.Tensor], trainer_logps: Callable[[torch.Tensor, int], torch.Tensor],
                     *, new_tokens: int, temperature: float = 1.0, autocast=None) -> list[ProbeResult]:
    """Steps 1-3 of the module docstring with our engine. ``trainer_logps(ids (1, P+n), n)`` returns the
    trainer's ``(n,)`` log-probs of the last ``n`` tokens."""

    was_training = model.training
    model.eval()
    try:
        engine, cached, trainer = [], [], []
        with_cache = supports_prefix_cache(model)
        for prompt in prompts:
            tokens, lp = engine_decode(model, prompt, new_tokens, temperature=temperature, autocast=autocast)
            engine.append(lp)
            if with_cache:
                cached.append(engine_decode(model, prompt, new_tokens, temperature=temperature, tokens=tokens,
                                            prefix_cache=PrefixCache(max_bytes=1 << 30), autocast=autocast)[1])
            full = torch.cat([prompt.reshape(-1).cpu(), tokens]).reshape(1, -1)
            trainer.append(trainer_logps(full, new_tokens).reshape(-1))
    finally:
        model.train(was_training)
    results = [compare("hf", engine, trainer)]
    if with_cache:
        results.append(compare("hf+prefix_cache", cached, trainer))
    return results


def check_probe(results: Sequence[ProbeResult], *, max_mean_abs_logp_diff: float | None, max_nan: int) -> None:
    """Raise :class:`ParityProbeError` naming every engine path out of bounds."""
    problems = []
    for r in results:
        if max_mean_abs_logp_diff is not None and not r.mean_abs_logp_diff <= max_mean_abs_logp_diff:
            problems.append(f"{r.engine}: mean |logp_trainer - logp_engine| = {r.mean_abs_logp_diff:.4g} nats > "
                            f"parity_probe.max_mean_abs_logp_diff = {max_mean_abs_logp_diff:g} (max "
                            f"{r.max_abs_logp_diff:.3g})")
        if r.nan_count > max_nan:
            problems.append(f"{r.engine}: {r.nan_count} NaN log-probs > parity_probe.max_nan = {max_nan}")
    if problems:
        raise ParityProbeError(
            "unified.warmup: the step-0 parity probe refuses to start: " + "; ".join(problems)
            + ". The rollout engine and the trainer disagree on the same tokens with the same weights: check the "
              "kernels (attention / experts / linear-attention implementations), the dtype, and the cache path "
              "named; parity_probe.max_mean_abs_logp_diff / max_nan set the bounds (sequences=0 turns the probe off).")


def vllm_prompt_logps(llm, sequences: Sequence[Sequence[int]], from_position: Sequence[int]) -> list[torch.Tensor]:
    """The log-probs vLLM gives each sequence's tokens from ``from_position[i]`` on, scored as a prompt
    (``SamplingParams(max_tokens=1, prompt_logprobs=0)``: the chosen token's log-prob at every position).
    vLLM never reads its prefix cache for a request with ``prompt_logprobs`` (``skip_reading_prefix_cache``):
    this is the cache-off path; :func:`vllm_decode_logps` exercises a cache hit."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    outputs = llm.generate([{"prompt_token_ids": list(s)} for s in sequences], params, use_tqdm=False)
    result = []
    for seq, start, out in zip(sequences, from_position, outputs, strict=True):
        values = []
        for pos in range(start, len(seq)):
            entry = out.prompt_logprobs[pos]
            values.append(math.nan if entry is None or seq[pos] not in entry else float(entry[seq[pos]].logprob))
        result.append(torch.tensor(values))
    return result


def vllm_decode_logps(llm, prompts: Sequence[Sequence[int]], new_tokens: int
                      ) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy decoding of ``new_tokens`` tokens a prompt by vLLM with the chosen tokens' log-probs
    (``logprobs=0``): ``(tokens, logps)``. Called twice on an engine with prefix caching, the second call's
    prompts are read from the cache (the path of vLLM 0.28's NaN logits on Gated DeltaNet)."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, temperature=0.0, logprobs=0,
                            ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    tokens, logps = [], []
    for out in outputs:
        completion = out.outputs[0]
        ids = list(completion.token_ids)
        tokens.append(ids)
        logps.append(torch.tensor([math.nan if entry is None or t not in entry else float(entry[t].logprob)
                                   for t, entry in zip(ids, completion.logprobs, strict=True)]))
    return tokens, logps


def results_record(results: Sequence[ProbeResult]) -> list[dict]:
    return [asdict(r) for r in results]


PROBE_RECORD = "parity_probe.json"
"""Written to the run directory: the probe's results and bounds."""


def probe_trainer(trainer, section, train_dataset, *, backend: str, output_dir=None) -> list[ProbeResult]:
    """The probe for a built :class:`GSPOTrainer` before ``train()``: the first ``section.sequences``
    prompts of ``train_dataset`` rendered by TRL (``_tokenize_prompts``), our engine under the trainer's
    autocast against TRL's log-prob forward; results printed, written to ``PROBE_RECORD`` and checked.
    vLLM backends: the engine is another process; not probed here (:func:`vllm_prompt_logps` scores a
    vLLM engine; the step-1 gate of :mod:`unified.warmup.rollout_check` covers the served one)."""
    if section.sequences < 1:
        return []
    if backend == "vllm_server":  # the served engine decodes, every rank's trainer scores (ZeRO-3 gathers)
        if getattr(trainer, "vllm_generation", None) is None:
            print("unified.warmup: parity_probe: skipped: no rollout server client on this trainer", flush=True)
            return []
        return probe_served(trainer, section, train_dataset, output_dir=output_dir)
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        print("unified.warmup: parity_probe: skipped: the in-process engine decodes with the whole model, which "
              "ZeRO-3/FSDP shards on every rank", flush=True)
        return []
    if backend != "hf":
        print(f"unified.warmup: parity_probe: generation.backend={backend} is scored by the step-1 rollout gate, "
              "not by the step-0 probe (in-process engine only)", flush=True)
        return []
    rows = [train_dataset[i] for i in range(min(section.sequences, len(train_dataset)))]
    prompt_ids = trainer._tokenize_prompts([row["prompt"] for row in rows])[0]
    model = trainer.accelerator.unwrap_model(trainer.model)
    device = trainer.accelerator.device

    def trainer_logps(ids: torch.Tensor, n: int) -> torch.Tensor:
        ids = ids.to(device)
        with torch.no_grad():
            return trainer._get_per_token_logps_and_entropies(trainer.model, ids, torch.ones_like(ids), n)[0]

    results = probe_in_process(model, [torch.tensor(p, device=device) for p in prompt_ids], trainer_logps,
                               new_tokens=section.completion_tokens, temperature=trainer.temperature,
                               autocast=trainer.accelerator.autocast)
    return _report(trainer, section, results, output_dir)


def served_engine_logps(trainer, prompts: list[list[int]], new_tokens: int) -> dict[str, tuple[list, list]]:
    """The rollout server's paths for ``prompts`` (main process): ``{path: (tokens, logps)}``.

    ``vllm``: greedy decoding of ``new_tokens`` with the chosen tokens' log-probs; ``vllm+prefix_cache``: the
    same request again, whose prompts the server reads from its prefix cache when it keeps one (vLLM's
    hybrid Gated DeltaNet path; a server without prefix caching recomputes them: the same path twice);
    ``vllm prompt_logprobs``: the whole sequence scored as a prompt (never read from the cache). An engine
    object with ``decode_logprobs(prompts, n)`` and ``sequence_logprobs(ids)`` (the tests' CPU engines)
    answers the same three; else TRL's ``VLLMClient``."""
    engine = trainer.vllm_generation
    decode = getattr(engine, "decode_logprobs", None)
    if not callable(decode):
        client = engine.vllm_client

        def decode(ps, n):
            out = client.generate(ps, n=1, temperature=0.0, max_tokens=n, logprobs=0,
                                  generation_kwargs={"min_tokens": n, "ignore_eos": True})
            return out["completion_ids"], [[float(v[0]) for v in lp] for lp in out["logprobs"]]

        def score(seq, start):
            got = client.get_sequence_logprobs([seq], [start], top_logprobs=1, temperature=1.0)
            return [float(v[0]) for v in got["actual_logprobs"][0]]
    else:
        def score(seq, start):
            return [float(v) for v in engine.sequence_logprobs(seq)][start - 1:]
    first = decode(prompts, new_tokens)
    again = decode(prompts, new_tokens)
    scored = [score(list(p) + list(y), len(p)) for p, y in zip(prompts, first[0], strict=True)]
    scored_again = [score(list(p) + list(y), len(p)) for p, y in zip(prompts, again[0], strict=True)]
    return {"vllm": first, "vllm+prefix_cache": again, "vllm prompt_logprobs": (first[0], scored),
            "_scored_again": (again[0], scored_again)}


def probe_served(trainer, section, train_dataset, *, output_dir=None) -> list[ProbeResult]:
    """:func:`probe_trainer` for ``generation.backend=vllm_server``: the server's three paths
    (:func:`served_engine_logps`, asked by the main process and broadcast) against the trainer's forward of
    the same tokens on every rank (a ZeRO-3 forward gathers on all of them)."""
    rows = [train_dataset[i] for i in range(min(section.sequences, len(train_dataset)))]
    prompt_ids = [list(p) for p in trainer._tokenize_prompts([row["prompt"] for row in rows])[0]]
    box: list = [None]
    if trainer.accelerator.is_main_process:
        box[0] = served_engine_logps(trainer, prompt_ids, section.completion_tokens)
    if trainer.accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(box, from_process=0)
    paths = box[0]
    scored_again = paths.pop("_scored_again")
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        # the trainer's forward before train() would need the whole model gathered on every rank: the engine's
        # decoding paths are checked against its own uncached scoring of the same tokens instead
        results = [compare("vllm vs vllm prompt_logprobs", [torch.tensor(v) for v in paths["vllm"][1]],
                           [torch.tensor(v) for v in paths["vllm prompt_logprobs"][1]]),
                   compare("vllm+prefix_cache vs vllm prompt_logprobs",
                           [torch.tensor(v) for v in paths["vllm+prefix_cache"][1]],
                           [torch.tensor(v) for v in scored_again[1]])]
        return _report(trainer, section, results, output_dir)
    device = trainer.accelerator.device
    results = []
    for path, (tokens, logps) in paths.items():
        trainer_side = []
        for prompt, y in zip(prompt_ids, tokens, strict=True):
            ids = torch.tensor([prompt + list(y)], device=device)
            with torch.no_grad():
                trainer_side.append(trainer._get_per_token_logps_and_entropies(
                    trainer.model, ids, torch.ones_like(ids), len(y))[0].reshape(-1))
        results.append(compare(path, [torch.tensor(v, dtype=torch.float32) for v in logps], trainer_side))
    return _report(trainer, section, results, output_dir)


def _report(trainer, section, results: list[ProbeResult], output_dir) -> list[ProbeResult]:
    """Print, record (``PROBE_RECORD``) and check the probe's results."""
    for r in results:
        print(f"unified.warmup: parity_probe: {r.line()}", flush=True)
    if output_dir is not None and trainer.accelerator.is_main_process:
        write_json_atomic(Path(output_dir) / PROBE_RECORD, {
            "results": results_record(results), "bounds": {
                "max_mean_abs_logp_diff": section.max_mean_abs_logp_diff, "max_nan": section.max_nan}})
    check_probe(results, max_mean_abs_logp_diff=section.max_mean_abs_logp_diff, max_nan=section.max_nan)
    return results


__all__ = ["PROBE_RECORD", "probe_served", "served_engine_logps", "ParityProbeError", "ProbeResult", "check_probe", "compare", "engine_decode",
           "probe_in_process", "probe_trainer", "results_record", "supports_prefix_cache", "vllm_decode_logps", "vllm_prompt_logps"]
