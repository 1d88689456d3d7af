"""BFCL v4 scoring with bfcl-eval's own checkers, and its official aggregate.

Per episode (mirroring ``bfcl_eval/eval_checker/eval_runner.py``):

- AST categories: the first turn's calls as ``[{name: args}]`` through ``ast_checker``
  (``_evaluate_single_ast_entry``), against the function docs without language hints;
- relevance / irrelevance: does the first answer contain a call (``_evaluate_single_relevance_entry``);
- multi-turn: the calls of every step grouped by user turn, through ``multi_turn_checker``
  (``_evaluate_single_multi_turn_entry``; fewer turns than the ground truth = force-terminated);
- agentic (memory, web search): the last answer without calls through ``agentic_checker``
  (``_evaluate_single_agentic_entry``).

``multi_turn_checker`` executes call strings with ``eval``. It only ever receives
:func:`canonical_call` strings: rebuilt by us from a whitelisted method name and ``repr`` of
JSON values, then re-parsed with ``ast`` and checked to be exactly ``name(key=literal, ...)``.
Model text itself never reaches ``eval``.

Aggregate (``eval_runner_helper.generate_leaderboard_csv``): per category accuracy; non-live
= unweighted mean of (simple = unweighted mean of python/java/javascript, multiple, parallel,
parallel_multiple); live = count-weighted mean of the four live AST categories; irrelevance =
unweighted mean of (irrelevance, live_irrelevance); multi-turn = unweighted mean of its four;
agentic = unweighted mean of (web search = mean of base/no_snippet, memory = mean of
kv/vector/rec_sum); overall = ``calculate_percentage_weighted_accuracy`` with weights
[10, 10, 10, 30, 40] over (non-live, live, irrelevance, multi-turn, agentic). A category is
evaluated only when all its entries were; any other is N/A, as in bfcl (``get_category_score``),
and so is each group it belongs to; the overall is given only when no group is N/A (bfcl would
count the missing categories as 0, which on a partial run reads as a low score).
"""

from __future__ import annotations

import ast
import math
from typing import Any

from evaluators.bfcl_v4.isolation import import_bfcl, private_checker_namespace
from unified.types import Episode, ToolCall

AST_MODEL_NAME = "gpt-4o-2024-11-20"
"""``ast_checker`` looks the model name up in bfcl's MODEL_CONFIG_MAPPING only to decide whether
to turn ``_`` back into ``.`` in function names (FC models); a prompt-mode entry (no renaming)
matches our calls, which keep bfcl's names as given."""

OVERALL_WEIGHTS = {"non_live": 10, "live": 10, "irrelevance": 10, "multi_turn": 30, "agentic": 40}
"""``generate_leaderboard_csv``: ``calculate_percentage_weighted_accuracy(..., [10, 10, 10, 30, 40])``."""


def _literal_ok(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if value is None or isinstance(value, (str, int, bool)):
        return True
    if isinstance(value, list):
        return all(_literal_ok(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _literal_ok(v) for k, v in value.items())
    return False


def canonical_call(call: ToolCall, allowed: set[str]) -> str | None:
    """``name(key=repr(value), ...)`` for a well-formed call to an allowed name; None otherwise."""
    if call.parse_error is not None or call.name not in allowed or not call.name.isidentifier():
        return None
    if not all(isinstance(k, str) and k.isidentifier() for k in call.arguments) or not _literal_ok(call.arguments):
        return None
    text = f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"
    tree = ast.parse(text, mode="eval")
    node = tree.body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == call.name
            and not node.args):
        return None
    for keyword in node.keywords:
        ast.literal_eval(keyword.value)  # raises on anything but a literal
    return text


def decoded_ast(call_lists: list[ToolCall]) -> list[dict[str, Any]]:
    """Calls -> bfcl's decoded AST form ``[{name: {param: value}}]``."""
    return [{c.name: dict(c.arguments)} for c in call_lists if c.parse_error is None]


def turns_of(episode: Episode) -> list[list[list[ToolCall]]]:
    """The calls of every assistant step, grouped by user turn (steps without calls kept empty)."""
    turns: list[list[list[ToolCall]]] = []
    for message in episode.messages:
        if message.role == "user":
            turns.append([])
        elif message.role == "assistant" and turns:
            turns[-1].append(list(message.tool_calls))
    return turns


def final_answer(episode: Episode) -> str | None:
    answers = [m for m in episode.messages if m.role == "assistant" and not m.tool_calls]
    return answers[-1].content if answers else None


def _first_calls(episode: Episode) -> list[ToolCall]:
    for message in episode.messages:
        if message.role == "assistant":
            return list(message.tool_calls)
    return []


def score_entry(category: str, payload: dict[str, Any], episode: Episode, allowed: set[str]) -> dict[str, Any]:
    """``{"valid": bool, ...checker details}`` for one episode, by bfcl's rules for ``category``."""
    utils = import_bfcl("bfcl_eval.utils")
    if utils.is_relevance_or_irrelevance(category):
        has_call = len(decoded_ast(_first_calls(episode))) > 0
        valid = (not has_call) if "irrelevance" in category else has_call
        return {"valid": valid, "error_type": None if valid else
                ("irrelevance_error:decoder_success" if "irrelevance" in category else "relevance_error:decoder_failed")}
    if utils.is_multi_turn(category):
        return _score_multi_turn(category, payload, episode, allowed)
    if utils.is_agentic(category):
        answer = final_answer(episode)
        if answer is None:
            return {"valid": False, "error_type": "agentic:no_last_message"}
        checker = import_bfcl("bfcl_eval.eval_checker.agentic_eval.agentic_checker")
        result = checker.agentic_checker(answer, payload["ground_truth"])
        return {"valid": bool(result["valid"]), "error_type": result.get("error_type")}
    enums = import_bfcl("bfcl_eval.constants.enums")
    checker = import_bfcl("bfcl_eval.eval_checker.ast_eval.ast_checker")
    language = (enums.Language.JAVA if utils.is_java(category) else
                enums.Language.JAVASCRIPT if utils.is_js(category) else enums.Language.PYTHON)
    decoded = decoded_ast(_first_calls(episode))
    result = checker.ast_checker(payload["checker_function"], decoded, payload["ground_truth"], language,
                                 category, AST_MODEL_NAME)
    return {"valid": bool(result["valid"]), "error_type": result.get("error_type"), "error": result.get("error"),
            "decoded": decoded}


def multi_turn_decoded(episode: Episode, allowed: set[str]) -> list[list[list[str]]]:
    """Per user turn, per step with calls, the canonical call strings (bfcl's decoded form)."""
    out = []
    for turn in turns_of(episode):
        steps = []
        for calls in turn:
            strings = [s for s in (canonical_call(c, allowed) for c in calls) if s is not None]
            if strings:
                steps.append(strings)
        out.append(steps)
    return out


def _score_multi_turn(category: str, payload: dict[str, Any], episode: Episode, allowed: set[str]) -> dict[str, Any]:
    truth = payload["ground_truth"]
    decoded = multi_turn_decoded(episode, allowed)
    if len(decoded) != len(truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error": f"{len(decoded)} turns recorded, ground truth has {len(truth)}"}
    checker = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    entry = dict(payload["entry"])
    with private_checker_namespace() as model_name:
        result = checker.multi_turn_checker(decoded, truth, entry, category, model_name)
    return {"valid": bool(result["valid"]), "error_type": result.get("error_type"),
            "error": result.get("error_message"), "decoded": decoded}


# --------------------------------------------------------------------------------------
# aggregate


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


GROUP_MEMBERS: dict[str, list[str]] = {
    "non_live": ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"],
    "live": ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"],
    "irrelevance": ["irrelevance", "live_irrelevance"],
    "multi_turn": ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"],
    "agentic": ["web_search_base", "web_search_no_snippet", "memory_kv", "memory_vector", "memory_rec_sum"],
}
"""The categories behind each weighted group of the overall (``generate_leaderboard_csv``)."""


def aggregate_categories(per_category: dict[str, tuple[float, int]], sizes: dict[str, int]) -> dict[str, Any]:
    """bfcl's leaderboard arithmetic over ``{category: (accuracy, count)}`` (accuracies 0..1).

    ``sizes``: scored entries per category in the dataset. A category counts as evaluated only
    when all its entries were (bfcl refuses a partial category unless ``--partial-eval``); any
    other is "N/A" as in bfcl's ``get_category_score``, and so is every group it belongs to.
    The overall (weights ``OVERALL_WEIGHTS``) is given only when every group is complete;
    otherwise it is None: bfcl would count the missing categories as 0, which reads as a
    (meaningless) low score on a partial run.
    """

    def full(c: str) -> bool:
        return c in per_category and per_category[c][1] >= sizes.get(c, 0) > 0

    def cat(c: str) -> tuple[float | None, int]:
        return (per_category[c][0], sizes[c]) if full(c) else (None, sizes.get(c, 0))

    def unweighted(parts: list[tuple[float | None, int]]) -> tuple[float | None, int]:
        n = sum(k for _, k in parts)
        if any(a is None for a, _ in parts):
            return None, n
        return _mean([a for a, _ in parts]), n  # type: ignore[misc]

    def weighted(parts: list[tuple[float | None, int]]) -> tuple[float | None, int]:
        n = sum(k for _, k in parts)
        if any(a is None for a, _ in parts) or not n:
            return None, n
        return sum(a * k for a, k in parts) / n, n  # type: ignore[operator]

    simple = unweighted([cat("simple_python"), cat("simple_java"), cat("simple_javascript")])
    non_live = unweighted([simple, cat("multiple"), cat("parallel"), cat("parallel_multiple")])
    live = weighted([cat(c) for c in GROUP_MEMBERS["live"]])
    irrelevance = unweighted([cat("irrelevance"), cat("live_irrelevance")])
    multi_turn = unweighted([cat(c) for c in GROUP_MEMBERS["multi_turn"]])
    web = unweighted([cat("web_search_base"), cat("web_search_no_snippet")])
    memory = unweighted([cat("memory_kv"), cat("memory_vector"), cat("memory_rec_sum")])
    agentic = unweighted([web, memory])
    groups = {"non_live": non_live, "live": live, "irrelevance": irrelevance, "multi_turn": multi_turn,
              "agentic": agentic}
    complete = all(a is not None for a, _ in groups.values())
    overall = (sum(groups[g][0] * w for g, w in OVERALL_WEIGHTS.items()) / sum(OVERALL_WEIGHTS.values())  # type: ignore[operator]
               if complete else None)

    def shown(value: float | None) -> dict[str, Any]:
        return {"accuracy": None if value is None else 100 * value,
                "display_accuracy": "N/A" if value is None else 100 * value, "complete": value is not None}

    incomplete = [c for cats in GROUP_MEMBERS.values() for c in cats if not full(c)]
    return {
        "overall": None if overall is None else 100 * overall,
        "complete": complete,
        "groups": {g: shown(a) for g, (a, _) in groups.items()},
        "subgroups": {"simple": shown(simple[0]), "web_search": shown(web[0]), "memory": shown(memory[0])},
        "evaluated_groups": [g for g, (a, _) in groups.items() if a is not None],
        "incomplete_categories": {c: f"{per_category.get(c, (0, 0))[1]} of {sizes.get(c, 0)}" for c in incomplete},
    }
