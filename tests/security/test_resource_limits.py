"""Promise: a sandbox cannot take more host memory, disk or processes than its limits.

Attacks, each of which went through before the fix:

- print a lot: ``Sandbox.run`` read all output before cutting it (2 GiB of host memory per GiB
  printed); now output is capped while it streams and the host's memory stays flat;
- several processes, each under the per-process address-space limit, together far above it;
- fill the private ``/tmp`` (a tmpfs: host memory) with several files, each under the file-size
  limit;
- hold shared memory: ``MAP_SHARED`` anonymous memory, ``memfd_create`` files and System V
  segments were counted nowhere (4 x 100 MiB held against a 256 MiB limit, never killed);
- stay root (``host_uid=None``, where the kernel does not apply ``RLIMIT_NPROC``) and start more
  processes than the limit;
- fill the workspace with files, each under the file-size limit, or with many empty files
  (host inodes).

A limit that is hit is recorded as one line (``SandboxResult.limit`` and the end of stderr).
How the limits are enforced (cgroup v2 or the watchdog) is in ``Sandbox.limits_info``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from security._support import needs_bwrap, needs_local
from unified.execution import EnvironmentSpec, LocalBackend
from unified.sandbox import throwaway_sandbox

MIB = 1 << 20


def _no_cgroup_v2() -> str | None:
    """Why sandboxes here do not get a cgroup v2 (None: they do)."""
    try:
        from unified.sandbox.limits import cgroup_parent
    except ImportError:
        return "this version has no sandbox cgroups"
    parent, why = cgroup_parent()
    return None if parent is not None else f"no usable cgroup v2 here: {why}"


@needs_bwrap
def test_output_is_capped_while_it_streams_not_after():
    """The host reads 256 MiB of output with a 1 MiB cap: its peak memory stays far below what was printed."""
    script = textwrap.dedent("""
        import re
        from unified.sandbox import throwaway_sandbox
        with throwaway_sandbox(max_output_bytes=1 << 20, timeout_s=120) as box:
            res = box.run("head -c 268435456 /dev/zero | tr '\\\\0' a")
        assert len(res.stdout) < (1 << 20) + 200 and "268435456" not in res.stdout, len(res.stdout)
        assert "267386880 bytes cut" in res.stdout, res.stdout[-200:]
        status = open("/proc/self/status").read()
        print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1)) // 1024)   # peak resident memory, MiB
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    peak_mib = int(out.stdout.split()[-1])
    assert peak_mib < 200, f"host peak memory {peak_mib} MiB while reading 256 MiB of output"


@needs_bwrap
def test_memory_limit_covers_all_processes_together():
    with throwaway_sandbox(memory_mb=256, timeout_s=60) as box:
        res = box.run("for i in 1 2 3 4; do python3 -c 'import time; b = bytearray(150 << 20); time.sleep(20)' & done; "
                      "wait; echo survived")
        assert "survived" not in res.stdout
        assert res.limit and res.limit.startswith("memory limit of 256 MiB"), (res.limit, res.stderr[-500:])
        assert res.stderr.rstrip().endswith(f"[sandbox: {res.limit}]")
        assert box.limits_info["memory"] in ("cgroup v2", "watchdog")


SHARED_MEMORY = {
    "map_shared": "import mmap; m = mmap.mmap(-1, N, flags=mmap.MAP_SHARED)\n"
                  "for i in range(0, N, 1 << 20): m[i:i + (1 << 20)] = b'x' * (1 << 20)",
    "memfd": "import os; fd = os.memfd_create('held')\n"
             "for _ in range(N >> 20): os.write(fd, b'x' * (1 << 20))",
    "memfd_only_mapped": "import mmap, os; fd = os.memfd_create('held')\n"
                         "for _ in range(N >> 20): os.write(fd, b'x' * (1 << 20))\n"
                         "import ctypes; libc = ctypes.CDLL(None); libc.mmap.restype = ctypes.c_void_p\n"
                         "addr = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0); os.close(fd)",
    "sysv": "import ctypes; libc = ctypes.CDLL(None, use_errno=True); libc.shmat.restype = ctypes.c_void_p\n"
            "sid = libc.shmget(0, N, 0o1600); assert sid >= 0, ctypes.get_errno()\n"
            "addr = libc.shmat(sid, None, 0); ctypes.memset(addr, 1, N)",
}
"""Hold N bytes of one kind of shared memory (then sleep): each of 4 processes stays under RLIMIT_AS."""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SHARED_MEMORY))
def test_shared_memory_counts_against_the_memory_limit(kind, tmp_path):
    (tmp_path / "hold.py").write_text(f"N = 100 << 20\n{SHARED_MEMORY[kind]}\nprint('held', flush=True)\n"
                                      "import time; time.sleep(30)\n")
    with throwaway_sandbox(memory_mb=256, timeout_s=60, readonly_binds=[(str(tmp_path / "hold.py"), "/tmp/hold.py")]) as box:
        res = box.run("for i in 1 2 3 4; do python3 /tmp/hold.py & sleep 0.5; done; sleep 4; echo survived")
        held = res.stdout.count("held")
        assert held >= 1, res.stderr[-500:]  # the kind itself works in the sandbox
        if res.limit:  # killed for it (before or after all 4 held)
            assert "survived" not in res.stdout and res.limit.startswith("memory limit of 256 MiB"), res.limit
        else:  # or refused before the limit (System V: the namespace's cap); never more than the limit held
            assert kind == "sysv" and held * 100 <= 256, (held, res.stdout, res.stderr[-500:])
        assert "shared_memory" in box.limits_info, box.limits_info  # which guard held it is recorded


@needs_bwrap
def test_system_v_ipc_is_capped_in_the_sandboxs_own_namespace():
    """Segments nobody maps are invisible to the watchdog: they vanish on detach, and their total is capped."""
    with throwaway_sandbox(memory_mb=256, timeout_s=60) as box:
        probe = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n"
                 "print(libc.shmget(0, 512 << 20, 0o1600))\n"  # more than the memory limit: refused
                 "print(libc.shmget(0, 8 << 20, 0o1600))\n")
        res = box.run(["python3", "-c", probe])
        assert res.stdout.split()[0] == "-1" and int(res.stdout.split()[1]) >= 0, (res.stdout, res.stderr)
        # the segment made above, detached when its process ended, is gone; the caps cannot be raised
        res = box.run("tail -n +2 /proc/sysvipc/shm | wc -l; echo 1 > /proc/sys/kernel/shm_rmid_forced || echo refused; "
                      "echo 0 > /proc/sys/kernel/shm_rmid_forced || echo refused")
        assert res.stdout.split() == ["0", "refused", "refused"], (res.stdout, res.stderr)


@needs_bwrap
@pytest.mark.skipif(_no_cgroup_v2() is not None, reason=str(_no_cgroup_v2()))
def test_memory_limit_is_a_cgroup_where_cgroup_v2_is_usable():
    with throwaway_sandbox(memory_mb=256, timeout_s=60) as box:
        assert box.limits_info["memory"] == "cgroup v2"
        res = box.run("python3 -c 'b = bytearray(150 << 20); c = bytearray(150 << 20)' & "
                      "head -c 200M /dev/zero > /tmp/fill; wait; echo survived")
        assert res.limit and "cgroup v2" in res.limit, (res.limit, res.stderr[-300:])


@needs_bwrap
@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_tmpfs_counts_against_the_memory_limit(where):
    with throwaway_sandbox(memory_mb=256, timeout_s=60) as box:
        res = box.run(f"for i in 1 2 3; do head -c 150M /dev/zero > {where}/f$i; done; sleep 1; du -smc /tmp /dev/shm")
        held = int(res.stdout.split()[-2]) if res.stdout.split() else 0
        assert held <= 256 and (res.limit or "No space left" in res.stderr), (res.stdout, res.stderr[-300:])
        assert box.run("head -c 1M /dev/zero > /dev/big").exit_code != 0  # the rest of /dev is read-only
        # /dev/shm still works as shared memory (Python's multiprocessing locks live there)
        assert box.run(["python3", "-c", "import multiprocessing as m; m.Lock(); print('ok')"]).stdout == "ok\n"


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="only root can keep a sandbox at host uid 0")
def test_process_limit_holds_even_when_the_sandbox_stays_root():
    with throwaway_sandbox(host_uid=None, max_processes=20, timeout_s=60) as box:
        res = box.run("for i in $(seq 60); do sleep 20 & done; wait; echo survived")
        assert "survived" not in res.stdout
        assert res.limit and res.limit.startswith("process limit of 20"), (res.limit, res.stderr[-300:])


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="only a root caller drops each sandbox to a host uid of its own")
def test_live_sandboxes_of_one_process_never_share_a_host_uid():
    """The process limit is counted per host uid: 40 sandboxes open at once need 40 uids (32 repeated)."""
    import contextlib

    with contextlib.ExitStack() as stack:
        boxes = [stack.enter_context(throwaway_sandbox()) for _ in range(40)]
        for box in (boxes[0], boxes[32]):  # the files a sandbox writes belong to its own host uid
            assert box.run("touch mine").exit_code == 0
        owners = [(box.workspace / "mine").stat().st_uid for box in (boxes[0], boxes[32])]
        assert owners[0] != owners[1] and 0 not in owners, owners
        assert len({box.workspace.stat().st_uid for box in boxes}) == 40


@needs_bwrap
def test_disk_limit_of_the_workspace():
    with throwaway_sandbox(disk_mb=150, timeout_s=60) as box:
        res = box.run("for i in 1 2 3 4; do head -c 100M /dev/zero > f$i; done; sleep 3; echo survived")
        assert "survived" not in res.stdout
        assert res.limit and res.limit.startswith("disk limit of 150 MiB"), (res.limit, res.stderr[-300:])


@needs_bwrap
def test_sparse_files_count_with_their_apparent_size():
    """Sparse files use no blocks (free space never drops), yet a grader's copy writes them out whole."""
    with throwaway_sandbox(disk_mb=150, timeout_s=60) as box:
        res = box.run("for i in 1 2 3 4; do truncate -s 200M s$i || exit 1; done; sleep 5; echo survived")
        assert "survived" not in res.stdout
        assert res.limit and res.limit.startswith("disk limit of 150 MiB"), (res.limit, res.stderr[-300:])


@needs_bwrap
def test_file_count_limit_of_the_workspace():
    """Empty files use no disk bytes, only the host filesystem's inodes."""
    with throwaway_sandbox(max_files=2000, timeout_s=60) as box:
        res = box.run("mkdir d && cd d && i=0; while [ $i -lt 6000 ]; do : > f$i; i=$((i + 1)); done; sleep 3; "
                      "echo survived")
        assert "survived" not in res.stdout
        assert res.limit and res.limit.startswith("file limit of 2000 files"), (res.limit, res.stderr[-300:])


@needs_local
def test_local_backend_output_is_capped_with_a_marker():
    with LocalBackend().start(EnvironmentSpec()) as session:
        res = session.exec("head -c 20M /dev/zero | tr '\\0' b")
        assert len(res.stdout) < 5 * MIB and "bytes cut" in res.stdout[-200:]
        assert session.info["limits"]["memory"] in ("cgroup v2", "watchdog")


def test_container_engine_calls_are_capped_while_they_stream():
    from unified.execution.containers import _run_capped

    code, out, err, timed_out = _run_capped(["sh", "-c", "head -c 50000000 /dev/zero | tr '\\0' c"], timeout=60,
                                            cap=MIB)
    assert code == 0 and not timed_out and len(out) < MIB + 200 and "48951424 bytes cut" in out


@needs_local
def test_a_limit_hit_ends_a_local_session_with_its_name():
    from unified.execution import ExecutionError

    with LocalBackend().start(EnvironmentSpec(memory_mb=256)) as session:
        with pytest.raises(ExecutionError, match="memory limit of 256 MiB"):
            session.exec("for i in 1 2 3; do python3 -c 'b = bytearray(150 << 20); import time; time.sleep(20)' & done; wait",
                         timeout_s=60)
