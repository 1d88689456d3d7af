"""The private verifier's protocol (unified.execution.verifier) without an engine; the real runs are in
tests/test_containers_real.py and tests/security/test_verifier_isolation_containers.py."""

from __future__ import annotations

import base64
import io
import subprocess
import tarfile

import pytest

from unified.execution.containers import exec_argv
from unified.execution.verifier import PRIVATE_VERIFIER_SCRIPT, files_tar, parse_private_output


def _tar(entries: dict[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return base64.encodebytes(buf.getvalue()).decode()


def test_a_private_run_gives_its_status_output_and_reward_files():
    run = parse_private_output(_tar({"./rc": b"0\n", "./stdout": b"ok\n", "./stderr": b"",
                                     "./out/reward.txt": b"1\n", "./out/sub/r.json": b"{}",
                                     "../escape": b"x"}), 1.5, 60)
    assert (run.exit_code, run.stdout, run.timed_out, run.failure()) == (0, "ok\n", False, "")
    assert run.files == {"reward.txt": b"1\n", "sub/r.json": b"{}"}
    assert run.read("/logs/verifier/reward.txt", "/logs/verifier") == b"1\n"
    with pytest.raises(FileNotFoundError):
        run.read("/logs/verifier/reward.json", "/logs/verifier")
    assert parse_private_output(_tar({"rc": b"124\n"}), 60.0, 60).timed_out


def test_a_replaced_private_directory_or_garbage_is_no_result():
    run = parse_private_output(_tar({"tampered": b"/logs/verifier\n", "out/reward.txt": b"1\n"}), 1.0, 60)
    assert run.files == {} and "/logs/verifier was replaced" in run.failure()
    with pytest.raises(ValueError, match="not a tar"):
        parse_private_output("1\n", 1.0, 60)
    with pytest.raises(ValueError, match="no exit status"):
        parse_private_output(_tar({"out/reward.txt": b"1\n"}), 1.0, 60)


def test_the_verifier_exec_is_privileged_and_takes_its_files_on_stdin(tmp_path):
    argv = exec_argv("podman", "c1", ["unshare", "-m", "true"], 30, None, {"HOME": "/tmp/h"}, interactive=True,
                     privileged=True)
    assert argv[:4] == ["podman", "exec", "-i", "--privileged"] and argv[-3:] == ["unshare", "-m", "true"]
    assert "--privileged" not in exec_argv("podman", "c1", "true", 30)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("echo hi\n")
    with tarfile.open(fileobj=io.BytesIO(files_tar({"/tests": tmp_path / "tests"}))) as tar:
        assert sorted(tar.getnames()) == ["tests", "tests/test.sh"]


def test_the_script_is_posix_sh():
    assert subprocess.run(["sh", "-n", "-c", PRIVATE_VERIFIER_SCRIPT]).returncode == 0
