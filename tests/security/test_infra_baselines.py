"""Promise: "infrastructure" (left out of the score) cannot be forced or inherited (issue 42, R4).

Before: a baseline (the task's verifier on a fresh environment without the agent) that itself raised
(a disk the agent filled while its environment was still open) counted as confirmation for any kind
of evidence, and the answer was cached per task id for the whole run, so the next trial's failure was
"infrastructure" too. Now a baseline that raises confirms nothing and is not cached, it runs only after
the episode's own environment is closed, and its answer is cached per task and image digest only while
the host's resources (free disk, name-resolution files) stay as they were.
"""

from __future__ import annotations

import errno

from evaluators.terminal_bench import TerminalBench2Adapter
from unified.execution.infra import InfrastructureBaselines, infrastructure_error
from unified.types import Episode
from _requires import needs_local, needs_tmux

EPISODE = infrastructure_error("the verifier could not run", ["DNS: curl: (6) Could not resolve host: pypi.org"])
MACHINE = infrastructure_error("the verifier could not run", ["DNS: Temporary failure in name resolution"])


def _disk_full() -> str | None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_baseline_that_raises_is_not_a_confirmation_and_is_not_cached():
    baselines = InfrastructureBaselines()
    assert baselines.confirm("task", EPISODE, _disk_full, image="sha256:a") is None
    assert "No space left on device" in baselines.failures[0]
    confirmed = baselines.confirm("task", EPISODE, lambda: MACHINE, image="sha256:a")  # asked again, not cached
    assert confirmed is not None and "reproduced without the agent" in confirmed
    assert baselines.runs == 2


def test_the_cache_is_per_image_digest():
    baselines = InfrastructureBaselines()
    assert baselines.confirm("task", EPISODE, lambda: MACHINE, image="sha256:old") is not None
    assert baselines.confirm("task", EPISODE, lambda: None, image="sha256:rebuilt") is None  # a new image: asked
    assert baselines.runs == 2


def test_the_cache_expires_when_a_host_resource_changes(tmp_path):
    from unified.execution.infra import host_resources

    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.0.0.1\n")
    baselines = InfrastructureBaselines(resources=lambda: host_resources([tmp_path], [resolv]))
    assert baselines.confirm("task", EPISODE, lambda: MACHINE) is not None
    assert baselines.confirm("task", EPISODE, lambda: None) is not None  # same host: cached
    resolv.write_text("nameserver 10.0.0.2\n")  # the host's name resolution changed: the cached answer is stale
    assert baselines.confirm("task", EPISODE, lambda: None) is None
    assert baselines.runs == 2
    assert any(line.startswith(f"disk {tmp_path}: ") for line in host_resources([tmp_path], [resolv]))


@needs_local
@needs_tmux
def test_the_baseline_runs_after_the_episodes_environment_is_closed(tmp_path):
    """A verifier that cannot fetch its tools (fixture task): its baseline starts only once the episode's own
    session is closed (a disk the agent filled is freed by then)."""
    from security.test_verifier_infrastructure import FETCH_SH, _task

    _task(tmp_path, "fixture_fetch_fails", FETCH_SH)
    seen = []

    class Watching(TerminalBench2Adapter):
        def _verifier_without_agent(self, task):
            seen.append(episode_env.session)  # the episode's session when the baseline starts
            return super()._verifier_without_agent(task)

    adapter = Watching(root=str(tmp_path), backend="local", agent="tool_calling")
    task = adapter.tasks()[0]
    with adapter.open(task) as episode_env:
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), episode_env)
    assert seen == [None], "the baseline ran while the episode's environment was still open"
    assert result.error is not None and "reproduced without the agent" in result.error
