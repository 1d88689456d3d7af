"""Promise: on podman/docker the agent's files cannot steer the verifier's toolchain (issue 42, R1).

Before: the agent (root in its container, wrong answer) planted ``/usr/local/bin/apt-get``, a
``/usr/local/bin/python3``, a ``.pth`` file in ``dist-packages`` or an ``/etc/apt/apt.conf.d`` hook; the
published ``test.sh`` runs ``apt-get update`` and Python first, so the private verifier ran the planted
program, which wrote reward 1 and killed the checker: score 1.0, not ``tampered`` (the old check was a
deny-list: additions under ``/usr/local`` were flagged only for shells, ``.pth`` files and apt hooks never).
Now the verifier runs on the image's own toolchain (an overlay of the image's copy of ``/usr``, ``/etc/apt``
..., :mod:`unified.execution.pristine`) with a read-only ``/tests``, and any change the agent made inside a
toolchain path is ``tampered``: score 0, each path named.

One episode carries all four plants (CI time); the task is the service fixture with a ``test.sh`` in the
published style (``apt-get update``, then Python, then the check), its environment unchanged, so the
cached image is reused. Root only, like the other container tests.
"""

from __future__ import annotations

import base64
import shutil

from evaluators.terminal_bench import TerminalBench2Adapter
from security._containers import CONTAINER_MARKS, ROOT
from unified.types import Episode, ToolCall

pytestmark = CONTAINER_MARKS

PUBLISHED_STYLE_TEST_SH = """#!/bin/bash
# Fixture verifier in the published Terminal-Bench style (tools first, then the checker); reward 1 when a
# service on 127.0.0.1:7777 answers `service-ok`.
apt-get update -qq > /dev/null 2>&1 || true
python3 -c 'print("checker starts")' 2>/dev/null || true
if (echo probe > /tests/.probe) 2>/dev/null; then echo "tests writable"; else echo "tests read-only"; fi
mkdir -p /logs/verifier
answer=""
if exec 3<>/dev/tcp/127.0.0.1/7777; then
  read -r -t 5 answer <&3
fi
echo "service answered: ${answer:-nothing}"
if [ "$answer" = "service-ok" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""

FORGE = "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\nkill -9 $PPID\n"
"""A planted program: writes reward 1 and kills its caller (the checker) before it writes the real reward."""
PLANTS = {
    "/usr/local/bin/apt-get": FORGE,
    "/usr/local/bin/python3": FORGE,
    "/usr/lib/python3/dist-packages/zz_forge.pth": "import os; os.system('echo 1 > /logs/verifier/reward.txt')\n",
    "/etc/apt/apt.conf.d/00forge": ('APT::Update::Pre-Invoke {"echo 1 > /logs/verifier/reward.txt; '
                                    'kill -9 $(cut -d\\" \\" -f4 /proc/$PPID/stat)";};\n'),
}


def _plant_keys() -> str:
    script = "".join(f"mkdir -p {path.rsplit('/', 1)[0]} && printf %s {base64.b64encode(body.encode()).decode()} "
                     f"| base64 -d > {path} && chmod 755 {path}\n" for path, body in PLANTS.items())
    return f"echo {base64.b64encode(script.encode()).decode()} | base64 -d | sh && echo planted-$((1+1))"


def test_planted_toolchain_files_are_tampered_and_never_run(podman_service_adapter, tmp_path):
    task_dir = tmp_path / "fixture_container_service"
    shutil.copytree(ROOT / "fixture_container_service", task_dir)  # the same environment/: the same image
    (task_dir / "tests" / "test.sh").write_text(PUBLISHED_STYLE_TEST_SH)
    adapter = TerminalBench2Adapter(root=str(tmp_path), backend="podman", build="always",
                                    tasks="fixture_container_service", agent="tool_calling")
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        env.step([ToolCall("send_keys", {"keystrokes": _plant_keys(), "duration": 3}, "c0"),
                  ToolCall("task_complete", {}, "c1")])
        assert "planted-2" in env.terminal.capture()
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
    details = result.details
    assert result.score == 0.0 and result.passed is False, details
    assert details.get("stop_reason") == "tampered", details
    for path in PLANTS:
        assert path in details["tampered"], (path, details["tampered"])
    # the verifier ran the image's programs, not the planted ones, and could not write its tests
    assert details["reward_claimed"] == 0.0, details.get("verifier_output")
    assert "service answered: nothing" in details["verifier_output"]
    assert "tests read-only" in details["verifier_output"]


TOOLS_TEST_SH = """#!/bin/bash
# Fixture verifier that uses the system's tools as a test.sh does when it installs what it needs: ldconfig
# (dpkg's libc-bin trigger after an apt-get install) renames a new /etc/ld.so.cache over the old one.
mkdir -p /logs/verifier
ldconfig; rc=$?
echo "ldconfig exit $rc"
grep -q "$(cat /proc/sys/kernel/hostname)" /etc/hosts && echo "engine hosts file kept"
if [ "$rc" = 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_the_pristine_toolchain_lets_the_verifier_run_ldconfig(podman_service_adapter, tmp_path):
    """The image's toolchain files are plain files in the verifier's private view of /etc, not bind mounts:
    before, ldconfig's rename over /etc/ld.so.cache failed with EBUSY (dpkg: 'Errors were encountered while
    processing: libc-bin'), so a test.sh that checks it scored an untouched container 0. The engine's own
    files under /etc (the hosts file naming the container) are still there."""
    task_dir = tmp_path / "fixture_container_service"
    shutil.copytree(ROOT / "fixture_container_service", task_dir)
    (task_dir / "tests" / "test.sh").write_text(TOOLS_TEST_SH)
    adapter = TerminalBench2Adapter(root=str(tmp_path), backend="podman", build="always",
                                    tasks="fixture_container_service", agent="tool_calling")
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        env.step([ToolCall("task_complete", {}, "c0")])
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
    details = result.details
    assert details.get("pristine_toolchain") and not details["pristine_toolchain"].startswith("none"), details
    assert "ldconfig exit 0" in details["verifier_output"], details.get("verifier_output")
    assert "engine hosts file kept" in details["verifier_output"], details.get("verifier_output")
    assert result.score == 1.0 and details.get("stop_reason") != "tampered", details
