"""BFCL v4 tasks, read from the ``bfcl-eval`` package's own data files.

Categories are bfcl's (``bfcl_eval/constants/category_mapping.py``: ``ALL_SCORING_CATEGORIES``);
entries come from ``bfcl_eval.utils.load_dataset_entry`` (which also fills in the multi-turn
function docs, the memory prerequisite conversations and their dependencies, the agentic
answer-format system prompt) and ground truth from ``load_ground_truth_entry``, aligned by
index like ``eval_runner._subset_entries_by_model_ids`` does.

Each task keeps two copies of the function docs: the one shown to the model (with bfcl's
language-specific hints, as its inference does) and the one its checker reads (without, as
``eval_runner.evaluate_task`` loads it).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from evaluators.bfcl_v4.isolation import import_bfcl
from unified.benchmarks.contract import Task
from unified.registry import UnknownNameError

# Round-robin order used when a --limit cuts the task list: small limits then still touch
# many categories (single-turn, multi-turn, live, irrelevance) before the costly agentic ones.
DEFAULT_ORDER = [
    "simple_python", "multi_turn_base", "live_simple", "irrelevance", "multiple", "live_multiple",
    "parallel", "multi_turn_miss_func", "live_irrelevance", "parallel_multiple", "multi_turn_miss_param",
    "live_parallel", "simple_java", "multi_turn_long_context", "live_relevance", "live_parallel_multiple",
    "simple_javascript", "memory_kv", "memory_rec_sum", "memory_vector", "web_search_base", "web_search_no_snippet",
]


def category_groups() -> dict[str, list[str]]:
    """bfcl's own category collections (``TEST_COLLECTION_MAPPING``) plus each category alone."""
    mapping = import_bfcl("bfcl_eval.constants.category_mapping")
    groups = {k: list(v) for k, v in mapping.TEST_COLLECTION_MAPPING.items() if k != "all"}
    groups["all"] = list(mapping.ALL_SCORING_CATEGORIES)  # format_sensitivity is not scored
    for category in mapping.ALL_SCORING_CATEGORIES:
        groups.setdefault(category, [category])
    return groups


def resolve_categories(spec: str | list[str] | None) -> list[str]:
    """``"multi_turn,simple_python"`` / a list / None (= all scoring categories) -> categories."""
    groups = category_groups()
    items = spec if isinstance(spec, list) else [s for s in (spec or "all").split(",") if s.strip()]
    out: list[str] = []
    for item in items:
        item = item.strip()
        if item not in groups:
            raise UnknownNameError("BFCL category", item, list(groups))
        out += groups[item]
    return list(dict.fromkeys(out))


def group_of(category: str) -> str:
    """bfcl's high-level group (``utils.get_general_grouping``): non_live, live, multi_turn, agentic."""
    return import_bfcl("bfcl_eval.utils").get_general_grouping(category)


def web_search_key() -> str | None:
    return os.environ.get("SERPAPI_API_KEY") or None


def load_category(category: str) -> list[Task]:
    """Every task of one category (memory: its prerequisite conversations first)."""
    utils = import_bfcl("bfcl_eval.utils")
    shown = utils.load_dataset_entry(category, include_prereq=True, include_language_specific_hint=True)
    checked = utils.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    checked_by_id = {e["id"]: e for e in checked}
    truth: dict[str, Any] = {}
    if not utils.is_relevance_or_irrelevance(category):
        answers = utils.load_ground_truth_entry(category)
        if len(answers) != len(checked):
            raise ValueError(f"bfcl-eval data: {category}: {len(checked)} entries but {len(answers)} ground truths")
        truth = {entry["id"]: answer["ground_truth"] for entry, answer in zip(checked, answers)}
    skip = None
    if utils.is_web_search(category) and not web_search_key():
        skip = "web search needs a SerpAPI key: set SERPAPI_API_KEY (bfcl's WebSearchAPI backend)"
    tasks = []
    for entry in shown:
        prereq = utils.is_memory_prereq(entry["id"])
        checker_entry = checked_by_id.get(entry["id"], entry)
        payload = {
            "category": category,
            "entry": json.loads(json.dumps(entry, default=str)),
            "checker_function": checker_entry.get("function", []),
            "ground_truth": truth.get(entry["id"]),
            "prereq": prereq,
        }
        tasks.append(Task(id=entry["id"], benchmark="bfcl_v4", split=category, group=group_of(category),
                          payload=payload, skip_reason=skip, depends_on=list(entry.get("depends_on", [])),
                          scored=not prereq))
    return tasks


def select_tasks(categories: list[str], limit: int | None, order: str = "round_robin") -> list[Task]:
    """Tasks of ``categories``; ``limit`` cuts round-robin across categories (or per category).

    Memory prerequisites of a selected memory question are always included (first).
    """
    by_category = {c: load_category(c) for c in categories}
    scored = {c: [t for t in ts if t.scored] for c, ts in by_category.items()}
    if limit is None:
        chosen = [t for c in categories for t in scored[c]]
    elif order == "per_category":
        chosen = [t for c in categories for t in scored[c][:limit]]
    else:
        ranked = sorted(categories, key=lambda c: DEFAULT_ORDER.index(c) if c in DEFAULT_ORDER else len(DEFAULT_ORDER))
        chosen, depth = [], 0
        while len(chosen) < limit and any(depth < len(scored[c]) for c in ranked):
            for c in ranked:
                if depth < len(scored[c]) and len(chosen) < limit:
                    chosen.append(scored[c][depth])
            depth += 1
    prereqs: dict[str, Task] = {}
    all_by_id = {t.id: t for ts in by_category.values() for t in ts}
    for task in chosen:
        for dep in task.depends_on:
            if dep in all_by_id:
                prereqs.setdefault(dep, all_by_id[dep])
    ordered_prereqs = [t for c in categories for t in by_category[c] if t.id in prereqs]
    return ordered_prereqs + chosen


def dataset_sizes(categories: list[str]) -> dict[str, int]:
    """Scored entries per category (what bfcl counts for a category it did not evaluate)."""
    return {c: _dataset_size(c) for c in categories}


@functools.lru_cache(maxsize=None)
def _dataset_size(category: str) -> int:
    utils = import_bfcl("bfcl_eval.utils")
    return len(utils.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False))
