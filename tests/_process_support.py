"""Test helpers: find live processes by a marker in their command line (leak checks); a loopback
listener that counts connections (network-isolation checks)."""

from __future__ import annotations

import os
import socket
import threading
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


class LoopbackListener:
    """A TCP server on the host's loopback that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()
