"""The one-line note for a Python another user cannot run (issue 55; tests/security/_nonroot.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from security._nonroot import closed_ancestor, nonroot_note


def test_a_python_under_a_0700_home_is_named_in_one_line():
    base = Path(tempfile.mkdtemp(prefix="nonroot-note-", dir="/tmp"))  # (pytest's own temp root is 0700)
    try:
        base.chmod(0o755)
        home = base / "home"
        (home / "py" / "bin").mkdir(parents=True)
        real = home / "py" / "bin" / "python3"
        real.write_text("")
        home.chmod(0o700)
        venv = base / "venv" / "bin"
        venv.mkdir(parents=True)
        (venv / "python").symlink_to(real)
        assert closed_ancestor(venv / "python") == home
        note = nonroot_note(venv / "python")
        assert note.count("\n") == 0 and f"{home} is 0700" in note and str(real) in note
        home.chmod(0o755)
        assert closed_ancestor(venv / "python") is None and nonroot_note(venv / "python") is None
    finally:
        shutil.rmtree(base)


def test_the_header_says_so_as_root_only_when_it_applies():
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-p", "no:cacheprovider",
                           "tests/security/test_nonroot_note.py"], capture_output=True, text=True, timeout=120)
    note = nonroot_note()
    if os.geteuid() == 0 and note:
        assert note in done.stdout
    else:
        assert "tests/security as another user" not in done.stdout
