"""Promise: on podman/docker nothing the agent can write runs with privileges or decides the reward.

The agent is root in its container and can replace any program there. Attacks, each a do-nothing
agent on the service fixture task (Terminal-Bench folder format, tests/fixtures/terminal_bench_containers)
that first swaps a program of the verifier's toolchain for a wrapper:

- R1 (host root): wrappers for ``unshare``, ``timeout``, ``bash`` and ``sh`` log the capabilities they run
  with; on the code before the fix ``unshare`` ran with every capability (``CAP_SYS_ADMIN``: a cgroup-v1
  ``release_agent`` then runs a script on the host as root, not repeated here). No program from the
  container's filesystem may hold a capability outside the container's default set plus the one marker
  capability the verifier keeps (``CAP_WAKE_ALARM``; :mod:`unified.execution.verifier`).
- R2 (forged reward): a fake ``bash`` that writes reward 1 when its argv names ``test.sh``, and a fake
  ``unshare`` that prints a reward tar, turned an honest 0.0 into 1.0. Now they score 0 and the result
  says ``tampered``.

Needs root, podman, runc, debootstrap and tmux like tests/test_containers_real.py (skips otherwise); the
fixture image is shared with tests/security/test_verifier_isolation_containers.py (one build, cached).
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

CAP_SYS_ADMIN, CAP_WAKE_ALARM = 21, 35


def _wrap(program: str, body: str) -> str:
    """Shell that moves ``/usr/bin/PROGRAM`` aside and puts a ``/bin/dash`` script with ``body`` in its place."""
    real = f"/usr/bin/{program}.real"
    chain = f'exec {real} "$@"'
    return (f"mv /usr/bin/{program} {real} && printf '%s\\n' '#!/bin/dash' "
            f"{_quote(body)} {_quote(chain)} > /usr/bin/{program} && chmod 755 /usr/bin/{program}; ")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


LOG_CAPS = "grep CapEff /proc/self/status >> /logs/agent/caps.$(basename $0)"
FAKE_BASH = _wrap("bash", 'case "$*" in *test.sh*) echo 1 > /logs/verifier/reward.txt; exit 0;; esac') + "echo fake-set"
FORGED_TAR = ("d=$(mktemp -d); mkdir $d/out; echo 1 > $d/out/reward.txt; echo 0 > $d/rc; : > $d/stdout; : > $d/stderr; "
              "cd $d && tar -c . | base64; exit 0")
# one episode for two attacks: the fake unshare logs its capabilities and prints a reward tar; spies on the rest
FAKE_UNSHARE_AND_SPIES = (_wrap("unshare", f"{LOG_CAPS}; {FORGED_TAR}")
                          + "".join(_wrap(p, LOG_CAPS) for p in ("timeout", "bash", "sh")) + "echo spies-set")


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
                                    tasks="fixture_container_service")
    finally:
        if old is None:
            os.environ.pop("CONTAINERS_CONF", None)
        else:
            os.environ["CONTAINERS_CONF"] = old


def _attack(adapter, keys: str, marker: str, after=None):
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        env.step([ToolCall("send_keys", {"keystrokes": keys, "duration": 3}, "c0"),
                  ToolCall("task_complete", {}, "c1")])
        assert marker in env.terminal.capture()
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        return result, (after(env) if after else None)


def _caps_logged(env) -> dict[str, set[int]]:
    out = env.session.exec(["sh", "-c", "grep -H CapEff /logs/agent/caps.* 2>/dev/null; true"], timeout_s=30).stdout
    seen: dict[str, set[int]] = {}
    for line in out.splitlines():
        path, _, value = line.partition(":CapEff:")
        mask = int(value.strip(), 16)
        seen.setdefault(path.rsplit(".", 1)[-1], set()).update(b for b in range(64) if mask >> b & 1)
    return seen


def test_no_program_of_the_container_runs_with_privileges_and_a_fake_unshare_prints_no_reward(adapter):
    result, caps = _attack(adapter, FAKE_UNSHARE_AND_SPIES, "spies-set", _caps_logged)
    assert "bash" in caps, f"the verifier's bash never ran: {caps}"
    for program, held in caps.items():
        assert CAP_SYS_ADMIN not in held, f"the container's {program} ran with CAP_SYS_ADMIN: {sorted(held)}"
        assert held <= set(range(CAP_WAKE_ALARM)) | {CAP_WAKE_ALARM}, (program, sorted(held))
    assert result.score == 0.0 and result.passed is False, result.details
    assert "/usr/bin/unshare" in result.details["tampered"] and result.details["stop_reason"] == "tampered"


def test_a_fake_bash_cannot_write_the_reward(adapter):
    result, _ = _attack(adapter, FAKE_BASH, "fake-set")
    assert result.score == 0.0 and result.passed is False, result.details
    assert "/usr/bin/bash" in result.details["tampered"] and result.details["stop_reason"] == "tampered"


FAKE_MISSING_PYTEST = _wrap("bash", 'case "$*" in *test.sh*) echo "bash: line 9: pytest: command not found"; exit 127;; '
                            'esac') + "echo fake-set"


def test_a_fake_bash_cannot_make_a_failed_answer_an_infrastructure_error(adapter):
    """R3 on podman: the fake bash prints a missing-tool line and writes no reward, which read as infrastructure."""
    result, _ = _attack(adapter, FAKE_MISSING_PYTEST, "fake-set")
    assert result.error is None and result.score == 0.0 and result.passed is False, result.error
    assert "/usr/bin/bash" in result.details["tampered"]
