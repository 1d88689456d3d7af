"""AgentWorldBench scored as its official ``eval/eval.py`` scores it (QwenLM/Qwen-AgentWorld).

The judge prompts, the judge user template, both parsers and the task configs are the
checkout's, called at run time (:mod:`unified.rewards.awb_judge`); this module holds only the
bookkeeping around them, written for this library:

- requests (both steps): eval.py's body, ``model``, ``messages``, ``max_tokens``, ``temperature``
  and nothing else, with its OpenAI client's 600 s timeout and 2 retries
  (:func:`eval_py_endpoint_options`);
- inference (eval.py ``infer``): the chat is ``[system: system_str]`` (left out when empty),
  then ``[user: prompt[i]] [assistant: response[i]]`` for i < t-1, then ``[user: prompt[t-1]]``
  (:attr:`unified.lwm.records.AWBRecord.action`); ``max_tokens`` 32768, temperature 0.6;
- ``gen`` is what eval.py's ``infer`` keeps, the server's ``message.content``
  (:func:`official_gen`): for an endpoint's answer whose reasoning came back apart (our completion
  joins it as ``R\n</think>\n\n`` + content), the content exactly as sent; otherwise the raw
  completion, thinking included (eval.py's ``parse_model_output`` removes it, an unclosed
  ``<think>`` up to the end). An empty ``gen`` is eval.py's "No model generation": that sample
  has failed without a judge call. A non-empty one whose parsed prediction is empty (a blank
  answer after the reasoning, a ``<think>`` never closed: a model that loops or runs out of
  tokens) is judged with the parser's ``"No output"`` as the prediction, as eval.py judges it,
  and counted (:func:`no_output_counts`, the summary's ``no_output``);
- judge (eval.py ``judge``): the checkout's messages for the job and the prediction its output
  parser took from ``gen``; up to 3 attempts; a sample none of whose attempts parses has failed;
- aggregate (eval.py ``score``), for domain d with valid (not failed) samples V_d and each
  dimension k in format, factuality, consistency, realism, quality and ``total_score``::

      norm(x)        = (x - 1) / 4 * 100
      domain_d[k]    = norm(mean of v_ik over i in V_d with v_ik != 0)   (norm(0) when none)
      overall        = norm(mean of total_i over all i in V (all domains) with total_i != 0)
      overall_domain_mean = mean_d domain_d[total_score]

  ``overall`` is eval.py's "Overall" (pooled over samples); ``overall_domain_mean`` is the
  paper table's Overall column (the unweighted mean of the domain scores), reported beside it.
  A domain without a valid sample has no score and is left out of both, as eval.py leaves it out.

The judged rows are written as eval.py writes ``judged.jsonl`` (the record's fields, ``gen``, the
dimension scores, ``total_score``, ``failed``), so ``python eval/eval.py score --predictions
OUT/judged.jsonl`` prints the same numbers from the checkout's own aggregation.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean
from typing import Any

from unified.chatformat.reasoning import THINK_CLOSE, THINK_OPEN
from unified.lwm.records import AWBRecord
from unified.rewards.awb_judge import (EVAL_PY_HTTP_RETRIES, EVAL_PY_REQUEST_FIELDS, EVAL_PY_TIMEOUT_S,
                                       AgentWorldCheckout, judge_with_retries, normalise)

DIMENSIONS = ("format", "factuality", "consistency", "realism", "quality")
"""eval.py's SCORE_DIMENSIONS, for aggregating judged rows without a checkout (checked against it when one is loaded)."""
INFER_MAX_TOKENS, INFER_TEMPERATURE = 32768, 0.6
JUDGE_MAX_TOKENS, JUDGE_TEMPERATURE, JUDGE_ATTEMPTS = 32768, 0.6, 3
"""eval.py's defaults (``run_inference`` / ``run_judge``), our defaults too; a loaded checkout's own are
compared with the settings of a run (:func:`settings_differences`)."""


def eval_py_endpoint_options(checkout: AgentWorldCheckout | None = None, *, send_thinking: bool = False
                             ) -> dict[str, Any]:
    """Endpoint options (:class:`unified.inference.openai_backend.OpenAIPolicy`) that make our requests
    eval.py's: its body fields only (the checkout's, read from its source; else
    :data:`EVAL_PY_REQUEST_FIELDS`), plus ``chat_template_kwargs`` when ``send_thinking`` (a user's
    explicit choice, named in ``not_comparable_because``), its client's timeout and retries."""
    declared = checkout.defaults.request_fields if checkout is not None else EVAL_PY_REQUEST_FIELDS
    fields = tuple(declared) + (("chat_template_kwargs",) if send_thinking else ())
    return {"request_fields": fields, "timeout_s": EVAL_PY_TIMEOUT_S, "max_retries": EVAL_PY_HTTP_RETRIES}


def official_messages(record: AWBRecord) -> list[dict[str, str]]:
    """The world model's chat for ``record`` as eval.py's ``infer`` builds it (module docstring)."""
    messages = [{"role": "system", "content": record.system_str}] if record.system_str else []
    for action, observation in record.history:
        messages += [{"role": "user", "content": action}, {"role": "assistant", "content": observation}]
    messages.append({"role": "user", "content": record.action})
    return messages


NO_OUTPUT = "No output"
"""What eval.py's ``parse_model_output`` returns for a generation with nothing left after its thinking."""
NO_GENERATION = "No model generation"
"""eval.py's ``error_message`` of a sample whose ``gen`` is empty (failed, never judged)."""
JOINED = "\n" + THINK_CLOSE + "\n\n"
"""How an endpoint's answer joins ``reasoning_content`` to ``content`` (:func:`unified.chatformat.join_reasoning`)."""


def official_gen(completion: str) -> str:
    """eval.py's ``gen`` for a raw completion: the server's ``content`` (module docstring).

    An endpoint's split answer (``R\n</think>\n\nC``, not opening with ``<think>``) gives ``C`` as
    sent, ``""`` when the server sent none; any other completion is kept whole (an unclosed
    ``<think>`` included), since eval.py's own parser removes the thinking."""
    text = completion or ""
    if JOINED in text and not text.lstrip().startswith(THINK_OPEN):
        return text.split(JOINED, 1)[1]
    return text


def no_output_counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many judged rows eval.py's rule applied to: judged as ``"No output"`` / failed as "No model generation"."""
    judged = sum(1 for r in rows if r.get("extracted_output") == NO_OUTPUT)
    empty = sum(1 for r in rows if r.get("error_message") == NO_GENERATION)
    return {"judged_as_no_output": judged, "no_model_generation": empty,
            "rule": ("eval.py: an empty gen fails unjudged ('No model generation'); a gen with nothing left after "
                     "its thinking (blank answer, unclosed <think>) is judged with the prediction 'No output'")}


def job_of(record: AWBRecord) -> dict[str, Any]:
    """The record as an eval.py job (its JSON fields as the file has them, extra ones included)."""
    return record.fields()


def judge_records(checkout: AgentWorldCheckout, judge, records: list[AWBRecord], completions: dict[str, str], *,
                  max_retries: int = JUDGE_ATTEMPTS) -> tuple[list[dict[str, Any]], int]:
    """eval.py's ``judge`` over ``records`` (``completions``: sample key -> raw completion); returns the
    judged rows (eval.py's ``judged.jsonl`` fields plus ``sample_id``, ``domain``, ``attempts``) and the
    number of judge requests that reached the model."""
    rows: list[dict[str, Any]] = []
    requests, asked = [], []
    for record in records:
        gen = official_gen(completions.get(record.key, ""))
        row = {**job_of(record), "gen": gen, "sample_id": record.key, "domain": record.task}
        rows.append(row)
        if not gen:
            row.update(failed=1.0, error_message=NO_GENERATION, attempts=0)
            continue
        subtask = checkout.subtask(row)
        row["extracted_output"] = checkout.parse_prediction(gen, subtask)
        requests.append((checkout.judge_messages(row, row["extracted_output"]), subtask))
        asked.append(row)
    verdicts, calls = judge_with_retries(checkout, judge, requests, max_retries=max_retries)
    for row, verdict in zip(asked, verdicts):
        row["attempts"] = verdict.attempts
        if verdict.success:
            scores = verdict.parsed.get("scores", {})
            row.update({"total_score": verdict.parsed.get("total_score", 0.0),
                        **{k: scores.get(k, 0) for k in checkout.dimensions}, "failed": 0.0,
                        "strengths": verdict.parsed.get("strengths", []),
                        "weaknesses": verdict.parsed.get("weaknesses", []),
                        "judge_raw_output": verdict.parsed.get("judge_raw_output", "")})
        else:
            row.update(total_score=0, failed=1.0, error_message=f"Judge scoring failed: {verdict.error}")
    return rows, calls


def subtask_of(row: dict[str, Any]) -> str:
    """eval.py's subtask of a job: the last ``/``-part of its ``task`` (``mcp`` when absent)."""
    task = str(row.get("task", "mcp"))
    return task.split("/")[-1]


def aggregate_official(rows: list[dict[str, Any]], dimensions: tuple[str, ...] | list[str] = DIMENSIONS
                       ) -> dict[str, Any]:
    """Per-domain and overall scores of judged rows, eval.py's ``score`` (module docstring)."""
    by_domain: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_domain[subtask_of(row)].append(row)
    domains: dict[str, dict[str, Any]] = {}
    pooled: list[float] = []
    for domain in sorted(by_domain):
        group = by_domain[domain]
        valid = [r for r in group if r.get("failed", 1.0) == 0.0]
        entry: dict[str, Any] = {"n": len(group), "valid": len(valid), "failed": len(group) - len(valid),
                                 "score": None, "dimensions": {}}
        if valid:
            for key in [*dimensions, "total_score"]:
                values = [r.get(key, 0) for r in valid if r.get(key, 0) != 0]
                entry["dimensions"][key] = normalise(mean(values) if values else 0.0)
                if key == "total_score":
                    pooled.extend(values)
            entry["score"] = entry["dimensions"]["total_score"]
        domains[domain] = entry
    scored = [d["score"] for d in domains.values() if d["score"] is not None]
    return {
        "overall": normalise(mean(pooled)) if pooled else None,
        "overall_domain_mean": mean(scored) if scored else None,
        "domains": domains,
        "n": len(rows),
        "valid": len(pooled),
        "failed": len(rows) - len(pooled),
    }


def settings_differences(checkout: AgentWorldCheckout | None, *, infer_max_tokens: int, infer_temperature: float,
                         judge_max_tokens: int, judge_temperature: float, judge_attempts: int) -> list[str]:
    """How a run's budgets and temperatures differ from eval.py's defaults (the checkout's own, else ours)."""
    d = checkout.defaults if checkout is not None else None
    official = {"world-model max_tokens": d.infer_max_tokens if d else INFER_MAX_TOKENS,
                "world-model temperature": d.infer_temperature if d else INFER_TEMPERATURE,
                "judge max_tokens": d.judge_max_tokens if d else JUDGE_MAX_TOKENS,
                "judge temperature": d.judge_temperature if d else JUDGE_TEMPERATURE,
                "judge attempts": d.judge_max_retries if d else JUDGE_ATTEMPTS}
    used = {"world-model max_tokens": infer_max_tokens, "world-model temperature": infer_temperature,
            "judge max_tokens": judge_max_tokens, "judge temperature": judge_temperature,
            "judge attempts": judge_attempts}
    return [f"{name} {used[name]:g} (eval.py: {official[name]:g})" for name in official
            if float(used[name]) != float(official[name])]
