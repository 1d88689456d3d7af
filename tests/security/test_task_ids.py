"""Task ids are checked when tasks load: a bad or repeated id is a clear error, never a silent loss.

Attack: a task id is used as a record key and in scratch-directory names. A path-traversal id
(``../../x``) failed only by luck (a ``/tmp/qcb-...`` prefix that did not exist), and two tasks
with one id shared a (task, trial) key, so one task's result silently replaced the other's.
Now an id is 1..200 characters of ``A-Z a-z 0-9 _ . : @ + = , -`` (no separator, no ``..``),
and the loaders (Claw-Eval, QwenClawBench) and the runner (every benchmark) reject bad and
duplicate ids with an error naming the file or the benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixture_eval_bench import FixtureAdapter
from unified.benchmarks import Task, TaskFormatError, check_task_ids, task_id_problem
from unified.eval.runner import EvalConfig, run_eval


@pytest.mark.parametrize("bad", ["", "../../etc/passwd", "a/b", "a\\b", "..", "a..b", ".hidden", "-x", "with space",
                                 "tab\there", "nul\x00", "é", "x" * 201, 7])
def test_bad_ids_are_named(bad):
    assert task_id_problem(bad)


@pytest.mark.parametrize("good", ["astropy__astropy-12907", "multi_turn_base_0", "live_simple_0-0-0", "hello-world",
                                  "task_00001_sales", "ws_en_001", "T01:v1.2", "x" * 200])
def test_benchmark_ids_pass(good):
    assert task_id_problem(good) is None


def test_duplicates_are_rejected_naming_where():
    tasks = [Task(id="a", benchmark="b"), Task(id="c", benchmark="b"), Task(id="a", benchmark="b")]
    with pytest.raises(TaskFormatError, match=r"benchmark b: task id 'a' appears more than once"):
        check_task_ids(tasks, "benchmark b")


class DuplicateIdsAdapter(FixtureAdapter):
    """The runner's fixture benchmark, with two tasks sharing one id."""

    name = "fixture_duplicate_ids"

    def tasks(self, split=None, limit=None):
        tasks = super().tasks(split, limit)
        return tasks + [Task(id=tasks[0].id, benchmark=self.name, payload={"n": 99})]


def test_the_runner_refuses_a_benchmark_with_duplicate_ids(tmp_path):
    spec = "security.test_task_ids:DuplicateIdsAdapter"
    summary = run_eval(EvalConfig(benchmarks=[spec], model="gold", out=str(tmp_path), benchmark_config={spec: {"n": 2}}))
    entry = summary.benchmarks["fixture_duplicate_ids"]
    assert entry.status == "error" and "task id 'echo_0' appears more than once" in entry.reason
    assert not list(tmp_path.rglob("results.jsonl"))  # nothing ran: no result to replace another


def _claw_task(checkout: Path, folder: str, task_id: str) -> Path:
    path = checkout / "tasks" / folder / "task.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(f"task_id: {json.dumps(task_id)}\nprompt: {{text: hi}}\n")
    return path


def test_claw_eval_loader_rejects_bad_and_duplicate_ids(tmp_path):
    from evaluators.claw_eval.tasks import load_tasks

    checkout = tmp_path / "claw"
    _claw_task(checkout, "T01", "fixture_T01")
    _claw_task(checkout, "T02", "../../outside")
    tasks, broken = load_tasks(checkout)
    assert [t.id for t in tasks] == ["fixture_T01"]
    assert broken[0][0] == "T02" and "T02/task.yaml: field 'task_id'" in broken[0][1] and "'/'" in broken[0][1]
    second = _claw_task(checkout, "T03", "fixture_T01")
    with pytest.raises(TaskFormatError) as info:
        load_tasks(checkout)
    assert str(second) in str(info.value) and "fixture_T01" in str(info.value) and "T01/task.yaml" in str(info.value)


def test_qwenclawbench_loader_rejects_bad_and_duplicate_ids(tmp_path):
    from evaluators.qwenclawbench.tasks import load_tasks

    dataset = tmp_path / "data" / "qwenclawbench-v1.1-100"
    (dataset / "tasks").mkdir(parents=True)

    def write(name, task_id):
        (dataset / "tasks" / f"task_{name}.md").write_text(f"---\nid: {json.dumps(task_id)}\n---\n## Prompt\nhi\n")

    write("a", "task_a")
    write("b", "../../tmp/x")
    tasks, broken = load_tasks(dataset)
    assert [t.id for t in tasks] == ["task_a"]
    assert broken[0][0] == "task_b" and "task_b.md:2: front matter field 'id'" in broken[0][1]
    write("c", "task_a")
    with pytest.raises(TaskFormatError, match=r"task_c\.md: front matter id 'task_a' is already the id of .*task_a\.md"):
        load_tasks(dataset)
