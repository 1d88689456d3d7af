"""A throwaway one-node Slurm cluster on this machine, for testing the scripts in slurm/.

Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them): ``munged`` with its own key
and socket, ``slurmctld`` and ``slurmd`` with ``SlurmUser=root``,
``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none`` (no cgroups needed), all
state, spool, logs and configs in a temporary directory, on free ports. The node declares
``gpus`` GPUs as GRES backed by character devices made with ``mknod`` (NVIDIA's major number 195,
minors 0..gpus-1, in the temporary directory): slurmd accepts them as it accepts /dev/nvidia*, schedules
them and binds them to steps (``CUDA_VISIBLE_DEVICES``), so ``--gpus-per-node``/``--gres`` requests and
each step's binding are checked for real; nothing can compute on them. Where ``mknod`` is not allowed
(not root) they are plain files: slurmd then schedules them but binds none (``char_devices`` says which). ``partitions`` replaces the one default partition (e.g. a drained default that refuses
jobs, beside a partition with a ``MaxTime``). The client commands
find the cluster through ``SLURM_CONF`` (see :meth:`SlurmCluster.env`). :meth:`stop` always
stops the three daemons (and cancels jobs left behind).

Tests that need the default layout share one such cluster for the session (:func:`shared_cluster`, the
``slurm_cluster`` fixture of ``tests/conftest.py``: a start and stop cost ~6 s on a 2-core CPU); a test
with another layout starts its own after :func:`stop_shared_cluster`, so two clusters never run at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "squeue", "scancel", "srun")
POLL_S = 0.5
"""How often :meth:`SlurmCluster.wait` and :meth:`SlurmCluster.wait_array` ask ``scontrol`` (a ~20 ms call)."""


def missing_binaries() -> list[str]:
    found = {name: shutil.which(name) or next((p for p in (f"/usr/sbin/{name}",) if os.path.exists(p)), None)
             for name in DAEMONS + CLIENTS}
    return [name for name, path in found.items() if not path]


def require_slurm() -> None:
    """Skip the calling test, saying how CI gets them, when Slurm or munge is not installed."""
    missing = missing_binaries()
    if missing:
        import pytest

        pytest.skip(f"Slurm/munge not installed ({', '.join(missing)} missing); .ci/run installs them with "
                    "`apt-get install slurm-wlm munge`")


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SlurmCluster:
    """Start with :meth:`start`, always :meth:`stop` (use as a context manager)."""

    def __init__(self, root: Path, *, gpus: int = 2, partitions: tuple[str, ...] = ()):
        """``partitions``: ``PartitionName=`` lines without ``Nodes=`` (this node is added)."""
        self.root = Path(root)
        self.gpus = gpus
        self.partitions = partitions or ("PartitionName=debug Default=YES MaxTime=INFINITE State=UP",)
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.char_devices = False
        """True when the GPUs are character devices (steps get ``CUDA_VISIBLE_DEVICES``)."""

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o755)  # munged wants its socket dir searchable
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        cpus = os.cpu_count() or 1
        mem_mb = max(int(Path("/proc/meminfo").read_text().split()[1]) // 1024 - 1024, 512)
        r = self.root
        self.char_devices = bool(self.gpus)
        for i in range(self.gpus):
            try:
                os.mknod(r / f"fake-gpu{i}", stat.S_IFCHR | 0o600, os.makedev(195, i))
            except PermissionError:  # not root: a plain file (scheduled, never bound)
                (r / f"fake-gpu{i}").write_text("")
                self.char_devices = False
        (r / "gres.conf").write_text(f"NodeName={self.host} Name=gpu File={r}/fake-gpu[0-{self.gpus - 1}]\n"
                                     if self.gpus else "")
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        partitions = "\n".join(f"{line} Nodes={self.host}" for line in self.partitions)
        self.conf.write_text(f"""\
ClusterName=unifiedtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdTimeout=120
InactiveLimit=0
KillWait=10
GresTypes=gpu
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb}{gres} State=UNKNOWN
{partitions}
""")

    def start(self, timeout_s: float = 60.0) -> None:
        self._write_config()
        m = self.root / "munge"
        subprocess.run([_binary("munged"), f"--socket={self.munge_socket}", f"--key-file={m / 'munge.key'}",
                        f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                        f"--seed-file={m / 'munged.seed'}", "--force"], check=True, capture_output=True, text=True)
        subprocess.run([_binary("slurmctld"), "-c", "-f", str(self.conf)], check=True, env=self.env(),
                       capture_output=True, text=True)
        subprocess.run([_binary("slurmd"), "-f", str(self.conf)], check=True, env=self.env(), capture_output=True,
                       text=True)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env(), capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip() in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.3)
        raise RuntimeError(f"slurm did not come up in {timeout_s}s:\n{self.logs()}")

    def stop(self) -> None:
        if self.conf.exists():
            subprocess.run(["scancel", "--full", "--user", "root"], env=self.env(), capture_output=True)
        # all three at once: munged stopped after the Slurm daemons takes 2 s more (measured: 1.4 s vs 5.2 s)
        pids = [_pid(self.root / "slurmd.pid"), _pid(self.root / "slurmctld.pid"),
                _pid(self.root / "munge" / "munged.pid")]
        pids = [pid for pid in pids if pid and _alive(pid)]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for pid in pids:
            self._wait_gone(pid)

    def cancel_all(self, timeout_s: float = 60.0) -> None:
        """Cancel every job left on the cluster and wait until none is left (between tests sharing it)."""
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env(), capture_output=True)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            out = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env(), capture_output=True, text=True)
            if out.returncode == 0 and not out.stdout.strip():
                return
            time.sleep(0.5)
        raise TimeoutError(f"jobs still on the shared cluster after {timeout_s}s: {out.stdout}\n{self.logs()}")

    @staticmethod
    def _wait_gone(pid: int, timeout_s: float = 20.0) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline and _alive(pid):
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

    # -- jobs -------------------------------------------------------------------------------
    def sbatch(self, script: str | os.PathLike[str], *args: str, env: dict[str, str] | None = None,
               sbatch_args: tuple[str, ...] = (), cwd: str | os.PathLike[str] | None = None) -> int:
        out = subprocess.run(["sbatch", "--parsable", *sbatch_args, str(script), *args], env={**self.env(),
                             **(env or {})}, capture_output=True, text=True, cwd=cwd)
        if out.returncode != 0:
            raise RuntimeError(f"sbatch failed: {out.stderr}")
        return int(out.stdout.strip().split(";")[0])

    def job_state(self, job_id: int) -> dict[str, str]:
        out = subprocess.run(["scontrol", "show", "job", str(job_id), "-o"], env=self.env(), capture_output=True,
                             text=True)
        fields = {}
        for token in out.stdout.split():
            if "=" in token:
                key, value = token.split("=", 1)
                fields[key] = value
        return fields

    def node_idle(self) -> bool:
        """Whether the node runs nothing and is cleaning up after nothing (state IDLE: not ALLOCATED, MIXED or
        COMPLETING)."""
        out = subprocess.run(["scontrol", "show", "node", self.host, "-o"], env=self.env(), capture_output=True,
                             text=True)
        state = dict(t.split("=", 1) for t in out.stdout.split() if "=" in t).get("State", "")
        return state.split("+")[0] == "IDLE" and "COMPLETING" not in state

    def wait(self, job_id: int, timeout_s: float = 600.0) -> dict[str, str]:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            state = self.job_state(job_id)
            if state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
                return state
            time.sleep(POLL_S)
        subprocess.run(["scancel", str(job_id)], env=self.env(), capture_output=True)
        raise TimeoutError(f"job {job_id} still running after {timeout_s}s: {self.job_state(job_id)}")

    def wait_array(self, job_id: int, timeout_s: float = 600.0) -> dict[int, dict[str, str]]:
        """Wait until every task of array job ``job_id`` has ended; their fields by array index."""
        deadline = time.time() + timeout_s
        final = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
        while time.time() < deadline:
            out = subprocess.run(["scontrol", "show", "job", str(job_id), "-o"], env=self.env(), capture_output=True,
                                 text=True)
            tasks, pending = {}, False
            for line in out.stdout.splitlines():
                fields = dict(t.split("=", 1) for t in line.split() if "=" in t)
                if fields.get("ArrayTaskId", "").isdigit():
                    tasks[int(fields["ArrayTaskId"])] = fields
                else:  # tasks not started yet are one record, e.g. ArrayTaskId=1-3
                    pending = True
            if tasks and not pending and all(f.get("JobState") in final for f in tasks.values()):
                return tasks
            time.sleep(POLL_S)
        subprocess.run(["scancel", str(job_id)], env=self.env(), capture_output=True)
        raise TimeoutError(f"array job {job_id} still running after {timeout_s}s")

    def run_job(self, script: str | os.PathLike[str], *args: str, log: Path, name: str,
                env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                timeout_s: float = 600.0) -> str:
        """Submit ``script`` on the one node, wait for it, fail with its log and the daemons' logs unless it
        COMPLETED with exit code 0; return the job's log text. A CPU job: ``--gpus-per-node=0`` overrides
        the scripts' ``#SBATCH --gpus-per-node``."""
        job = self.sbatch(script, *args, env=env, cwd=cwd,
                          sbatch_args=("--nodes=1", "--exclusive", "--gpus-per-node=0", f"--output={log}",
                                       f"--job-name={name}"))
        state = self.wait(job, timeout_s=timeout_s)
        text = log.read_text() if log.exists() else ""
        assert state.get("JobState") == "COMPLETED" and state.get("ExitCode") == "0:0", \
            f"{state}\n--- job log ---\n{text[-3000:]}\n--- daemons ---\n{self.logs()}"
        return text

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*.log")) + [self.root / "munge" / "munged.log"]:
            if path.exists():
                parts.append(f"== {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-20:]))
        return "\n".join(parts)


_shared: SlurmCluster | None = None


def shared_cluster(make_root) -> SlurmCluster:
    """The session's default cluster (:class:`SlurmCluster` defaults: 2 GPUs, one partition), started on first
    use in the directory ``make_root()`` returns; stopped by :func:`stop_shared_cluster`."""
    global _shared
    if _shared is None:
        cluster = SlurmCluster(make_root())
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        _shared = cluster
    return _shared


def stop_shared_cluster() -> None:
    """Stop the shared cluster if it runs (at the session's end, and before a test starts a cluster of its own)."""
    global _shared
    if _shared is not None:
        cluster, _shared = _shared, None
        cluster.stop()
