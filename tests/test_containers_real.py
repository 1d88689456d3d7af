"""A real container end to end, without a registry: a Debian base rebuilt from the archive (debootstrap),
the fixture task's Dockerfile built on it with podman, the gold solution scores 1 and a wrong one 0.

Needs root, podman, runc and debootstrap (``apt-get install -y podman runc debootstrap``) and the Debian
archive; skipped otherwise with that line. The podman settings it needs on hosts where the start probe
fails (crun with hybrid cgroups, rlimits) are written to a temporary ``CONTAINERS_CONF``. The first run
bootstraps bookworm (~1-2 min) into ``~/.cache/unified/images``; later runs reuse it.
"""

from __future__ import annotations

import pytest

from evaluators.terminal_bench import TerminalBench2Adapter
from evaluators.terminal_bench.environment import KEPT_RUNNING
from unified.agent.loop import AgentLoop, Job
from unified.execution import get_backend
from unified.execution.images import build_task
from unified.execution.probe import containers_conf_text, probe_engine
from unified.agent.replay import GoldReplayer
from unified.types import Episode, ToolCall

from security._containers import CONTAINER_MARKS, ROOT

pytestmark = CONTAINER_MARKS


@pytest.fixture
def podman(tmp_path, monkeypatch):
    conf = tmp_path / "containers.conf"
    conf.write_text(containers_conf_text())
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    problem = probe_engine("podman", str(conf))
    if problem is not None:
        pytest.skip(f"podman cannot start a container here even with runc: {problem}")
    return get_backend("podman")


def test_rebuilt_base_gold_scores_1_and_a_wrong_answer_0(podman):
    built = build_task(ROOT / "fixture_container_hello", "podman")
    assert built.status == "built", built.reason
    assert built.bases == ["docker.io/library/debian:bookworm-slim"]

    adapter = TerminalBench2Adapter(root=str(ROOT), backend="podman", build="always", tasks="fixture_container_hello",
                                    agent="tool_calling")
    task = adapter.tasks()[0]
    gold = AgentLoop(adapter, GoldReplayer()).run([Job(task, 0)])[0]
    assert gold.error is None and gold.score == 1.0, gold.details.get("verifier_output")
    assert gold.details["backend"] == "podman" and "bookworm" in gold.details["rebuilt_base"]

    with adapter.open(task) as env:
        env.step([ToolCall("send_keys", {"keystrokes": "echo trixie > /app/release.txt", "duration": 5}, "w0")])
        wrong = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id, trial=1), env)
    assert wrong.error is None and wrong.score == 0.0 and wrong.passed is False

    summary = adapter.aggregate([gold, wrong])
    assert summary["score"] == 50.0 and summary["backends"] == ["podman"]
    assert any(r.startswith("rebuilt from the Dockerfile on a local base") for r in summary["not_comparable_because"])


def test_a_service_the_solution_left_running_answers_the_verifier(podman):
    """As in Harbor, what the oracle started in the background still runs when the verifier queries it."""
    from unified.execution.verifier_tools import verifier_tools

    if isinstance(verifier_tools(), str):  # then the verifier stops the oracle's processes first: the service is gone
        pytest.skip(f"no private verifier on this host: {verifier_tools()}")
    built = build_task(ROOT / "fixture_container_service", "podman")
    assert built.status == "built", built.reason
    adapter = TerminalBench2Adapter(root=str(ROOT), backend="podman", build="always", tasks="fixture_container_service",
                                    agent="tool_calling")
    task = adapter.tasks()[0]
    gold = AgentLoop(adapter, GoldReplayer()).run([Job(task, 0)])[0]
    assert gold.error is None and gold.score == 1.0, gold.details.get("verifier_output")
    assert gold.details["agent_processes"] == KEPT_RUNNING
    assert not gold.details["pristine_toolchain"].startswith("none"), gold.details["pristine_toolchain"]  # the image's copy
    assert "service answered: service-ok" in gold.details["verifier_output"]
