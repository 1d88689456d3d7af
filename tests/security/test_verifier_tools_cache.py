"""Promise: the private verifier's host tools are used only as they were built (issue 42, R6).

Before: the cached tools directory (``busybox`` and ``keep-caps``, mounted read-only into every container
and run with privileges by the private verifier) was reused as soon as its files existed: a ``keep-caps``
replaced there by a script that runs its command as is gave a planted program CapEff 0x1fffeffffff
(``CAP_SYS_ADMIN``), round 3's escape precondition. Now every use checks the directory and its files
(owned by this user, root when root; writable by no group or other; not links) against the sha256
digests recorded when it was built, and sets aside and rebuilds anything else. Needs a static busybox
and a C compiler with a static libc (skipped otherwise, as the container tests are).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from unified.execution import verifier_tools as vt

PLANTED = b'#!/bin/sh\nshift\nexec "$@"\n'
"""A ``keep-caps`` that keeps every capability: drops the mask and runs the command as it is."""


def _tools(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("UNIFIED_VERIFIER_TOOLS_CACHE", str(tmp_path / "cache"))
    tools = getattr(vt.verifier_tools, "__wrapped__", vt.verifier_tools)()  # the uncached call on the old code
    if isinstance(tools, str):
        pytest.skip(f"no verifier tools here: {tools}")
    return tools


def _fresh(tools: Path) -> Path:
    again = getattr(vt.verifier_tools, "__wrapped__", vt.verifier_tools)()
    assert again == tools, again
    return again


def _drops_capabilities(tools: Path) -> None:
    """The rebuilt ``keep-caps`` is the real one (static, and as root: it drops what the mask lacks)."""
    assert vt.is_static_elf(tools / "keep-caps")
    if os.geteuid() != 0:  # dropping from the bounding set needs CAP_SETPCAP
        return
    out = subprocess.run([str(tools / "keep-caps"), "5", str(tools / "busybox"), "cat", "/proc/self/status"],
                         capture_output=True, text=True, check=True).stdout
    caps = dict(line.split(":\t") for line in out.splitlines() if line.startswith("Cap"))
    assert int(caps["CapBnd"], 16) & ~0x5 == 0 and int(caps["CapEff"], 16) & ~0x5 == 0, caps


def test_a_replaced_keep_caps_is_detected_and_rebuilt(monkeypatch, tmp_path):
    tools = _tools(monkeypatch, tmp_path)
    built = hashlib.sha256((tools / "keep-caps").read_bytes()).hexdigest()
    (tools / "keep-caps").write_bytes(PLANTED)  # the same owner and mode, other bytes
    assert (_fresh(tools) / "keep-caps").read_bytes() != PLANTED
    assert hashlib.sha256((tools / "keep-caps").read_bytes()).hexdigest() in (tools / "SHA256SUMS").read_text()
    _drops_capabilities(tools)
    # the planted file and a manifest rewritten to match it: this process recorded what it built
    (tools / "keep-caps").write_bytes(PLANTED)
    (tools / "SHA256SUMS").write_text((tools / "SHA256SUMS").read_text().replace(
        built, hashlib.sha256(PLANTED).hexdigest()))
    assert (_fresh(tools) / "keep-caps").read_bytes() != PLANTED
    _drops_capabilities(tools)


def test_a_cache_others_may_write_is_rebuilt(monkeypatch, tmp_path):
    tools = _tools(monkeypatch, tmp_path)
    os.chmod(tools / "keep-caps", 0o777)
    assert (_fresh(tools) / "keep-caps").stat().st_mode & 0o022 == 0
    if os.geteuid() == 0:  # a cache of another user's is not ours to trust
        os.chown(tools / "busybox", 65534, 65534)
        assert (_fresh(tools) / "busybox").stat().st_uid == 0
    _drops_capabilities(tools)
