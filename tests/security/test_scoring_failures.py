"""Promise: a failed answer cannot leave the score by making its scoring fail (issue 42, R2).

Before: an agent that ran ``chmod 0555 /tmp`` (``local``) or replaced ``mktemp`` with one that exits 1
(podman) made ``verifier_env()`` raise; ``score()`` raised, ``finish_episode`` recorded "scoring failed"
as the episode's error and the aggregate left the episode out: [solved, failed] scored 100, not 50.
Now a scoring failure after the agent acted scores 0, stays in the denominator and is labelled
(``details["status"] == "scoring_failed_after_agent"``); what the verifier needs is made before the
agent acts. The episodes here run through the eval's own :func:`unified.agent.workers.finish_episode`
and the adapter's aggregate. Terminus-2 shares this scoring (``TerminusEnvironment`` subclasses the
tool-calling environment; ``TerminalBench2Adapter.score`` is one method).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.terminal_bench import TerminalBench2Adapter, aggregate_rewards
from unified.agent.loop import Job
from unified.agent.workers import EpisodeState, finish_episode
from unified.benchmarks.aggregate import partition
from unified.benchmarks.contract import Adapter, Task
from unified.types import Episode, EpisodeResult, ToolCall
from _requires import needs_local, needs_tmux
from security._containers import CONTAINER_MARKS

FIXTURES = Path(__file__).parents[1] / "fixtures"
SCORING_FAILED_AFTER_AGENT = "scoring_failed_after_agent"  # the label (unified.benchmarks.contract)
SOLVE = "echo 'Hello, world!' > /app/hello.txt"


def _finished(adapter, task, keys: str, trial: int) -> EpisodeResult:
    """Open the task's environment, type ``keys``, then score and close it as the eval does."""
    env = adapter.open(task)
    env.__enter__()
    env.step([ToolCall("send_keys", {"keystrokes": keys, "duration": 3}, "k0"),
              ToolCall("task_complete", {}, "k1")])
    state = EpisodeState(key=trial, job=Job(task, trial), episode=Episode(benchmark=adapter.name, task_id=task.id,
                                                                          trial=trial), env=env)
    return finish_episode(adapter, state)


def _assert_counted(solved: EpisodeResult, failed: EpisodeResult) -> None:
    assert solved.score == 1.0 and solved.error is None, (solved.error, solved.details)
    assert failed.score == 0.0 and failed.passed is False and failed.error is None, (failed.error, failed.details)
    both = [solved, failed]
    assert len(partition(both).scored) == 2
    assert aggregate_rewards(both)["score"] == pytest.approx(50.0)


@needs_local
@needs_tmux
def test_a_read_only_tmp_makes_a_failed_answer_score_0_not_leave_the_score():
    adapter = TerminalBench2Adapter(root=str(FIXTURES / "terminal_bench"), backend="local", agent="tool_calling",
                                    tasks="fixture_hello_file")
    task = adapter.tasks()[0]
    solved = _finished(adapter, task, SOLVE, 0)
    failed = _finished(adapter, task, "chmod 0555 /tmp", 1)
    _assert_counted(solved, failed)
    assert failed.details["status"] == SCORING_FAILED_AFTER_AGENT and "grader_error" in failed.details


class _ScoreRaises(Adapter):
    """Any adapter whose ``score`` raises after the agent acted (a judge gone, a full disk)."""

    name = "fixture_score_raises"

    def tasks(self, split=None, limit=None):
        return [Task(id="t0", benchmark=self.name)]

    def score(self, task, episode, env):
        raise OSError(28, "No space left on device")

    def aggregate(self, results, *, run=None):
        return {"score": 100.0 * sum(r.score for r in partition(results).scored) / max(1, len(partition(results).scored))}


def test_finish_episode_scores_a_raising_score_0_and_counts_it():
    adapter = _ScoreRaises()
    task = adapter.tasks()[0]
    state = EpisodeState(key=0, job=Job(task, 0), episode=Episode(benchmark=adapter.name, task_id=task.id))
    result = finish_episode(adapter, state)
    assert result.error is None and result.score == 0.0 and result.passed is False
    assert result.details["status"] == SCORING_FAILED_AFTER_AGENT
    assert "No space left on device" in result.details["grader_error"]
    solved = EpisodeResult(benchmark=adapter.name, task_id="t1", trial=0, score=1.0, passed=True)
    assert adapter.aggregate([solved, result])["score"] == pytest.approx(50.0)


SERVICE = ("(nohup setsid perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(LocalAddr => \"127.0.0.1\", "
           "LocalPort => 7777, Listen => 5, ReuseAddr => 1) or die; while (my $c = $s->accept) { print $c \"service-ok\\n\"; "
           "close $c }' >/dev/null 2>&1 &); sleep 1")
"""The service fixture's answer (its solution/solve.sh, typed): a service on 127.0.0.1:7777 that answers ``service-ok``."""


class TestPodman:
    pytestmark = CONTAINER_MARKS

    def test_a_failing_mktemp_makes_a_failed_answer_score_0(self, podman_service_adapter):
        adapter = podman_service_adapter
        task = adapter.tasks()[0]
        solved = _finished(adapter, task, SERVICE, 0)
        fake = "printf '#!/bin/sh\\nexit 1\\n' > /usr/bin/mktemp && chmod 755 /usr/bin/mktemp"
        failed = _finished(adapter, task, fake, 1)
        _assert_counted(solved, failed)  # the verifier's HOME was made before the agent replaced mktemp: it ran
        assert failed.details.get("reward") == 0.0 or failed.details.get("status") == SCORING_FAILED_AFTER_AGENT
