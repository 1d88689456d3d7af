"""The BFCL v4 adapter (entry point ``bfcl_v4``): tasks, environments, scoring, aggregate.

Config (``--set benchmarks.bfcl_v4.KEY=VALUE`` or a recipe):

- ``categories``: bfcl category names or collections (``all`` = every scoring category,
  ``multi_turn``, ``live``, ``non_live``, ``memory``, ``web_search``, ``agentic``, ...);
  ``split`` (``--split``) does the same;
- ``limit_order``: ``round_robin`` (default: ``--limit N`` takes N tasks across categories)
  or ``per_category`` (N per category);
- ``inference``: ``bfcl`` (default) runs episodes under bfcl's own rules
  (``model_handler/base_handler.py``, ``inference_multi_turn_FC``): up to
  ``MAXIMUM_STEP_LIMIT`` (read from bfcl-eval, 20) executed steps per user turn, the episode
  force-quit at the next one, no cap on steps per episode; a step whose calls are all malformed
  ends the turn; calls to functions not offered are executed like bfcl does (a method of the
  involved classes runs, anything else is bfcl's "not defined" error). ``unified`` keeps the
  run's ``--max-turns``/``--max-steps-per-turn`` and the loop's parse-error observations.
  Still different from bfcl: the run's per-episode token and wall-time limits apply (episodes
  they cut are counted in the aggregate), and in a step mixing malformed and well-formed calls
  the agent sees an error for the malformed ones where bfcl's Qwen handler drops them silently.

Web-search tasks need ``SERPAPI_API_KEY`` (bfcl's WebSearchAPI calls SerpAPI); without it
they are recorded as skipped with that reason.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

from evaluators.bfcl_v4 import data, gold, scoring
from evaluators.bfcl_v4.environment import BFCLEnvironment, import_backend_modules
from evaluators.bfcl_v4.isolation import import_bfcl
from unified.benchmarks.contract import Adapter, PaperReference, RunContext, Task
from unified.types import Episode, EpisodeResult, ToolCall


NO_EPISODE_CAP = 10**9
"""bfcl has no per-episode cap on policy calls (only the per-turn step limit)."""


@dataclass
class BFCLConfig:
    """Settings of the BFCL v4 adapter (``--set benchmarks.bfcl_v4.KEY=VALUE``; module docstring)."""

    categories: list[str] | str | None = None
    """bfcl category names or collections, a list or comma-separated (None: ``all``, every scoring
    category); ``--split`` does the same for one run."""
    limit_order: Literal["round_robin", "per_category"] = "round_robin"
    """How ``--limit N`` picks tasks: N across categories in turn, or N per category."""
    inference: Literal["bfcl", "unified"] = "bfcl"
    """Whose episode rules apply: bfcl's own (step limit per turn, malformed step ends the turn) or
    the run's ``--max-turns``/``--max-steps-per-turn`` and the loop's parse-error observations."""


class BFCLAdapter(Adapter):
    name = "bfcl_v4"
    suites = ("ood",)
    suite_position = 7
    world_model_domain = "mcp"
    paper_reference = PaperReference("BFCL v4, overall (1 rollout)", 62.29, 71.25)
    runs_default = 1
    Config = BFCLConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        import_bfcl("bfcl_eval.utils")  # fails as BenchmarkUnavailable when bfcl-eval is missing
        self.categories = data.resolve_categories(self.settings.categories)

    def agent_limits(self, limits: Any) -> Any:
        """bfcl's limits (``inference=bfcl``): MAXIMUM_STEP_LIMIT executed steps per user turn (the
        step after the limit is still asked and executed, then the episode is force-quit, so
        ``MAXIMUM_STEP_LIMIT + 1`` policy calls), no cap on calls per episode."""
        if self.settings.inference != "bfcl":
            return limits
        step_limit = import_bfcl("bfcl_eval.constants.default_prompts").MAXIMUM_STEP_LIMIT
        return dataclasses.replace(limits, max_steps_per_turn=step_limit + 1, max_turns=NO_EPISODE_CAP)

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        categories = data.resolve_categories(split) if split else self.categories
        tasks = data.select_tasks(categories, limit, self.settings.limit_order)
        import_backend_modules(tasks)  # on this thread, before episodes open on worker threads
        return tasks

    def open(self, task: Task, *, run: RunContext = RunContext()) -> BFCLEnvironment:
        return BFCLEnvironment(task, run.work_dir, bfcl_inference=self.settings.inference == "bfcl")

    def score(self, task: Task, episode: Episode, env: BFCLEnvironment) -> EpisodeResult:  # type: ignore[override]
        category = task.payload["category"]
        if task.payload.get("prereq"):
            env.flush_memory()
            return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=0.0,
                                 details={"category": category, "prereq": True, "scored": False})
        allowed = set(env.methods)
        verdict = scoring.score_entry(category, task.payload, episode, allowed)
        details = {"category": category, "group": task.group, "stop_reason": episode.stop_reason,
                   **{k: v for k, v in verdict.items() if k != "valid" and v is not None}}
        if why := gold.unpassable_reason(task.payload):
            details["unpassable"] = why
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial,
                             score=1.0 if verdict["valid"] else 0.0, passed=bool(verdict["valid"]),
                             details=_jsonable(details))

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        by_category: dict[str, list[float]] = defaultdict(list)
        errors = skipped = 0
        for r in results:
            if r.details.get("prereq"):
                continue
            if r.skipped is not None:
                skipped += 1
                continue
            category = r.details.get("category") or _category_of(r.task_id)
            if r.error is not None:
                errors += 1
            by_category[category].append(r.score)
        per_category = {c: (sum(v) / len(v), len(v)) for c, v in by_category.items()}
        sizes = data.dataset_sizes(data.resolve_categories("all"))
        official = scoring.aggregate_categories(per_category, sizes)
        n = sum(k for _, k in per_category.values())
        reasons = []
        if not official["complete"]:
            missing = official["incomplete_categories"]
            listed = ", ".join(f"{c} ({v})" for c, v in list(missing.items())[:6]) + (" ..." if len(missing) > 6 else "")
            reasons.append(f"partial: bfcl's overall needs every category in full; incomplete: {listed}")
        cut = sum(1 for r in results if r.details.get("stop_reason") in ("max_tokens", "timeout", "max_turns"))
        if cut:
            reasons.append(f"{cut} episodes cut by our token/time/turn limits, which bfcl does not have")
        if skipped_web := sum(1 for r in results if r.skipped is not None and "web search" in r.skipped):
            reasons.append(f"key missing: web search (SERPAPI_API_KEY), {skipped_web} tasks skipped")
        if self.settings.inference != "bfcl":
            reasons.append("inference=unified: our loop's turn/step limits and parse-error rule, not bfcl's")
        unpassable = {r.task_id: r.details["unpassable"] for r in results if r.details.get("unpassable")}
        if official["complete"]:
            score, metric = official["overall"], "BFCL v4 overall (%), official weights"
        else:
            score = 100.0 * sum(a * k for a, k in per_category.values()) / n if n else 0.0
            metric = (f"accuracy over the {n} tasks run (%); not BFCL's overall, which needs every category "
                      "(N/A here)")
        if unpassable and n:
            metric += f"; {len(unpassable)} task(s) no faithful answer passes (ceiling {100.0 * (n - len(unpassable)) / n:.2f}%)"
        return {
            "score": score,
            "metric": metric,
            "overall": official["overall"] if official["complete"] else "N/A",
            "complete": official["complete"],
            "comparable": official["complete"] and self.settings.inference == "bfcl",
            "inference": self.settings.inference,
            "not_comparable_because": reasons,
            "groups": official["groups"],
            "subgroups": official["subgroups"],
            "categories": {c: {"accuracy": 100 * a, "n": k, "size": sizes.get(c), "complete": k >= sizes.get(c, 0)}
                           for c, (a, k) in sorted(per_category.items())},
            "n": n,
            "errors": errors,
            "skipped": skipped,
            "unpassable": {"tasks": unpassable, "note": (
                f"{len(unpassable)} of the {n} tasks run have a ground truth bfcl's checker rejects (no faithful "
                "answer passes them; gold scores 0 there, as any model does): the best reachable accuracy on this "
                f"selection is {100.0 * (n - len(unpassable)) / n:.2f}%") if unpassable and n else None},
        }

    # ----------------------------------------------------------------------------------
    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        """The ground truth as calls: multi-turn call strings (positional arguments bound by the
        backend method's signature), single-turn possible answers (first allowed value; for Java,
        written as the Java source text bfcl's checker reads back: :mod:`evaluators.bfcl_v4.gold`)."""
        truth = task.payload.get("ground_truth")
        category = task.payload["category"]
        utils = import_bfcl("bfcl_eval.utils")
        if utils.is_relevance_or_irrelevance(category):
            if "irrelevance" in category:
                return [[]]
            first = task.payload["entry"]["function"][0]  # relevance: any call of an offered function
            return [[ToolCall(name=first["name"], arguments={}, id="call_0")]]
        if utils.is_multi_turn(category):
            signatures = _backend_signatures(task.payload["entry"]["involved_classes"])
            return [[_call_from_string(s, signatures, i) for i, s in enumerate(turn)] for turn in truth]
        if utils.is_agentic(category):
            return [[]]
        docs = {f.get("name"): f for f in task.payload.get("checker_function") or []}
        calls = []
        for i, item in enumerate(truth):
            (name, params), = item.items()
            args = {k: v for k, v in ((k, _pick(o)) for k, o in params.items()) if v is not None}
            if utils.is_java(category) and name in docs:  # typed values as Java source text (gold.py)
                args = gold.java_arguments(docs[name], args)
            calls.append(ToolCall(name=name, arguments=args, id=f"call_{i}"))
        return [calls]

    def gold_answer(self, task: Task) -> str | None:
        truth = task.payload.get("ground_truth")
        if import_bfcl("bfcl_eval.utils").is_agentic(task.payload["category"]) and truth:
            return f"{{'answer': {truth[0]!r}, 'context': 'ground truth'}}"
        return None


def _pick(options: Any) -> Any:
    """First allowed value of a possible-answer option list ("" = may be omitted); nested dicts,
    alone or in a list, hold option lists themselves."""
    chosen = next((o for o in options if o != ""), None) if isinstance(options, list) else options
    if isinstance(chosen, dict):
        return {k: v for k, v in ((k, _pick(o)) for k, o in chosen.items()) if v is not None}
    if isinstance(chosen, list) and chosen and all(isinstance(item, dict) for item in chosen):
        return [_pick(item) for item in chosen]  # a list of dicts: each dict's values are option lists too
    return chosen


def _category_of(task_id: str) -> str:
    return import_bfcl("bfcl_eval.utils").extract_test_category_from_id(task_id, remove_prereq=True)


def _backend_signatures(classes: list[str]) -> dict[str, list[str]]:
    config = import_bfcl("bfcl_eval.constants.executable_backend_config")
    import importlib

    out: dict[str, list[str]] = {}
    for class_name in classes:
        cls = getattr(importlib.import_module(config.CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                out[name] = [p for p in inspect.signature(fn).parameters if p != "self"]
    return out


def _call_from_string(text: str, signatures: dict[str, list[str]], index: int) -> ToolCall:
    """A ground-truth call string (bfcl's data, not model output) -> ToolCall, via ast only."""
    node = ast.parse(text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"bfcl ground truth {text!r} is not a plain call")
    name = node.func.id
    params = signatures.get(name, [])
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return ToolCall(name=name, arguments=args, id=f"call_{index}")


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))
