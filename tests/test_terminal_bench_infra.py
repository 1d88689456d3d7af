"""A Terminal-Bench verifier that could not download its tools is error: infrastructure, not a wrong answer.

Fixture tasks written here in the benchmark's folder format (their verifiers imitate the published ones:
fetch the test tools, then pytest with pytest-json-ctrf), run on the local backend."""

from __future__ import annotations

from pathlib import Path

from evaluators.terminal_bench import TerminalBench2Adapter
from unified.benchmarks.aggregate import partition
from unified.execution.infra import infrastructure_evidence
from unified.types import Episode
from _requires import needs_local, needs_tmux

pytestmark = [needs_local, needs_tmux]

TOML = 'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n[environment]\nallow_internet = false\n'
FETCH = ('python3 -c "import urllib.request; urllib.request.urlopen(\'https://tools.invalid/pytest.tar.gz\', '
         'timeout=20)"\n')
VERIFIERS = {
    # the download fails (.invalid never resolves), so pytest never runs and writes no ctrf.json
    "fixture_download_fails": f"#!/bin/bash\n{FETCH}python3 -m no_such_pytest --ctrf /logs/verifier/ctrf.json\n"
                              "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; "
                              "else echo 0 > /logs/verifier/reward.txt; fi\n",
    # the tests ran (ctrf.json written) and failed: a wrong answer, whatever else the output says
    "fixture_tests_ran": "#!/bin/bash\necho 'curl: (6) Could not resolve host: example.org'\n"
                         "echo '{\"results\": {}}' > /logs/verifier/ctrf.json\necho 0 > /logs/verifier/reward.txt\n",
    # pytest did not finish, with no sign of the machine's fault: the reward stands
    "fixture_no_evidence": "#!/bin/bash\necho 'pytest --ctrf /logs/verifier/ctrf.json'\necho 'Segmentation fault'\n"
                           "echo 0 > /logs/verifier/reward.txt\n",
}


def _tasks(root: Path) -> None:
    for name, test_sh in VERIFIERS.items():
        task = root / name
        (task / "tests").mkdir(parents=True)
        (task / "environment").mkdir()
        (task / "tests" / "test.sh").write_text(test_sh)
        (task / "instruction.md").write_text("Do it.")
        (task / "task.toml").write_text(TOML)
        (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")


def test_a_verifier_that_fails_to_download_is_an_infrastructure_error(tmp_path):
    _tasks(tmp_path)
    adapter = TerminalBench2Adapter(root=str(tmp_path), backend="local", agent="tool_calling")
    results = {}
    for task in adapter.tasks():
        with adapter.open(task) as env:
            results[task.id] = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
    failed = results["fixture_download_fails"]
    assert failed.error is not None and failed.error.startswith("infrastructure: the verifier could not run")
    assert "DNS: " in failed.error and "name resolution" in failed.error
    assert failed.passed is None
    ran, unexplained = results["fixture_tests_ran"], results["fixture_no_evidence"]
    assert ran.error is None and ran.score == 0.0 and ran.passed is False
    assert unexplained.error is None and unexplained.score == 0.0 and "reward_note" in unexplained.details
    parts = partition(results.values())
    assert [r.task_id for r in parts.errored] == ["fixture_download_fails"]  # listed, left out of the score
    assert adapter.aggregate(list(results.values()))["n_tasks"] == 2


def test_evidence_is_about_fetching_from_outside_not_a_local_service():
    uv_output = ("curl: (6) Could not resolve host: astral.sh\nerror: Request failed after 3 retries\n"
                 "  Caused by: Failed to download https://github.com/astral-sh/python-build-standalone/x.tar.gz\n"
                 "  Caused by: dns error\n")
    kinds = [line.split(":")[0] for line in infrastructure_evidence(uv_output)]
    assert kinds == ["DNS", "download", "DNS"]
    assert infrastructure_evidence("curl: (7) Failed to connect to localhost port 8080: Connection refused") == []
    assert infrastructure_evidence("bash: line 3: uvx: command not found")[0].startswith("interpreter: ")
    assert infrastructure_evidence("E: Unable to locate package python3.13")[0].startswith("apt: ")
