"""Promise: on docker/podman, processes the agent left running cannot forge the verifier's result.

Terminal-Bench's own harness leaves the agent's processes running while the verifier runs (a
task's answer can be a running service), and so does this adapter on container engines. Attack:
a do-nothing agent on the service fixture task leaves a background loop that (a) keeps writing
``1`` into ``/logs/verifier/reward.txt``, also through every ``/proc/PID/root`` it can open, and
rewrites ``/tests/test.sh`` to give 1; (b) removes ``/logs/verifier`` and ``/tests`` (which detaches
a mount made there in another mount namespace) and recreates them with a reward of 1. The verifier
runs privileged in a private mount namespace (:mod:`unified.execution.verifier`): (a) scores 0,
(b) is not verified (an error, no reward). Needs root, podman, runc, debootstrap and tmux, like
tests/test_containers_real.py; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from unified.types import Episode, ToolCall

ROOT = Path(__file__).parents[1] / "fixtures" / "terminal_bench_containers"
MISSING = [tool for tool in ("podman", "runc", "debootstrap", "tmux") if shutil.which(tool) is None]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed: "
                       "apt-get install -y podman runc debootstrap tmux"),
    pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap (the fixture's rebuilt base) needs root"),
]

WRITER = ("(setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; "
          "printf \"echo 1 > /logs/verifier/reward.txt\\n\" > /tests/test.sh; "
          "for p in /proc/[0-9]*; do echo 1 > $p/root/logs/verifier/reward.txt; "
          "echo 1 > $p/cwd/reward.txt; done; sleep 0.02; done' >/dev/null 2>&1 &); echo started")
UNLINKER = ("(setsid sh -c 'while :; do rm -rf /logs/verifier /tests; mkdir -p /logs/verifier /tests; "
            "echo 1 > /logs/verifier/reward.txt; printf \"echo 1 > /logs/verifier/reward.txt\\n\" > /tests/test.sh; "
            "sleep 0.02; done' >/dev/null 2>&1 &); echo started")


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    from evaluators.terminal_bench import TerminalBench2Adapter
    from unified.execution.images import build_task
    from unified.execution.probe import containers_conf_text, probe_engine

    conf = tmp_path_factory.mktemp("conf") / "containers.conf"
    conf.write_text(containers_conf_text())
    old = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(conf)
    try:
        problem = probe_engine("podman", str(conf))
        if problem is not None:
            pytest.skip(f"podman cannot start a container here even with runc: {problem}")
        built = build_task(ROOT / "fixture_container_service", "podman")
        assert built.status == "built", built.reason
        yield TerminalBench2Adapter(root=str(ROOT), backend="podman", build="always",
                                    tasks="fixture_container_service", agent="tool_calling")
    finally:
        if old is None:
            os.environ.pop("CONTAINERS_CONF", None)
        else:
            os.environ["CONTAINERS_CONF"] = old


def _attack(adapter, keys: str):
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        env.step([ToolCall("send_keys", {"keystrokes": keys, "duration": 2}, "c0"),
                  ToolCall("task_complete", {}, "c1")])
        assert "started" in env.terminal.capture()
        return adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)


def test_a_process_left_running_cannot_write_the_reward_or_the_tests(adapter):
    from evaluators.terminal_bench.environment import KEPT_RUNNING

    result = _attack(adapter, WRITER)
    assert result.details["agent_processes"] == KEPT_RUNNING  # the forger was alive during verification
    assert result.score == 0.0 and result.passed is False, result.details
    assert "service answered: nothing" in result.details["verifier_output"]  # the real test.sh ran


def test_a_process_that_replaces_the_verifiers_directories_gets_no_result(adapter):
    from evaluators.terminal_bench.environment import KEPT_RUNNING

    result = _attack(adapter, UNLINKER)
    assert result.details["agent_processes"] == KEPT_RUNNING  # the unlinker was alive during verification
    assert result.score == 0.0 and result.details["reward"] is None, result.details
    assert "was replaced while it ran" in result.details["reward_error"]
