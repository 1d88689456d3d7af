"""unified.execution: the local sandbox backend for real, container engines by command line
(and for real where an engine runs), tmux terminals, backend selection."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from unified.execution import (
    AUTO_ORDER,
    BACKENDS,
    BackendUnavailable,
    EnvironmentSpec,
    ExecutionError,
    LocalBackend,
    LocalImageError,
    TmuxTerminal,
    get_backend,
)
from unified.execution.containers import (
    KEEPALIVE,
    ApptainerBackend,
    DockerBackend,
    PodmanBackend,
    apptainer_exec_argv,
    apptainer_start_argv,
    build_argv,
    exec_argv,
    image_tag,
    run_argv,
)
from unified.registry import UnknownNameError
from _process_support import processes_with
from _requires import needs_local




@needs_local
def test_local_session_runs_commands_in_one_persistent_sandbox(tmp_path):
    spec = EnvironmentSpec(workdir="/app", extra_dirs=["/tests", "/logs/verifier"], env={"GREETING": "hi"})
    with LocalBackend().start(spec) as s:
        res = s.exec("pwd; echo $GREETING > note; cat note; id -un")
        assert res.ok and res.stdout.split() == ["/app", "hi", "agent"] and res.backend == "local"
        # /tmp and background processes persist between commands (one sandbox, not one per call)
        assert s.exec("echo kept > /tmp/k; (sleep 30 &) ; echo started").ok
        assert s.exec("cat /tmp/k").stdout == "kept\n"
        assert "sleep 30" in s.exec("ps -eo args").stdout
        assert s.exec(["cat"], stdin="piped").stdout == "piped"
        assert s.exec("exit 3").exit_code == 3
        # nested extra dir: writable inside, readable from the host
        assert s.exec("echo 1 > /logs/verifier/reward.txt").ok
        assert s.read_file("/logs/verifier/reward.txt") == b"1\n"
        s.copy_out("/logs/verifier", tmp_path / "verifier")
        assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
        # top-level extra dir: filled from the host, read-only inside
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / "test.sh").write_text("echo ok\n")
        s.copy_in(tmp_path / "t", "/tests")
        assert s.exec("sh /tests/test.sh").stdout == "ok\n"
        assert not s.exec("echo x > /tests/evil").ok
        # files in and out of the workspace
        s.write_file("sub/a.txt", "alpha")
        assert (s.host_workspace / "sub" / "a.txt").read_text() == "alpha"
        assert s.read_file("/app/sub/a.txt") == b"alpha"
        with pytest.raises(FileNotFoundError):
            s.read_file("missing.txt")
        # confinement: no network, no writes outside
        net = s.exec(["python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), 2)"], timeout_s=10)
        assert net.exit_code != 0
        assert not s.exec("echo x > /etc/evil").ok
        ws = s.host_workspace
    assert not ws.exists()  # the session's state is removed on close


@needs_local
def test_local_backend_kills_a_runaway_command_at_its_limit_and_leaves_nothing():
    marker = str(900000 + uuid.uuid4().int % 99999)
    with LocalBackend().start(EnvironmentSpec()) as s:
        start = time.monotonic()
        res = s.exec(f"sleep {marker} & sleep {marker}1 & while :; do :; done", timeout_s=1.5)
        elapsed = time.monotonic() - start
        assert res.timed_out and res.exit_code == -9
        assert 1.4 <= elapsed < 5, elapsed
        deadline = time.monotonic() + 5
        while processes_with(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(f"sleep {marker}") == []
        # the session is still usable after a timeout
        assert s.exec("echo alive").stdout == "alive\n"
        # a process that left the command's group survives the command, not the session
        assert s.exec(f"setsid sleep {marker}2 > /dev/null 2>&1 < /dev/null & echo ok").ok
        assert processes_with(f"sleep {marker}2")
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []


@needs_local
def test_local_backend_replays_a_dockerfile(tmp_path):
    ctx = tmp_path / "environment"
    (ctx / "src").mkdir(parents=True)
    (ctx / "src" / "data.txt").write_text("payload\n")
    (ctx / "Dockerfile").write_text(
        "FROM ubuntu:24.04\n# comment\nENV MODE=fixture\nWORKDIR /app\nCOPY src/ /app/src/\n"
        "RUN echo built-$MODE > built.txt \\\n    && cp src/data.txt copy.txt\nCMD [\"bash\"]\n")
    with LocalBackend().start(EnvironmentSpec(build_context=ctx, name="fixture")) as s:
        assert s.workdir == "/app"
        assert s.exec("cat built.txt copy.txt src/data.txt; echo $MODE").stdout == \
            "built-fixture\npayload\npayload\nfixture\n"
        assert s.info["base_image"] == "ubuntu:24.04"
        assert any(item.startswith("CMD") for item in s.info["not_reproduced"])
    (ctx / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get install -y nothing-here\n")
    with pytest.raises(LocalImageError, match=r"Dockerfile:3: RUN failed"):
        LocalBackend().start(EnvironmentSpec(build_context=ctx))
    (ctx / "Dockerfile").write_text("WORKDIR /app\n")
    with pytest.raises(ValueError, match=r"Dockerfile:1: a Dockerfile starts with FROM"):
        LocalBackend().start(EnvironmentSpec(build_context=ctx))


@needs_local
def test_tmux_terminal_types_keys_and_captures_the_screen():
    with LocalBackend().start(EnvironmentSpec(workdir="/app")) as s:
        if s.exec("command -v tmux").exit_code != 0:
            pytest.skip("tmux is not installed (apt-get install -y tmux)")
        term = TmuxTerminal(s, width=100, height=20)
        term.start()
        term.send_keys("echo $((6*7)) > answer.txt; cat answer.txt\n")
        term.wait(5)
        assert "42" in term.capture()
        assert (s.host_workspace / "answer.txt").read_text() == "42\n"
        term.send_keys("sleep 60\n")
        waited = term.wait(0.6)
        assert waited >= 0.5  # not idle: sleep runs in the foreground
        term.send_keys("C-c")
        term.wait(3)
        assert term.current_command() in ("bash", "sh")
    assert TmuxTerminal.key_sequence("ls\nC-c") == [("text", "ls"), ("key", "Enter"), ("text", "C-c")]
    assert TmuxTerminal.key_sequence("C-c") == [("key", "C-c")]


# -- container engines: command construction and error paths (no engine needed) ----------


def test_docker_command_lines_carry_the_spec(tmp_path):
    spec = EnvironmentSpec(image="ubuntu:24.04", workdir="/app", env={"A": "1"}, cpus=2, memory_mb=4096,
                           max_processes=100)
    argv = run_argv("docker", spec, "ubuntu:24.04", "unified-x")
    assert argv[:3] == ["docker", "run", "-d"]
    for flag, value in [("--network", "none"), ("--cpus", "2"), ("--memory", "4096m"), ("--pids-limit", "100"),
                        ("-w", "/app"), ("-e", "A=1"), ("--name", "unified-x"), ("--label", "unified.session=unified-x")]:
        assert argv[argv.index(flag) + 1] == value
    assert argv[-len(KEEPALIVE) + 1:] == KEEPALIVE[1:] and "ubuntu:24.04" in argv
    assert "--network" not in run_argv("podman", EnvironmentSpec(network=True), "img", "n")
    ex = exec_argv("podman", "unified-x", "make test", 30, workdir="/app", interactive=True)
    assert ex[:3] == ["podman", "exec", "-i"] and ex[ex.index("unified-x") + 1:] == \
        ["timeout", "-k", "5", "30", "sh", "-c", "make test"]
    assert "timeout" not in exec_argv("docker", "n", ["ls"], 5, has_timeout=False)
    ctx = tmp_path / "env"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM alpine\n")
    spec = EnvironmentSpec(build_context=ctx, name="My Task")
    tag = image_tag(spec)
    assert tag.startswith("unified-my-task:") and tag == image_tag(spec)
    assert build_argv("docker", spec, tag) == ["docker", "build", "-t", tag, "-f", str(ctx / "Dockerfile"), str(ctx)]
    (ctx / "Dockerfile").write_text("FROM alpine\nRUN true\n")
    assert image_tag(spec) != tag  # a changed context is rebuilt


def test_apptainer_command_lines(tmp_path):
    spec = EnvironmentSpec(image="python:3.12", memory_mb=1024, env={"K": "v"})
    argv = apptainer_start_argv("apptainer", spec, tmp_path / "x.sif", "unified-i", tmp_path)
    assert argv[:3] == ["apptainer", "instance", "start"]
    assert {"--containall", "--cleanenv", "--writable-tmpfs", "--no-home"} <= set(argv)
    assert argv[argv.index("--network") + 1] == "none" and argv[-2:] == [str(tmp_path / "x.sif"), "unified-i"]
    ex = apptainer_exec_argv("apptainer", "unified-i", "ls", 9, workdir="/testbed")
    assert ex[ex.index("--pwd") + 1] == "/testbed"
    assert ex[-8:] == ["instance://unified-i", "timeout", "-k", "5", "9", "sh", "-c", "ls"]


@pytest.mark.parametrize("backend_cls", [DockerBackend, PodmanBackend, ApptainerBackend])
def test_a_missing_engine_is_a_clear_unavailability_not_a_crash(backend_cls, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no engine on PATH at all
    backend = backend_cls()
    problem = backend.unavailable_reason()
    assert isinstance(problem, BackendUnavailable)
    assert "not installed" in problem.reason and problem.how_to_fix
    with pytest.raises(BackendUnavailable):
        backend.start(EnvironmentSpec(image="alpine"))


def test_docker_client_without_a_daemon_says_so():
    import shutil

    if shutil.which("docker") is None:
        pytest.skip("no docker client here")
    problem = DockerBackend().unavailable_reason()
    if problem is None:
        pytest.skip("a docker daemon runs here (see test_live_engine)")
    assert "not reachable" in problem.reason and "daemon" in problem.how_to_fix


def test_get_backend_by_name_env_and_auto(monkeypatch):
    with pytest.raises(UnknownNameError, match="Did you mean 'podman'"):
        get_backend("podmn")
    monkeypatch.setenv("UNIFIED_EXEC_BACKEND", "local")
    assert get_backend().name == "local"
    monkeypatch.delenv("UNIFIED_EXEC_BACKEND")
    if not any(BACKENDS.get(name)().available() for name in AUTO_ORDER):  # a fresh machine: nothing installed
        with pytest.raises(BackendUnavailable, match="apt-get install -y bubblewrap"):
            get_backend("auto")
        return
    backend = get_backend("auto")
    assert backend.available()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["docker", "podman", "apptainer"])
def test_live_engine(name, tmp_path):
    """Needs a working engine and an image (``$UNIFIED_TEST_IMAGE``, default alpine:3.20); skipped otherwise."""
    backend = get_backend(name)
    problem = backend.unavailable_reason()
    if problem is not None:
        pytest.skip(f"{name} unavailable here: {problem}")
    image = os.environ.get("UNIFIED_TEST_IMAGE", "alpine:3.20")
    try:
        session = backend.start(EnvironmentSpec(image=image, workdir="/work", extra_dirs=["/logs/verifier"]))
    except ExecutionError as exc:
        pytest.skip(f"{name}: cannot get {image}: {exc}")
    with session as s:
        assert s.exec("pwd").stdout.strip() == "/work"
        s.write_file("/logs/verifier/reward.txt", "1\n")
        assert s.read_file("/logs/verifier/reward.txt") == b"1\n"
        res = s.exec("while :; do :; done", timeout_s=2)
        assert res.timed_out


def test_a_locally_built_image_becomes_a_sif_through_a_saved_archive(tmp_path):
    """Apptainer has no ``podman-daemon://`` source: a built image is saved, then ``apptainer build`` reads the archive.

    Apptainer is not installable here (no Debian package), so its half is the command line; podman's
    half runs for real where podman is installed and root: the archive it saves is an OCI layout.
    """
    import shutil
    import subprocess
    import tarfile

    from unified.execution.containers import local_image_to_sif_argvs

    sif = tmp_path / "t.sif"
    save, build = local_image_to_sif_argvs("podman", "unified-x:1", "apptainer", sif, tmp_path)
    assert save == ["podman", "save", "--format", "oci-archive", "-o", str(tmp_path / "image.oci.tar"), "unified-x:1"]
    assert build == ["apptainer", "build", "--force", str(sif), f"oci-archive://{tmp_path / 'image.oci.tar'}"]
    dsave, dbuild = local_image_to_sif_argvs("docker", "unified-x:1", "singularity", sif, tmp_path)
    assert dsave[:2] == ["docker", "save"] and dbuild[-1] == f"docker-archive://{tmp_path / 'image.docker.tar'}"
    assert not any("daemon://" in a for a in save + build + dsave + dbuild)

    if shutil.which("podman") is None or os.geteuid() != 0:
        return
    from unified.execution.probe import PROBE_IMAGE, probe_tar

    if subprocess.run(["podman", "image", "inspect", PROBE_IMAGE], capture_output=True).returncode != 0:
        subprocess.run(["podman", "import", "-", PROBE_IMAGE], input=probe_tar(), capture_output=True, check=True)
    save, _ = local_image_to_sif_argvs("podman", PROBE_IMAGE, "apptainer", sif, tmp_path)
    subprocess.run(save, capture_output=True, check=True, timeout=120)
    with tarfile.open(save[-2]) as tar:
        assert {"oci-layout", "index.json"} <= set(tar.getnames())


def test_an_engine_step_that_fails_or_hangs_is_one_error_naming_the_step_and_the_command():
    """Builds, pulls and SIF conversions all go through one runner: what failed, the command, the exit
    status and the end of its stderr (the useful end of a long build log), or the timeout."""
    import sys

    from unified.execution.containers import _run_step

    _run_step([sys.executable, "-c", "pass"], 30, "python: nothing")  # success: no error, nothing returned
    noisy = "import sys; sys.stderr.write('x' * 5000 + ' the last line'); sys.exit(3)"
    with pytest.raises(ExecutionError) as failed:
        _run_step([sys.executable, "-c", noisy], 30, "podman: building t:1")
    head, tail = str(failed.value).split("\n", 1)
    assert head.startswith("podman: building t:1 failed (exit 3): ") and sys.executable in head
    assert tail.endswith("x the last line") and len(tail) == 2000
    with pytest.raises(ExecutionError, match=r"^apptainer: pulling alpine timed out after 1s: .*time\.sleep"):
        _run_step([sys.executable, "-c", "import time; time.sleep(60)"], 1, "apptainer: pulling alpine")


@needs_local
def test_a_session_whose_start_fails_is_closed_and_leaves_nothing(monkeypatch):
    """A backend's start closes the half-made session when its start fails: the local session's state
    (workspace, keeper copy) made before the refusal is removed, and the refusal is what is raised."""
    import shutil
    import tempfile
    from pathlib import Path

    from unified.execution import LocalBackend, LocalImageError

    base = Path(tempfile.mkdtemp(prefix="unified-test-start-", dir="/tmp"))
    try:
        os.chmod(base, 0o711)  # traversable, so the local session and its sandbox keep their state here
        monkeypatch.setattr(tempfile, "tempdir", str(base))
        with pytest.raises(LocalImageError, match="'/etc/unified-x' is inside a system directory"):
            LocalBackend().start(EnvironmentSpec(extra_dirs=["/etc/unified-x"]))
        assert list(base.iterdir()) == []
        with LocalBackend().start(EnvironmentSpec()) as session:  # the same place serves a session that starts
            assert session.exec("pwd").stdout.strip() == "/workspace"
            assert any(p.name.startswith("unified-local-") for p in base.iterdir())
        assert list(base.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
