"""Whether another user can run this interpreter (issue 55: the tests' non-root path).

``make test-security-nonroot`` (and any outside script that reruns tests/security as uid 65534 with
``setpriv``) needs the venv's python, followed to where it really lives, under directories every user can
traverse: a venv made from a Python under a 0700 home (``/root/.pyenv``) cannot start for another user, and
the failure (``setpriv: failed to execute ...: Permission denied``) does not say why. :func:`closed_ancestor`
finds the directory that stops it, and tests/security/conftest.py says so in one line of pytest's header.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def closed_ancestor(executable: str | os.PathLike[str] = sys.executable) -> Path | None:
    """The first directory on the way to ``executable``'s real file that other users cannot traverse, else None.

    Every link on the way is followed (a venv's ``bin/python`` is a link to the Python it was made from)."""
    real = Path(os.path.realpath(executable))
    for directory in reversed(real.parents):
        try:
            mode = os.stat(directory).st_mode
        except OSError:
            return directory
        if not mode & stat.S_IXOTH:
            return directory
    return None


def nonroot_note(executable: str | os.PathLike[str] = sys.executable) -> str | None:
    """One line when another user could not run ``executable``; None when it could."""
    closed = closed_ancestor(executable)
    if closed is None:
        return None
    mode = stat.S_IMODE(os.stat(closed).st_mode) if closed.exists() else 0
    return (f"tests/security as another user (make test-security-nonroot, uid 65534): cannot run {executable} "
            f"({os.path.realpath(executable)}): {closed} is {mode:04o}; make the venv from a Python every user can "
            "read (e.g. under /opt or /usr/local)")
