"""The world-model evaluation (``python -m unified.eval lwm``): infer -> judge -> aggregate.

    python -m unified.eval lwm --model SPEC --judge SPEC --data DIR --out DIR [--agentworld-root CHECKOUT]

SPEC is any model spec of :mod:`unified.inference.spec` (``embedded``, a HF directory, ...,
``openai:URL#MODEL``); a world model and a judge on the same checkpoint share one loaded copy.
``--data`` takes our files or AgentWorldBench as published (``{domain}_test.jsonl``).

Two protocols:

- **official** (a Qwen-AgentWorld checkout: ``--agentworld-root`` or ``$AGENTWORLD_ROOT``):
  AgentWorldBench as its ``eval/eval.py`` scores it, with the checkout's judge prompts,
  judge user template, parsers and task configs loaded at run time (:mod:`unified.lwm.official`
  gives the protocol and the aggregation: per-sample total = mean of the non-zero dimensions,
  up to 3 judge attempts, failed samples left out and counted, ``overall`` = normalised mean
  over the valid samples, ``overall_domain_mean`` = the paper table's mean of the domain
  scores). ``judged.jsonl`` is in eval.py's format: ``python eval/eval.py score --predictions
  OUT/judged.jsonl`` prints the same numbers.
- **own** (no checkout): our rubric judge prompt (:mod:`unified.rewards.rubric`) and its
  ``<scores>`` parser; labelled not comparable (``not_comparable_because``)::

      score_i  = (mean_c s_ic - 1) / 4 * 100   (0 when the judge's answer is unparseable)
      domain_d = mean of score_i over the samples of domain d
      overall  = mean_d domain_d               (unweighted over domains)
      overall_sample_weighted = mean_i score_i

Budgets and temperatures default to eval.py's (32768 tokens, temperature 0.6, for the world
model and the judge); any other value is named in ``not_comparable_because``.

1. infer: for each selected record, the world model predicts the observation;
   ``predictions.jsonl`` (append-only; a rerun skips what is there).
2. judge: ``judged.jsonl`` (official) or ``judgments.jsonl`` (own), append-only and resumable;
   judge answers are also cached on disk (per attempt).
3. aggregate: ``summary.json``, written atomically. Beside the judge's score, a reference-based
   score that needs no judge: ``reference.lcs_f1`` and ``reference.token_f1``
   (:class:`unified.rewards.functions.SimilarityReward`: ROUGE-L / bag-of-tokens F1 of the parsed
   prediction against the true observation after runtime normalisation), x100, aggregated over
   domains as the own protocol does. A weak judge rarely writes a parseable answer: then the
   reference score is the one that measures something, and ``rubric_note`` says so.

``--limit N`` evaluates N records: one seeded turn per trajectory, taken round-robin over the
domains so that every domain is represented (not comparable: a subset).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from unified.config import ArgumentParser
from unified.config.cli import DefaultsHelpFormatter, plain_text
from unified.inference import PolicyRequest, SamplingConfig, parse_spec, shared_chat_model
from unified.inference.judge import make_judge
from unified.lwm.dataset import sample_one_turn_per_trajectory, to_chat
from unified.chatformat.observation import parse_observation
from unified.lwm import official
from unified.lwm.records import AWBRecord, load_records
from unified.rewards.awb_judge import ROOT_ENV, load_checkout
from unified.rewards.functions import RubricReward
from unified.rewards.verifiers import verify
from unified.store import append_jsonl, write_text_atomic
from unified.rewards.functions import SimilarityReward


def select_records(records: list[AWBRecord], limit: int | None, seed: int) -> list[AWBRecord]:
    """All records, or ``limit`` of them: one turn per trajectory, round-robin over domains."""
    if limit is None:
        return records
    by_domain: dict[str, list[AWBRecord]] = defaultdict(list)
    for r in sample_one_turn_per_trajectory(records, seed):
        by_domain[r.task].append(r)
    chosen: list[AWBRecord] = []
    queues = [by_domain[d] for d in sorted(by_domain)]
    while len(chosen) < limit and any(queues):
        for q in queues:
            if q and len(chosen) < limit:
                chosen.append(q.pop(0))
    return chosen


def _read_jsonl(path: Path) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                rows[row["sample_id"]] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut by a crash: that sample is redone
    return rows


def _append(path: Path, row: dict) -> None:
    append_jsonl(path, row)


class WorldModel:
    """Predicts observations with any chat model (:func:`unified.inference.shared_chat_model`: a local
    checkpoint batched on the process's shared copy, or an OpenAI-compatible endpoint).

    ``official_request``: an endpoint gets eval.py's request (``model``, ``messages``, ``max_tokens``,
    ``temperature``; :data:`unified.rewards.awb_judge.EVAL_PY_REQUEST_FIELDS`) and its client's
    600 s timeout and 2 retries (the body fields read from ``checkout``'s eval.py when given);
    ``chat_template_kwargs`` only when ``thinking`` is set (None: the
    template's default, what eval.py gets)."""

    def __init__(self, spec: str, *, max_new_tokens: int = official.INFER_MAX_TOKENS,
                 temperature: float = official.INFER_TEMPERATURE, batch_size: int = 8, thinking: bool | None = None,
                 official_request: bool = False, checkout: Any = None) -> None:
        self.spec, self.max_new_tokens, self.batch_size = spec, max_new_tokens, batch_size
        self.thinking = True if thinking is None else thinking  # in-process: the Qwen templates' default
        self.temperature = temperature
        self.parsed = parse_spec(spec)
        options: dict[str, Any] = {"max_batch_size": batch_size} if self.parsed.backend == "hf" else {}
        if official_request and self.parsed.is_endpoint:
            options.update(official.eval_py_endpoint_options(checkout, send_thinking=thinking is not None))
        self.model = shared_chat_model(self.parsed, sampling=SamplingConfig(max_new_tokens=max_new_tokens,
                                                                            temperature=temperature,
                                                                            thinking=self.thinking), **options)
        self.loaded = getattr(self.model, "loaded", None)

    def predict(self, messages: list[list[dict]]) -> list[str | Exception]:
        """Raw completions (reasoning kept as ``...</think>``, :func:`unified.chatformat.join_reasoning`)."""
        requests = [PolicyRequest(messages=m, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                  thinking=self.thinking) for m in messages]
        try:
            outputs = self.model.generate(requests)
        except Exception as exc:  # the whole batch failed: every sample records it
            return [exc for _ in messages]
        return [o if isinstance(o, Exception) else o.prefix + o.text for o in outputs]


def aggregate(judgments: list[dict]) -> dict[str, Any]:
    """Per-domain and overall scores from judgment rows (see the module docstring)."""
    by_domain: dict[str, list[float]] = defaultdict(list)
    for j in judgments:
        by_domain[j["domain"]].append(j["score"])
    domains = {d: {"score": sum(v) / len(v), "n": len(v)} for d, v in sorted(by_domain.items())}
    scores = [j["score"] for j in judgments]
    return {
        "overall": sum(d["score"] for d in domains.values()) / len(domains) if domains else 0.0,
        "overall_sample_weighted": sum(scores) / len(scores) if scores else 0.0,
        "domains": domains,
        "n": len(judgments),
        "judge_parse_rate": sum(j["parsed"] for j in judgments) / len(judgments) if judgments else 0.0,
        "rule_pass_rate": sum(j["rule_passed"] for j in judgments) / len(judgments) if judgments else 0.0,
    }


OFFICIAL_METRIC = ("AgentWorldBench score as eval.py computes it (0-100: (x - 1) / 4 x 100 of the mean of the "
                   "non-zero judge totals of the valid samples; a sample's total is the mean of its non-zero 1-5 "
                   "dimensions)")
SCORE_METRIC = "rubric judge score (0-100: (mean of 5 criteria - 1) / 4 x 100; 0 when the judge's answer is unparseable)"
REFERENCE_METRICS = ("lcs_f1", "token_f1")


def reference_scores(records: list[AWBRecord], predictions: dict[str, dict]) -> dict[str, Any]:
    """Judge-free scores of the predictions against the true observations (module docstring)."""
    rows = [(r, predictions[r.key]["completion"]) for r in records if r.key in predictions]
    out: dict[str, Any] = {}
    for metric in REFERENCE_METRICS:
        values = SimilarityReward(metric)([None] * len(rows), [c for _, c in rows],
                                          reference=[r.target for r, _ in rows]) if rows else []
        by_domain: dict[str, list[float]] = defaultdict(list)
        for (r, _), value in zip(rows, values):
            by_domain[r.task].append(4.0 * value)  # SimilarityReward is 25 x similarity
        domains = {d: {"score": sum(v) / len(v), "n": len(v)} for d, v in sorted(by_domain.items())}
        scores = [x for v in by_domain.values() for x in v]
        out[metric] = {"overall": sum(d["score"] for d in domains.values()) / len(domains) if domains else 0.0,
                       "overall_sample_weighted": sum(scores) / len(scores) if scores else 0.0, "domains": domains}
    out["metric"] = ("reference-based: F1 of the parsed prediction vs the true observation x100 (lcs_f1 = ROUGE-L, "
                     "token_f1 = bag of tokens; unified.rewards.similarity), no judge involved")
    return out


def _predict(records: list[AWBRecord], predictions: dict[str, dict], pred_path: Path, *, model: str, protocol: str,
             checkout, chat, max_new_tokens: int, temperature: float, batch_size: int, thinking: bool | None) -> float:
    """Predict what ``predictions`` lacks (appended to ``pred_path``); returns the seconds spent."""
    todo = [r for r in records if r.key not in predictions]
    if not todo:
        return 0.0
    world_model = WorldModel(model, max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size,
                             thinking=thinking, official_request=checkout is not None, checkout=checkout)
    seconds = 0.0
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        t0 = time.perf_counter()
        texts = world_model.predict([chat(r) for r in chunk])
        seconds += time.perf_counter() - t0
        for r, text in zip(chunk, texts):
            row = {"sample_id": r.key, "domain": r.task, "turn_idx": r.turn_idx, "protocol": protocol,
                   "completion": "" if isinstance(text, Exception) else text,
                   "error": f"{type(text).__name__}: {text}" if isinstance(text, Exception) else None}
            if protocol == "official":  # eval.py's predictions.jsonl fields too: its `judge` step reads this file
                row = {**official.job_of(r), "gen": official.official_gen(row["completion"]), **row}
            _append(pred_path, row)
            predictions[r.key] = row
    return seconds


def _check_protocol(rows: dict[str, dict], protocol: str, path: Path) -> None:
    other = sorted({row.get("protocol", "own") for row in rows.values()} - {protocol})
    if other:
        raise ValueError(f"{path}: holds {other[0]}-protocol predictions, this run is {protocol} "
                         "(give another --out, or the same --agentworld-root as before)")


def _judge_own(records, predictions, out_dir: Path, *, judge: str, judge_max_tokens: int, judge_temperature: float,
               batch_size: int, cache_dir: str | None) -> tuple[dict[str, Any], float, int]:
    keyed = {r.key: r for r in records}
    judg_path = out_dir / "judgments.jsonl"
    judgments = _read_jsonl(judg_path)
    todo = [k for k in keyed if k not in judgments]
    judge_seconds, judge_requests = 0.0, 0
    if todo:
        # a local judge on the world model's checkpoint shares its loaded copy (shared_chat_model)
        rubric = RubricReward(make_judge(judge, max_tokens=judge_max_tokens, temperature=judge_temperature,
                                         batch_size=batch_size, cache_dir=str(cache_dir or out_dir / "judge_cache")))
        for start in range(0, len(todo), batch_size):
            chunk = [keyed[k] for k in todo[start:start + batch_size]]
            completions = [predictions[r.key]["completion"] for r in chunk]
            calls_before = rubric.judge.calls
            t0 = time.perf_counter()
            breakdowns = rubric.breakdowns([to_chat(r) for r in chunk], completions,
                                           reference=[r.target for r in chunk], domain=[r.task for r in chunk])
            if rubric.judge.calls > calls_before:
                judge_seconds += time.perf_counter() - t0
                judge_requests += rubric.judge.calls - calls_before
            for r, completion, b in zip(chunk, completions, breakdowns):
                verdict = verify(parse_observation(completion), r.target, r.task)
                row = {"sample_id": r.key, "domain": r.task, "parsed": b.parsed,
                       "criteria": {c: v for c, v in b.components.items() if c in
                                    ("format", "factuality", "consistency", "realism", "quality")},
                       "reward": b.total, "score": b.components.get("score_0_100", 0.0) if b.parsed else 0.0,
                       "rule_passed": verdict.passed, "rule_check": verdict.check, "judge_detail": b.detail[:1000]}
                _append(judg_path, row)
                judgments[r.key] = row
    summary = aggregate([judgments[k] for k in keyed])
    summary["score_metric"] = SCORE_METRIC
    if summary["n"] and summary["judge_parse_rate"] == 0.0:
        summary["rubric_note"] = ("the judge wrote no parseable answer: every rubric score is 0 and measures "
                                  "nothing; read the reference-based score (or use a stronger judge)")
    return summary, judge_seconds, judge_requests


def _judge_official(checkout, records, predictions, out_dir: Path, *, judge: str, judge_max_tokens: int,
                    judge_temperature: float, judge_attempts: int, batch_size: int,
                    cache_dir: str | None) -> tuple[dict[str, Any], float, int]:
    judged_path = out_dir / "judged.jsonl"
    judged = _read_jsonl(judged_path)
    todo = [r for r in records if r.key not in judged]
    judge_seconds, judge_requests = 0.0, 0
    if todo:
        endpoint = official.eval_py_endpoint_options(checkout) if parse_spec(judge).is_endpoint else {}
        judge_model = make_judge(judge, max_tokens=judge_max_tokens, temperature=judge_temperature,
                                 batch_size=batch_size, cache_dir=str(cache_dir or out_dir / "judge_cache"), **endpoint)
        completions = {k: row["completion"] for k, row in predictions.items()}
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            t0 = time.perf_counter()
            rows, calls = official.judge_records(checkout, judge_model, chunk, completions, max_retries=judge_attempts)
            if calls:
                judge_seconds += time.perf_counter() - t0
                judge_requests += calls
            for row in rows:
                _append(judged_path, row)
                judged[row["sample_id"]] = row
    summary = official.aggregate_official([judged[r.key] for r in records], checkout.dimensions)
    summary["score_metric"] = OFFICIAL_METRIC
    summary["no_output"] = official.no_output_counts([judged[r.key] for r in records])
    if summary["n"] and not summary["valid"]:
        summary["rubric_note"] = ("no sample has a valid judge answer: the AgentWorldBench score is undefined; read "
                                  "the reference-based score (or use a stronger judge)")
    return summary, judge_seconds, judge_requests


def run(model: str, judge: str, data: str, out: str, *, limit: int | None = None, seed: int = 0,
        max_new_tokens: int = official.INFER_MAX_TOKENS, temperature: float = official.INFER_TEMPERATURE,
        judge_max_tokens: int = official.JUDGE_MAX_TOKENS, judge_temperature: float = official.JUDGE_TEMPERATURE,
        judge_attempts: int = official.JUDGE_ATTEMPTS, batch_size: int = 8, cache_dir: str | None = None,
        thinking: bool | None = None, agentworld_root: str | None = None) -> dict[str, Any]:
    """The whole evaluation; returns the summary (also written to ``out/summary.json``).

    ``agentworld_root`` (else ``$AGENTWORLD_ROOT``): a Qwen-AgentWorld checkout, the official
    protocol; none: the own protocol, not comparable."""
    checkout = load_checkout(agentworld_root)
    protocol = "official" if checkout is not None else "own"
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = select_records(load_records(data), limit, seed)

    pred_path = out_dir / "predictions.jsonl"
    predictions = _read_jsonl(pred_path)
    _check_protocol(predictions, protocol, pred_path)
    infer_seconds = _predict(records, predictions, pred_path, model=model, protocol=protocol, checkout=checkout,
                             chat=official.official_messages if checkout is not None else to_chat,
                             max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size,
                             thinking=thinking)
    judge_options = dict(judge=judge, judge_max_tokens=judge_max_tokens, judge_temperature=judge_temperature,
                         batch_size=batch_size, cache_dir=cache_dir)
    reasons = official.settings_differences(checkout, infer_max_tokens=max_new_tokens, infer_temperature=temperature,
                                            judge_max_tokens=judge_max_tokens, judge_temperature=judge_temperature,
                                            judge_attempts=judge_attempts)  # own: "no retry" is said below
    if checkout is not None:
        summary, judge_seconds, judge_requests = _judge_official(checkout, records, predictions, out_dir,
                                                                 judge_attempts=judge_attempts, **judge_options)
        summary["agentworld"] = {"root": str(checkout.root), "commit": checkout.commit,
                                 "fingerprint": checkout.fingerprint, "eval_script": "eval/eval.py"}
    else:
        summary, judge_seconds, judge_requests = _judge_own(records, predictions, out_dir, **judge_options)
        reasons.insert(0, f"no Qwen-AgentWorld checkout (${ROOT_ENV} / --agentworld-root): our own judge prompt and "
                          "<scores> parser, 0 for an unparseable answer, no retry, an unweighted domain mean; not "
                          "AgentWorldBench's eval.py")
    if checkout is not None and thinking is not None and parse_spec(model).is_endpoint:
        reasons.append(f"world-model requests carry chat_template_kwargs {{'enable_thinking': {thinking}}} "
                       "(--thinking/--no-thinking; eval.py sends none: the template's default)")
    if limit is not None:
        reasons.append(f"--limit {limit}: a seeded subset of {len(records)} records, not the whole benchmark")
    summary["protocol"] = protocol
    summary["comparable"] = not reasons
    summary["not_comparable_because"] = reasons
    summary["reference"] = reference_scores(records, predictions)
    summary.update({
        "model": model, "judge": judge, "data": str(data), "limit": limit, "seed": seed,
        "max_new_tokens": max_new_tokens, "temperature": temperature, "judge_max_tokens": judge_max_tokens,
        "judge_temperature": judge_temperature, "judge_attempts": judge_attempts if checkout is not None else 1,
        "thinking": thinking,
        "timing": {"infer_seconds": round(infer_seconds, 2), "judge_seconds": round(judge_seconds, 2),
                   "judge_requests": judge_requests,
                   "judge_samples_per_s": round(judge_requests / judge_seconds, 4) if judge_seconds else None},
    })
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _fmt(value: float | None) -> str:
    return "  n/a " if value is None else f"{value:6.2f}"


def main(argv: list[str] | None = None, prog: str = "python -m unified.lwm.evaluation") -> int:
    parser = ArgumentParser(prog=prog, description=plain_text(__doc__), formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--model", required=True, help="world model: load_checkpoint spec or openai:URL#MODEL")
    parser.add_argument("--judge", required=True, help="judge: load_checkpoint spec or openai:URL#MODEL")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "data" / "lwm"),
                        help="AgentWorldBench JSONL file or directory (default: the shipped data/lwm)")
    parser.add_argument("--out", required=True, help="output directory (predictions, judgments, summary)")
    parser.add_argument("--agentworld-root", default=None,
                        help=f"Qwen-AgentWorld checkout: score as its eval/eval.py does (default: ${ROOT_ENV}; "
                             "none: our own judge prompt, not comparable)")
    parser.add_argument("--limit", type=int, default=None, help="evaluate this many records (seeded, per domain)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the record selection (--limit: one turn per trajectory)")
    parser.add_argument("--max-new-tokens", type=int, default=official.INFER_MAX_TOKENS,
                        help="world-model prediction budget, as eval.py")
    parser.add_argument("--temperature", type=float, default=official.INFER_TEMPERATURE,
                        help="world-model temperature, as eval.py")
    parser.add_argument("--judge-max-tokens", type=int, default=official.JUDGE_MAX_TOKENS, help="judge answer budget, as eval.py")
    parser.add_argument("--judge-temperature", type=float, default=official.JUDGE_TEMPERATURE, help="judge temperature, as eval.py")
    parser.add_argument("--judge-attempts", type=int, default=official.JUDGE_ATTEMPTS,
                        help="judge attempts per sample, official protocol, as eval.py's max_retries")
    parser.add_argument("--batch-size", type=int, default=8, help="world-model requests sent together")
    parser.add_argument("--cache-dir", default=None, help="judge answer cache (default: OUT/judge_cache)")
    parser.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                        help="send the chat template's enable_thinking to the world model (default: not sent, the "
                             "template's default, as eval.py; an in-process model thinks, the Qwen default)")
    args = parser.parse_args(argv)
    summary = run(args.model, args.judge, args.data, args.out, limit=args.limit, seed=args.seed,
                  max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                  judge_max_tokens=args.judge_max_tokens, judge_temperature=args.judge_temperature,
                  judge_attempts=args.judge_attempts, batch_size=args.batch_size, cache_dir=args.cache_dir,
                  thinking=args.thinking, agentworld_root=args.agentworld_root)
    ref = summary["reference"]
    if summary["protocol"] == "official":
        print(f"lwm: AgentWorldBench (official eval.py protocol, {summary['agentworld']['root']}): overall "
              f"{_fmt(summary['overall']).strip()} (eval.py's, over {summary['valid']} valid of {summary['n']} samples; "
              f"{summary['failed']} failed); paper-style domain mean {_fmt(summary['overall_domain_mean']).strip()}")
        counts = summary["no_output"]
        print(f"  eval.py's empty-answer rule: {counts['judged_as_no_output']} judged as 'No output', "
              f"{counts['no_model_generation']} failed as 'No model generation'")
    else:
        print(f"lwm: rubric score (own judge prompt, not comparable): overall {summary['overall']:.2f} "
              f"(sample-weighted {summary['overall_sample_weighted']:.2f}) over {summary['n']} samples; judge parse "
              f"rate {summary['judge_parse_rate']:.2f}")
    print(f"lwm: reference score (LCS F1 vs the true observation, no judge): overall {ref['lcs_f1']['overall']:.2f}; "
          f"token F1 {ref['token_f1']['overall']:.2f}")
    for reason in summary["not_comparable_because"]:
        print(f"  not comparable: {reason}")
    if summary.get("rubric_note"):
        print(f"  note: {summary['rubric_note']}")
    for domain, info in summary["domains"].items():
        extra = f", {info['valid']} valid, {info['failed']} failed" if "valid" in info else ""
        print(f"  {domain:10s} judge {_fmt(info['score'])}  reference "
              f"{ref['lcs_f1']['domains'].get(domain, {}).get('score', 0.0):6.2f}  (n={info['n']}{extra})")
    print(f"  timing: {summary['timing']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
