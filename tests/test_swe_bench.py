"""SWE-bench Verified / Pro adapters on our fixture instances (tests/fixtures/swe_bench: a small
repository and instances in each dataset's schema) with the local backend: gold patches resolve
100% through the swebench package's grading (Verified) and Pro's entry-script protocol; an empty
or a wrong patch does not; tools behave; missing sources are clear skips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evaluators.swe_bench import SWEBenchProAdapter, SWEBenchVerifiedAdapter
from unified.agent.loop import AgentLoop, Job
from unified.benchmarks.contract import BenchmarkUnavailable
from unified.agent.replay import GoldReplayer
from unified.types import Episode, ToolCall
from _requires import needs_local

FIXTURES = Path(__file__).parent / "fixtures" / "swe_bench"
pytestmark = needs_local
pytest.importorskip("swebench", reason="swebench is in the bench extra (make setup)")

VARIANTS = [(SWEBenchVerifiedAdapter, "fixture_verified.jsonl"), (SWEBenchProAdapter, "fixture_pro.jsonl")]


@pytest.mark.parametrize("cls,data", VARIANTS)
def test_gold_patches_resolve_every_fixture_instance(cls, data):
    adapter = cls(dataset=str(FIXTURES / data), backend="local")
    tasks = adapter.tasks()
    assert len(tasks) == 2 and all(t.skip_reason is None for t in tasks)
    results = AgentLoop(adapter, GoldReplayer()).run([Job(t, 0) for t in tasks])
    assert [r.error for r in results] == [None, None]
    assert all(r.score == 1.0 and r.details["resolved"] and r.details["backend"] == "local" for r in results)
    assert all("diff --git" in r.details["model_patch"] for r in results)
    assert adapter.aggregate(results)["score"] == 100.0


@pytest.mark.parametrize("cls,data", VARIANTS)
def test_empty_and_wrong_patches_are_not_resolved(cls, data):
    adapter = cls(dataset=str(FIXTURES / data), backend="local", instances="fixture__calc-1,instance_fixture__calc-1")
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        assert result.score == 0.0 and result.details["reason"] == "empty patch"
    with adapter.open(task) as env:
        # "fixes" clamp by breaking add: the FAIL_TO_PASS test passes, a PASS_TO_PASS test fails
        obs = env.step([
            ToolCall("str_replace_editor", {"command": "str_replace", "path": "calc/__init__.py",
                                            "old_str": "    return x\n", "new_str": "    return min(x, hi)\n"}, "c0"),
            ToolCall("str_replace_editor", {"command": "str_replace", "path": "calc/__init__.py",
                                            "old_str": "return a + b", "new_str": "return a - b"}, "c1"),
            ToolCall("str_replace_editor", {"command": "view", "path": "calc/__init__.py", "view_range": [4, 5]}, "c2"),
            ToolCall("bash", {"command": "python3 -c 'import calc; print(calc.clamp(15, 0, 10))'"}, "c3")])
        assert not any(o.is_error for o in obs), [o.content for o in obs]
        assert "return a - b" in obs[2].content and obs[3].content.startswith("10")
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        assert result.score == 0.0 and not result.details["resolved"]


def test_editor_and_bash_errors_are_observations():
    adapter = SWEBenchVerifiedAdapter(dataset=str(FIXTURES / "fixture_verified.jsonl"), backend="local")
    with adapter.open(adapter.tasks()[0]) as env:
        obs = env.step([
            ToolCall("str_replace_editor", {"command": "str_replace", "path": "calc/__init__.py",
                                            "old_str": "return", "new_str": "yield"}, "c0"),
            ToolCall("str_replace_editor", {"command": "view", "path": "nope.py"}, "c1"),
            ToolCall("bash", {"command": "exit 4"}, "c2"),
            ToolCall("str_replace_editor", {"command": "create", "path": "new_module.py", "file_text": "X = 1"}, "c3"),
            ToolCall("teleport", {}, "c4")])
        assert obs[0].is_error and "occurs 4 times" in obs[0].content
        assert obs[1].is_error and obs[2].is_error and "[exit code 4]" in obs[2].content
        assert not obs[3].is_error and obs[4].is_error
        assert "new_module.py" in env.final_patch()


def test_missing_sources_are_clear(monkeypatch, tmp_path):
    for var in ("SWE_BENCH_VERIFIED_DATA", "UNIFIED_FIXTURES_DIR"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(BenchmarkUnavailable, match="SWE_BENCH_VERIFIED_DATA"):
        SWEBenchVerifiedAdapter(backend="local").tasks()
    data = tmp_path / "verified.jsonl"
    data.write_text((FIXTURES / "fixture_verified.jsonl").read_text())
    tasks = SWEBenchVerifiedAdapter(dataset=str(data), backend="local").tasks()
    assert all("needs a copy of fixture/calc" in t.skip_reason for t in tasks)
    data.write_text('{"instance_id": "x__y-1", "repo": "x/y"}\n')
    assert "missing field(s)" in SWEBenchVerifiedAdapter(dataset=str(data), backend="local").tasks()[0].skip_reason


# -- both dataset schemas, official names and checks -------------------------------------------


def test_an_instance_that_cannot_be_graded_is_skipped_for_every_trial(monkeypatch):
    """A classic-schema row (princeton-nlp/SWE-bench_Verified: no eval_script/image) under swebench>=5, which
    cannot build its test spec: every trial is a skip with the reason, whatever the patch (none scores 0)."""
    from evaluators.swe_bench.grading import spec_builder

    if not isinstance(spec_builder("classic"), str):
        pytest.skip("the installed swebench builds classic rows (swebench<5): nothing to skip")
    monkeypatch.delenv("SWE_BENCH_TASK_REPO", raising=False)
    adapter = SWEBenchVerifiedAdapter(dataset=str(FIXTURES / "fixture_verified_classic.jsonl"), backend="local")
    tasks = adapter.tasks()
    assert len(tasks) == 2 and all("classic dataset schema" in t.skip_reason for t in tasks)
    assert all("swebench==4.1.0" in t.skip_reason for t in tasks)
    results = AgentLoop(adapter, GoldReplayer()).run([Job(t, trial) for t in tasks for trial in range(3)])
    assert len(results) == 6 and all(r.skipped and r.score == 0.0 for r in results)
    agg = adapter.aggregate(results)
    assert agg["n_episodes"] == 0 and agg["skipped_instances"] == sorted(t.id for t in tasks)


def test_official_image_names_are_fully_qualified():
    from evaluators.swe_bench.data import image_for

    classic = {"instance_id": "django__django-11099", "repo": "django/django"}
    assert image_for(classic, "verified") == "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert image_for({"instance_id": "x", "image": "swebench/sweb.eval.x86_64.a_1776_b-1:latest"}, "verified") == \
        "docker.io/swebench/sweb.eval.x86_64.a_1776_b-1:latest"
    pro = {"instance_id": "instance_a__b-1", "dockerhub_tag": "a.b-1"}
    assert image_for(pro, "pro") == "docker.io/jefzda/sweap-images:a.b-1"
    adapter = SWEBenchVerifiedAdapter(dataset=str(FIXTURES / "fixture_verified.jsonl"), backend="local")
    task = adapter.tasks()[0]
    assert adapter.open(task).spec.image.startswith("docker.io/")


def test_grading_has_the_network_except_on_local_and_pro_parses_with_python(tmp_path):
    adapter = SWEBenchProAdapter(dataset=str(FIXTURES / "fixture_pro.jsonl"), backend="local")
    assert adapter.settings.grading_network is True and adapter._spec(adapter.tasks()[0].payload["row"], True).network
    task = adapter.tasks()[0]
    results = AgentLoop(adapter, GoldReplayer()).run([Job(task, 0)])
    # a container engine grades with the network; the local backend never has it, and says so
    assert results[0].score == 1.0 and results[0].details["grading_network"] is False
    assert results[0].details["grading_network_cut"] == "the local backend has no network"
    assert "\npython /tmp/unified-eval/parser.py /tmp/unified-eval/stdout.log" in results[0].details["entryscript"]


def test_a_patch_already_in_the_tree_counts_as_applied_as_in_the_official_harness():
    from evaluators.swe_bench.environment import FIXED_GIT_ENV, open_repository
    from evaluators.swe_bench.grading import grade_verified

    adapter = SWEBenchVerifiedAdapter(dataset=str(FIXTURES / "fixture_verified.jsonl"), backend="local")
    task = adapter.tasks()[0]
    row = task.payload["row"]
    with open_repository(adapter._backend(), adapter._spec(row), row["base_commit"],
                         FIXTURES / "repos" / "fixture__calc") as session:
        session.write_file("/tmp/unified-eval/gold.diff", row["patch"])
        # the fix is already committed, so every apply command fails even after the resets between them
        assert session.exec("git apply /tmp/unified-eval/gold.diff && git commit -qam fixed", env=FIXED_GIT_ENV).ok
        # a patch whose preimage blobs the repository lacks (as for any model patch), so --3way cannot merge it
        patch = re.sub(r"^index [0-9a-f]+\.\.[0-9a-f]+", "index 1234567..89abcde", row["patch"], flags=re.M)
        graded = grade_verified(session, row, patch, 600)
    assert graded["patch_already_applied"] and graded["patch_applied"] and graded["resolved"]


def test_classic_rows_grade_with_the_task_repository_through_swebench(monkeypatch):
    """The classic schema graded with swebench 5: eval script and image from a swebench task repository
    (tests/fixtures/swe_bench/fixture_task_repo, our own, in swebench's task-repo layout)."""
    pytest.importorskip("swebench.task.repo", reason="swebench>=5 reads task repositories")
    monkeypatch.setenv("SWE_BENCH_TASK_REPO", str(FIXTURES / "fixture_task_repo"))
    adapter = SWEBenchVerifiedAdapter(dataset=str(FIXTURES / "fixture_verified_classic.jsonl"), backend="local")
    tasks = adapter.tasks()
    assert all(t.skip_reason is None and "task repository" in t.payload["dataset_schema"] for t in tasks)
    results = AgentLoop(adapter, GoldReplayer()).run([Job(t, 0) for t in tasks])
    assert [r.score for r in results] == [1.0, 1.0], [r.error or r.details.get("log_tail") for r in results]
    monkeypatch.setenv("SWE_BENCH_TASK_REPO", str(FIXTURES / "repos"))  # not a task repository
    assert all("not in the task repository" in t.skip_reason for t in adapter.__class__(
        dataset=str(FIXTURES / "fixture_verified_classic.jsonl"), backend="local").tasks())


def test_grading_that_cannot_download_its_test_tools_is_an_infrastructure_error(tmp_path):
    """A fixture run script that fetches its test runner first (from a host that never resolves): no test runs."""
    import shutil

    scripts = tmp_path / "run_scripts"
    shutil.copytree(FIXTURES / "fixture_pro_run_scripts", scripts)
    script = scripts / "instance_fixture__calc-1" / "run_script.sh"
    script.write_text(script.read_text().replace(
        "cd /app\n", "cd /app\npython3 -c \"import urllib.request; urllib.request.urlopen('https://pypi.invalid/runner')\"\n"))
    adapter = SWEBenchProAdapter(dataset=str(FIXTURES / "fixture_pro.jsonl"), backend="local",
                                 scripts_dir=str(scripts), instances="instance_fixture__calc-1")
    results = AgentLoop(adapter, GoldReplayer()).run([Job(adapter.tasks()[0], 0)])
    assert results[0].error.startswith("infrastructure: grading could not run the tests\nDNS: ")
    summary = adapter.aggregate(results)
    assert summary["n_instances"] == 0 and summary["errored"] == 1  # listed, left out of the score
