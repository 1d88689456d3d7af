"""The service fixture task on podman, for the container threat-model tests (``test_verifier_*_containers.py``).

Needs root, podman, runc, debootstrap and tmux like tests/test_containers_real.py (the tests skip
otherwise); the fixture's base is rebuilt from the Debian archive once and its image is cached.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from unified.types import Episode, ToolCall

ROOT = Path(__file__).parents[1] / "fixtures" / "terminal_bench_containers"
MISSING = [tool for tool in ("podman", "runc", "debootstrap", "tmux") if shutil.which(tool) is None]
CONTAINER_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed: "
                       "apt-get install -y podman runc debootstrap tmux"),
    pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap (the fixture's rebuilt base) needs root"),
]


@contextmanager
def podman_service_adapter(conf_dir: Path) -> Iterator[Any]:
    """A Terminal-Bench adapter on podman (runc, the probe's ``containers.conf``) for ``fixture_container_service``."""
    from evaluators.terminal_bench import TerminalBench2Adapter
    from unified.execution.images import build_task
    from unified.execution.probe import containers_conf_text, probe_engine
    from unified.execution.verifier_tools import verifier_tools

    conf = conf_dir / "containers.conf"
    conf.write_text(containers_conf_text())
    old = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(conf)
    try:
        problem = probe_engine("podman", str(conf))
        if problem is not None:
            pytest.skip(f"podman cannot start a container here even with runc: {problem}")
        tools = verifier_tools()
        if isinstance(tools, str):  # then every episode stops the agent's processes first (docs/containers.md)
            pytest.skip(f"no private verifier on this host: {tools}")
        built = build_task(ROOT / "fixture_container_service", "podman")
        assert built.status == "built", built.reason
        yield TerminalBench2Adapter(root=str(ROOT), backend="podman", build="always",
                                    tasks="fixture_container_service", agent="tool_calling")
    finally:
        if old is None:
            os.environ.pop("CONTAINERS_CONF", None)
        else:
            os.environ["CONTAINERS_CONF"] = old


def attack(adapter, keys: str, marker: str, after: Callable[[Any], Any] | None = None):
    """A do-nothing agent that types ``keys`` (which print ``marker``) and stops; the episode's result, and
    ``after(env)`` taken once it is scored (the environment still open)."""
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        env.step([ToolCall("send_keys", {"keystrokes": keys, "duration": 2}, "c0"),
                  ToolCall("task_complete", {}, "c1")])
        assert marker in env.terminal.capture()
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        return result, (after(env) if after else None)
