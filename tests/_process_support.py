"""Test helper: find live processes by a marker in their command line (leak checks)."""

from __future__ import annotations

import os
from pathlib import Path


def processes_with(marker: str) -> list[str]:
    """``"PID: cmdline"`` for every process whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found
