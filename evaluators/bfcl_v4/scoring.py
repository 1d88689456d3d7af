"""BFCL v4 scoring with bfcl-eval's own checkers, and its official aggregate.

Per episode (mirroring ``bfcl_eval/eval_checker/eval_runner.py``):

- AST categories: the first turn's calls as ``[{name: args}]`` through ``ast_checker``
  (``_evaluate_single_ast_entry``), against the function docs without language hints;
- relevance / irrelevance: does the first answer contain a call (``_evaluate_single_relevance_entry``);
- multi-turn: the calls of every step grouped by user turn, through ``multi_turn_checker``
  (``_evaluate_single_multi_turn_entry``; fewer turns than the ground truth = force-terminated);
- agentic (memory, web search): bfcl's own ``_evaluate_single_agentic_entry``, which checks the raw
  text of the last step it cannot decode into calls with ``agentic_checker`` (a step of answer text
  plus a malformed call counts: :func:`agentic_steps`).

``multi_turn_checker`` executes call strings with ``eval``. It receives the strings bfcl's own
``convert_to_function_call`` builds from the parsed calls (:func:`step_call_strings`), each
passed through :func:`checker_call`: one that cannot compile (nothing runs), or exactly
``name(key=literal, ...)`` with ``name`` a backend method or a name that resolves to nothing;
anything else is replaced by a call of an undefined name. Model text never reaches ``eval``
as code that could run, and the replay runs under :func:`evaluators.bfcl_v4.guard.guarded_calls`.

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
from typing import Any

from evaluators.bfcl_v4.guard import argument_problem, guarded_calls
from evaluators.bfcl_v4.isolation import import_bfcl, private_checker_namespace
from unified.types import Episode, ToolCall

AST_MODEL_NAME = "gpt-4o-2024-11-20"
"""``ast_checker`` looks the model name up in bfcl's MODEL_CONFIG_MAPPING only to decide whether
to turn ``_`` back into ``.`` in function names (FC models); a prompt-mode entry (no renaming)
matches our calls, which keep bfcl's names as given."""

OVERALL_WEIGHTS = {"non_live": 10, "live": 10, "irrelevance": 10, "multi_turn": 30, "agentic": 40}
"""``generate_leaderboard_csv``: ``calculate_percentage_weighted_accuracy(..., [10, 10, 10, 30, 40])``."""


_INERT_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.UnaryOp, ast.USub, ast.UAdd, ast.Load)
_UNDEFINED = "_unified_undefined_function_"
"""What a call bfcl would have evaluated to something we must not run becomes (see ``checker_call``)."""


def _resolvable(name: str) -> bool:
    """Would ``eval`` inside bfcl's ``multi_turn_utils`` find ``name`` (a module global, one of the
    backend instances our private model names create, or a builtin)?"""
    import builtins

    utils = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    return name in vars(utils) or name.startswith("unified_") or hasattr(builtins, name)


def _inert(value: ast.AST) -> bool:
    """A keyword value made of literals only (``nan``/``inf`` as bfcl's ``repr`` writes them: names
    that fail to resolve, as in bfcl)."""
    for node in ast.walk(value):
        if isinstance(node, ast.Name):
            if node.id not in ("nan", "inf") or _resolvable(node.id):
                return False
        elif not isinstance(node, _INERT_NODES):
            return False
    return True


def _compiles(text: str) -> bool:
    try:
        compile(text, "<bfcl-call>", "eval")
        return True
    except (SyntaxError, ValueError):
        return False


def checker_call(text: str, methods: set[str]) -> tuple[str, bool]:
    """``(string for bfcl's multi_turn_checker, exact)`` for one call string bfcl decoded.

    bfcl ``eval``s every decoded call (``execute_multi_turn_func_call``), after prefixing the
    involved classes' method names with their instance. We hand it the very string bfcl would
    (``exact=True``) when evaluating it can only do what bfcl's scoring of it does without running
    anything else: it does not compile (bfcl records the SyntaxError, e.g. a Python keyword as an
    argument name), or it is ``name(key=literal, ...)`` where ``name`` is a method of the involved
    classes (executed on the backend) or resolves to nothing (bfcl records ``name '...' is not
    defined``). Anything else (a builtin such as ``open``, a dotted name, nested calls) would run
    arbitrary code under bfcl, so it becomes a call of an undefined name (``exact=False``): bfcl's
    checker then records a NameError for it, where bfcl itself may have got another error or
    executed something. A method call whose arguments :func:`evaluators.bfcl_v4.guard.argument_problem`
    refuses (a ten-million-digit power) is replaced the same way: the episode refused it too.
    """
    utils = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        processed = utils._process_method_calls(text, {m: "bfcl_instance" for m in methods})
        if not _compiles(processed):
            return text, True
        return f"{_UNDEFINED}()", False
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args
            and all(k.arg is not None and _inert(k.value) for k in node.keywords)
            and (node.func.id in methods or not _resolvable(node.func.id))
            and not (node.func.id in methods and argument_problem(node.func.id, _literal_kwargs(node)))):
        return text, True
    return f"{_UNDEFINED}()", False


def _literal_kwargs(node: ast.Call) -> dict[str, Any]:
    """The keyword values of an inert call that are Python literals (``nan``/``inf`` names left out)."""
    out = {}
    for keyword in node.keywords:
        try:
            out[str(keyword.arg)] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
    return out


def step_call_strings(calls: list[ToolCall], methods: set[str]) -> tuple[list[str], int]:
    """One step's calls as bfcl's checker receives them, and how many had to be approximated.

    Like bfcl's Qwen FC handler (``qwen_fc.py``: ``_extract_tool_calls`` keeps the calls whose JSON
    parsed, ``decode_execute`` -> ``convert_to_function_call``): malformed calls are left out;
    if converting raises, bfcl's decoding of the step fails and the step is ignored (``[]``).
    Calls to functions that are not offered are kept: bfcl executes them and records the error.
    """
    decodable = [c for c in calls if c.parse_error is None]
    if not decodable:
        return [], 0
    convert = import_bfcl("bfcl_eval.model_handler.utils").convert_to_function_call
    try:
        strings = convert([{c.name: dict(c.arguments)} for c in decodable])
    except Exception:
        return [], 0
    checked = [checker_call(text, methods) for text in strings]
    return [text for text, _ in checked], sum(1 for _, exact in checked if not exact)


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


class _DecodedStep(list):
    """The call strings of a step with at least one decodable call."""


class _StepDecoder:
    """The handler ``_evaluate_single_agentic_entry`` decodes each step with. As bfcl's Qwen FC
    handler (``decode_execute``: the calls whose JSON parsed, through ``convert_to_function_call``),
    from the calls we parsed (:func:`step_call_strings`); a step none of whose calls decodes is its
    raw text, whose decoding fails, so bfcl takes it as a message."""

    def decode_execute(self, result: Any, has_tool_call_tag: bool = False) -> list[str]:
        if isinstance(result, _DecodedStep):
            return list(result)
        raise ValueError("no call of this step decodes")


_QWEN_FC: Any = None


def _step_text(completion: str) -> str:
    """A step's text as bfcl's Qwen FC handler records it (``_parse_query_response_prompting``'s
    ``model_responses``: the completion after the reasoning, tool-call markup kept)."""
    global _QWEN_FC
    from types import SimpleNamespace

    if _QWEN_FC is None:
        module = import_bfcl("bfcl_eval.model_handler.local_inference.qwen_fc")
        _QWEN_FC = module.QwenFCHandler("Qwen/Qwen3-8B", 0.0, "Qwen/Qwen3-8B-FC", True)
    response = SimpleNamespace(choices=[SimpleNamespace(text=completion)],
                               usage=SimpleNamespace(prompt_tokens=0, completion_tokens=0))
    return _QWEN_FC._parse_query_response_prompting(response)["model_responses"]


def agentic_steps(episode: Episode, methods: set[str]) -> list[Any]:
    """The episode's steps as bfcl's agentic entry holds them (``model_result_list[0]``): a
    :class:`_DecodedStep` per step with a decodable call, else the step's raw text. An episode
    without recorded steps uses its assistant messages (content and calls)."""
    steps = [(s.completion, s.tool_calls) for s in episode.steps] or [
        (m.content, m.tool_calls) for m in episode.messages if m.role == "assistant"]
    out: list[Any] = []
    for completion, calls in steps:
        strings, _ = step_call_strings(list(calls), methods)
        out.append(_DecodedStep(strings) if strings else _step_text(completion))
    return out


def score_agentic(category: str, payload: dict[str, Any], episode: Episode, methods: set[str]) -> dict[str, Any]:
    """``{"valid", "error_type"}`` from bfcl's ``_evaluate_single_agentic_entry`` on :func:`agentic_steps`."""
    runner = import_bfcl("bfcl_eval.eval_checker.eval_runner")
    verdict = runner._evaluate_single_agentic_entry(_StepDecoder(), payload.get("id", ""),
                                                    [agentic_steps(episode, methods)], payload["ground_truth"],
                                                    {"question": []}, AST_MODEL_NAME, category)
    error = verdict.get("error") or {}
    return {"valid": bool(verdict["valid"]), "error_type": error.get("error_type")}


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
        return score_agentic(category, payload, episode, allowed)
    enums = import_bfcl("bfcl_eval.constants.enums")
    checker = import_bfcl("bfcl_eval.eval_checker.ast_eval.ast_checker")
    language = (enums.Language.JAVA if utils.is_java(category) else
                enums.Language.JAVASCRIPT if utils.is_js(category) else enums.Language.PYTHON)
    decoded = decoded_ast(_first_calls(episode))
    result = checker.ast_checker(payload["checker_function"], decoded, payload["ground_truth"], language,
                                 category, AST_MODEL_NAME)
    return {"valid": bool(result["valid"]), "error_type": result.get("error_type"), "error": result.get("error"),
            "decoded": decoded}


def multi_turn_decoded(episode: Episode, methods: set[str]) -> tuple[list[list[list[str]]], int]:
    """Per user turn, per step with decodable calls, the call strings bfcl's checker receives
    (:func:`step_call_strings`), and the number of calls approximated for safety."""
    out, approximated = [], 0
    for turn in turns_of(episode):
        steps = []
        for calls in turn:
            strings, n = step_call_strings(calls, methods)
            approximated += n
            if strings:
                steps.append(strings)
        out.append(steps)
    return out, approximated


def _score_multi_turn(category: str, payload: dict[str, Any], episode: Episode, allowed: set[str]) -> dict[str, Any]:
    truth = payload["ground_truth"]
    decoded, approximated = multi_turn_decoded(episode, allowed)
    if len(decoded) != len(truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error": f"{len(decoded)} turns recorded, ground truth has {len(truth)}"}
    checker = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    entry = dict(payload["entry"])
    with private_checker_namespace() as model_name, guarded_calls():
        result = checker.multi_turn_checker(decoded, truth, entry, category, model_name)
    return {"valid": bool(result["valid"]), "error_type": result.get("error_type"),
            "error": result.get("error_message"), "decoded": decoded, "approximated_calls": approximated or None}


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
