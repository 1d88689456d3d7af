"""``--model gold`` on BFCL's Java cases and nested possible answers: typed values (long, Array, ArrayList, HashMap) replayed as
the Java source text bfcl's checker reads back (evaluators/bfcl_v4/gold.py), on the data bfcl-eval ships."""

from __future__ import annotations

import pytest

pytest.importorskip("bfcl_eval")

from unified.agent.loop import AgentLoop, Job  # noqa: E402
from unified.agent.replay import GoldReplayer  # noqa: E402
from unified.benchmarks.contract import RunContext  # noqa: E402
from unified.benchmarks.discovery import load_adapter  # noqa: E402

from unified.types import Episode, Message  # noqa: E402

from evaluators.bfcl_v4 import scoring  # noqa: E402
from evaluators.bfcl_v4.gold import java_argument, unpassable_reason  # noqa: E402


def test_typed_values_are_written_as_java_text_that_bfcl_reads_back():
    assert java_argument(42, "long") == "42L"
    assert java_argument(42, "integer") == "42"
    assert java_argument(2.5, "float") == "2.5f"
    assert java_argument(True, "boolean") == "true"
    assert java_argument([101, 202], "ArrayList", "integer") == "new ArrayList<>(Arrays.asList(101, 202))"
    assert java_argument(["-v", "-p"], "Array", "String") == "new String[]{-v, -p}"
    assert java_argument({"limit": 50, "schemaFilter": "public"}, "HashMap") == (
        'new HashMap<String, Object>() {{ put("limit", 50); put("schemaFilter", "public"); }}')
    assert java_argument("TimeUnit.MINUTES", "any") == "TimeUnit.MINUTES"


TYPED = ("long", "float", "Array", "ArrayList", "HashMap")
"""The Java types whose text differs from the JSON of the value (``42L``, ``new ...``)."""


def _gold_verdict(adapter, task):
    """bfcl's checker on the task's gold calls, as the adapter scores a single-turn episode."""
    calls = [c for turn in adapter.gold_turns(task) for c in turn]
    episode = Episode(benchmark="bfcl_v4", task_id=task.id, messages=[Message("assistant", "", tool_calls=calls)])
    return scoring.score_entry(task.payload["category"], task.payload, episode, set())


def test_gold_resolves_the_option_lists_inside_a_list_of_dicts():
    """``conditions: [[{"field": ["age"], ...}, ...]]``: each dict's values are option lists too
    (before: ``Invalid value for parameter 'field': ['age']``)."""
    adapter = load_adapter("bfcl_v4", categories="simple_python,multiple,live_simple")
    wanted = {"simple_python_96", "multiple_119", "live_simple_165-98-0", "live_simple_189-114-0"}
    tasks = [t for t in adapter.tasks() if t.id in wanted]
    assert len(tasks) == 4
    assert {t.id: _gold_verdict(adapter, t)["valid"] for t in tasks} == dict.fromkeys(wanted, True)


def _typed_tasks():
    adapter = load_adapter("bfcl_v4", categories="simple_java")
    tasks = [t for t in adapter.tasks() if any(p.get("type") in TYPED for f in t.payload["checker_function"]
                                               for p in f["parameters"]["properties"].values())]
    return adapter, tasks


def test_gold_passes_every_typed_java_case_that_any_output_can_pass():
    """The ground truth's calls, scored by bfcl's checker as the adapter scores an episode: the 23
    cases gold failed before (``Expected type long, got str``) pass, and so does every other typed one
    but the three no output can pass."""
    adapter, tasks = _typed_tasks()
    assert len(tasks) >= 26
    verdicts = {task.id: _gold_verdict(adapter, task) for task in tasks}
    unreachable = {t.id: why for t in tasks if (why := unpassable_reason(t.payload))}
    failed = [(tid, v.get("error")) for tid, v in verdicts.items() if not v["valid"] and tid not in unreachable]
    assert not failed, failed[:3]
    assert sorted(unreachable) == ["simple_java_36", "simple_java_64", "simple_java_65"]  # the shipped data's three
    assert not any(verdicts[tid]["valid"] for tid in unreachable)


def test_gold_java_text_survives_the_agent_loop(tmp_path):
    """Through the loop (tool-call text rendered, parsed against the string-typed schema, scored):
    one case each of long, Array, ArrayList and HashMap."""
    adapter, tasks = _typed_tasks()
    chosen = [t for t in tasks if t.id in ("simple_java_1", "simple_java_22", "simple_java_25", "simple_java_27")]
    results = []
    AgentLoop(adapter, GoldReplayer(), max_in_flight=8, on_result=lambda r, e: results.append(r),
              run=RunContext(work_dir=tmp_path)).run([Job(t) for t in chosen])
    assert len(results) == 4 and all(r.passed for r in results), [(r.task_id, r.details.get("error")) for r in results]


def test_the_summary_names_the_tasks_no_faithful_answer_passes(tmp_path):
    """Gold on all of simple_java: 97 of 100, and the aggregate says the 3 are unpassable (ceiling 97%)."""
    adapter = load_adapter("bfcl_v4", categories="simple_java", limit_order="per_category")
    results = []
    AgentLoop(adapter, GoldReplayer(), max_in_flight=16, on_result=lambda r, e: results.append(r),
              run=RunContext(work_dir=tmp_path)).run([Job(t) for t in adapter.tasks()])
    agg = adapter.aggregate(results)
    failed = sorted(r.task_id for r in results if not r.passed)
    assert failed == sorted(agg["unpassable"]["tasks"]) == ["simple_java_36", "simple_java_64", "simple_java_65"]
    assert agg["score"] == 97.0 and "ceiling 97.00%" in agg["metric"] and "3 of the 100" in agg["unpassable"]["note"]
