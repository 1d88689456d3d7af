"""Promise: on docker/podman, processes the agent left running cannot forge the verifier's result.

Terminal-Bench's own harness leaves the agent's processes running while the verifier runs (a
task's answer can be a running service), and so does this adapter on container engines. Attack:
a do-nothing agent on the service fixture task leaves a background loop that (a) keeps writing
``1`` into ``/logs/verifier/reward.txt``, also through every ``/proc/PID/root`` it can open, and
rewrites ``/tests/test.sh`` to give 1; (b) removes ``/logs/verifier`` and ``/tests`` (which detaches
a mount made there in another mount namespace) and recreates them with a reward of 1. The verifier
runs in a private mount namespace, set up by the host's own tools (:mod:`unified.execution.verifier`): (a) scores 0,
(b) is not verified (an error, no reward). Needs root, podman, runc, debootstrap and tmux, like
tests/test_containers_real.py; skipped otherwise.
"""

from __future__ import annotations

from security._containers import CONTAINER_MARKS, attack

pytestmark = CONTAINER_MARKS

WRITER = ("(setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; "
          "printf \"echo 1 > /logs/verifier/reward.txt\\n\" > /tests/test.sh; "
          "for p in /proc/[0-9]*; do echo 1 > $p/root/logs/verifier/reward.txt; "
          "echo 1 > $p/cwd/reward.txt; done; sleep 0.02; done' >/dev/null 2>&1 &); echo started")
UNLINKER = ("(setsid sh -c 'while :; do rm -rf /logs/verifier /tests; mkdir -p /logs/verifier /tests; "
            "echo 1 > /logs/verifier/reward.txt; printf \"echo 1 > /logs/verifier/reward.txt\\n\" > /tests/test.sh; "
            "sleep 0.02; done' >/dev/null 2>&1 &); echo started")


def test_a_process_left_running_cannot_write_the_reward_or_the_tests(podman_service_adapter):
    from evaluators.terminal_bench.environment import KEPT_RUNNING

    result, _ = attack(podman_service_adapter, WRITER, "started")
    assert result.details["agent_processes"] == KEPT_RUNNING  # the forger was alive during verification
    assert result.score == 0.0 and result.passed is False, result.details
    assert "service answered: nothing" in result.details["verifier_output"]  # the real test.sh ran


def test_a_process_that_replaces_the_verifiers_directories_gets_no_result(podman_service_adapter):
    from evaluators.terminal_bench.environment import KEPT_RUNNING

    result, _ = attack(podman_service_adapter, UNLINKER, "started")
    assert result.details["agent_processes"] == KEPT_RUNNING  # the unlinker was alive during verification
    assert result.score == 0.0 and result.details["reward"] is None, result.details
    assert "was replaced while it ran" in result.details["reward_error"]
