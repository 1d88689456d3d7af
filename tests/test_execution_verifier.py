"""The private verifier's protocol (unified.execution.verifier) without an engine; the real runs are in
tests/test_containers_real.py and tests/security/test_verifier_isolation_containers.py."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import tarfile

import pytest

from unified.execution.containers import default_caps, exec_argv, private_verifier_argv
from unified.execution.pristine import TOOLCHAIN_DIRS, TOOLCHAIN_FILES, toolchain_changes
from unified.execution.verifier import PRIVATE_VERIFIER_SCRIPT, files_tar, parse_private_output, toolchain_tampering
from unified.execution.verifier_tools import MOUNT_POINT, is_static_elf, keep_mask, verifier_tools


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


def test_the_only_privileged_exec_runs_the_hosts_tools_and_takes_its_files_on_stdin(tmp_path):
    argv = private_verifier_argv("podman", "c1", ["bash", "-c", "true"], out_dir="/logs/verifier",
                                 dirs=["/logs/verifier", "/tests"], timeout_s=30, workdir="/app", mask=0xa80425fb,
                                 env={"HOME": "/tmp/h"})
    assert argv[:4] == ["podman", "exec", "-i", "--privileged"]
    program = argv[argv.index("c1") + 1:]
    assert program[0] == f"{MOUNT_POINT}/busybox" and program[5] == f"{MOUNT_POINT}/busybox"  # unshare, sh: the host's
    assert program[-8:-3] == ["/logs/verifier:/tests", "a80425fb", "", ":".join(TOOLCHAIN_DIRS), ":".join(TOOLCHAIN_FILES)]
    assert program[-3:] == ["bash", "-c", "true"]  # the command, via keep-caps
    assert "--privileged" not in exec_argv("podman", "c1", "true", 30)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("echo hi\n")
    with tarfile.open(fileobj=io.BytesIO(files_tar({"/tests": tmp_path / "tests"}))) as tar:
        assert sorted(tar.getnames()) == ["tests", "tests/test.sh"]


def test_every_tool_of_the_privileged_script_is_a_busybox_applet():
    """No word of the script in a command's place may be looked up on the container's PATH: shell builtins,
    its own functions and ``$bb APPLET`` only (``"$kc"`` is the argument of ``$bb timeout``)."""
    import re

    starts = re.findall(r"(?:^|[;|&{(]|\$\(|\bthen\b|\bdo\b|\belse\b)[ \t]*([^\s;|&(){}]+)", PRIVATE_VERIFIER_SCRIPT,
                        re.M)
    words = {w for w in starts if not re.fullmatch(r"[A-Za-z_0-9]+=.*", w)}
    allowed = {"$bb", ":", "[", "cd", "echo", "exit", "return", "set", "shift", "check", "finish", "unpacked",
               "for", "do", "done", "if", "then", "else", "fi", "until", "$",
               "n", "tries", "k",  # $((n + 1)), $((tries + 1)), $((k + 1))
               "continue",
               "ids#", "oid%%", "limit%.*"}  # ${...}
    assert words <= allowed, words - allowed
    assert "$bb timeout -k 5 \"$limit\" \"$kc\" \"$mask\" \"$@\"" in PRIVATE_VERIFIER_SCRIPT


def test_the_verifier_keeps_the_default_capabilities_and_one_marker():
    status = "Name:\tcat\nCapInh:\t0000000000000000\nCapBnd:\t00000000a80425fb\n"
    assert default_caps(status) == 0xa80425fb and default_caps("Name: x\n") is None
    assert keep_mask(0xa80425fb) == 0xa80425fb | 1 << 35
    assert keep_mask(1 << 35) == 1 << 35 | 1 << 36 and keep_mask(1 << 35 | 1 << 36) is None


@pytest.mark.skipif(isinstance(verifier_tools(), str), reason=f"{verifier_tools()}")
def test_keep_caps_drops_what_the_mask_lacks():
    tools = verifier_tools()
    assert is_static_elf(tools / "busybox") and is_static_elf(tools / "keep-caps")
    out = subprocess.run([str(tools / "keep-caps"), "5", str(tools / "busybox"), "cat", "/proc/self/status"],
                         capture_output=True, text=True, check=True).stdout
    caps = dict(line.split(":\t") for line in out.splitlines() if line.startswith("Cap"))
    assert int(caps["CapBnd"], 16) & ~0x5 == 0 and int(caps["CapEff"], 16) & ~0x5 == 0
    assert int(caps["CapInh"], 16) == 0 and int(caps.get("CapAmb", "0"), 16) == 0


def test_a_changed_toolchain_is_told_from_an_honest_install():
    diff = "\n".join(["C /usr", "C /usr/bin", "C /usr/bin/bash", "A /usr/bin/bash.real", "A /usr/bin/curl",
                      "A /usr/local/bin/pytest", "A /usr/local/bin/sh", "A /etc/ld.so.preload", "A /app/solution.py",
                      "C /usr/lib/x86_64-linux-gnu/libc.so.6", "A /usr/lib/python3/dist-packages/sitecustomize.py",
                      "C /usr/local/bin/python3.12", "D /usr/bin/unshare", "C /etc/ld.so.cache", "C /usr/bin/base64",
                      "C /usr/lib/python3.11/site.py", "C /usr/lib/python3/dist-packages/six.py",
                      "C /usr/local/lib/python3.12/site-packages/pytest/__init__.py", "A /usr/lib/python3.11/__pycache__/x.pyc"])
    assert toolchain_tampering(diff) == [
        "C /usr/bin/bash", "A /usr/local/bin/sh", "A /etc/ld.so.preload", "C /usr/lib/x86_64-linux-gnu/libc.so.6",
        "A /usr/lib/python3/dist-packages/sitecustomize.py", "C /usr/local/bin/python3.12", "D /usr/bin/unshare",
        "C /usr/bin/base64", "C /usr/lib/python3.11/site.py"]
    after = toolchain_tampering(diff, before_verifier=False)  # the verifier's own apt-get may upgrade these
    assert after == ["C /usr/bin/bash", "A /usr/local/bin/sh", "A /etc/ld.so.preload",
                     "A /usr/lib/python3/dist-packages/sitecustomize.py", "D /usr/bin/unshare", "C /usr/bin/base64"]
    assert toolchain_tampering("C /usr/bin/curl\nC /usr/bin/python3.11\n", before_verifier=False) == []
    assert toolchain_tampering("A /usr/bin/curl\nA /usr/local/bin/pytest\nA /app/x.py\n") == []


def test_the_toolchain_is_an_allow_list():
    """Any change inside a toolchain path counts (issue 42, R1), additions too; compiled Python only where the verifier
    runs on the image's copy; nothing outside."""
    diff = "\n".join(["C /usr", "C /usr/local/bin", "A /usr/local/bin/apt-get", "C /usr/lib/python3/dist-packages/x", "A /usr/lib/python3/dist-packages/zz.pth",
                      "A /etc/apt/apt.conf.d/00hook", "C /usr/lib/x86_64-linux-gnu/libtinfo.so.6", "C /usr/bin/dpkg",
                      "A /usr/lib/python3/dist-packages/x/__pycache__/y.cpython-311.pyc", "A /etc/ld.so.preload",
                      "A /app/solution.py", "C /etc/hosts", "A /etc/aptly.conf", "A /root/.bashrc", "C /var/lib/apt"])
    assert toolchain_changes(diff, ignore_bytecode=True) == [
        "A /usr/local/bin/apt-get", "A /usr/lib/python3/dist-packages/zz.pth", "A /etc/apt/apt.conf.d/00hook",
        "C /usr/lib/x86_64-linux-gnu/libtinfo.so.6", "C /usr/bin/dpkg", "A /etc/ld.so.preload"]
    assert "A /usr/lib/python3/dist-packages/x/__pycache__/y.cpython-311.pyc" in toolchain_changes(diff)
    assert toolchain_changes("C /usr\nC /usr/bin\n") == ["C /usr/bin"]  # a directory changed in itself


def test_the_script_is_posix_sh():
    assert subprocess.run(["sh", "-n", "-c", PRIVATE_VERIFIER_SCRIPT]).returncode == 0
    assert "timed_out" in PRIVATE_VERIFIER_SCRIPT
    assert parse_private_output(_tar({"rc": b"143\n", "timed_out": b""}), 60.0, 60).timed_out  # busybox timeout: 143


def test_without_a_static_busybox_the_reason_names_the_package(monkeypatch, tmp_path):
    """A dynamically linked busybox (or none) is refused with the fix to apply; containers then start without the
    tools mount and the verifier stops the agent's processes first (the result's ``agent_processes`` says why)."""
    from unified.execution.verifier_tools import static_busybox

    monkeypatch.setenv("UNIFIED_VERIFIER_BUSYBOX", sys.executable)  # a dynamically linked program
    monkeypatch.setenv("UNIFIED_VERIFIER_TOOLS_CACHE", str(tmp_path))
    reason = static_busybox()
    assert isinstance(reason, str) and "apt-get install -y busybox-static" in reason and sys.executable in reason
    assert verifier_tools() == reason and not any(tmp_path.iterdir())
