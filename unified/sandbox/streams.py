"""Read a child's output without ever holding more than a cap of it.

``Popen.communicate`` keeps everything a command prints until it exits: a sandboxed ``yes`` or
``head -c 1G /dev/zero`` costs the host that much memory (twice, once as bytes and once
decoded). :func:`communicate_capped` reads both pipes while they stream, keeps the first
``cap`` bytes of each and counts (and drops) the rest, so the host holds at most ``2 * cap``
whatever the command prints; :func:`cut_text` decodes what was kept and says how much was cut.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field

_CHUNK = 1 << 16


@dataclass
class CappedStream:
    """The first ``cap`` bytes of a stream and how many bytes it had in all."""

    cap: int
    chunks: list[bytes] = field(default_factory=list)
    kept: int = 0
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - self.kept
        if room > 0:
            part = chunk[:room]
            self.chunks.append(part)
            self.kept += len(part)

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


def cut_text(stream: CappedStream) -> str:
    """The kept bytes as text (UTF-8, undecodable bytes replaced), with a marker when output was cut."""
    text = stream.data.decode("utf-8", errors="replace")
    if stream.total > stream.kept:
        text += f"\n[... {stream.total - stream.kept} bytes cut: output is capped at {stream.cap} bytes]\n"
    return text


def _drain(pipe, sink: CappedStream) -> None:
    try:
        while True:
            chunk = pipe.read1(_CHUNK) if hasattr(pipe, "read1") else pipe.read(_CHUNK)
            if not chunk:
                break
            sink.feed(chunk)
    except (OSError, ValueError):
        pass


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def communicate_capped(proc: subprocess.Popen, stdin: bytes | None, timeout_s: float, cap: int,
                       on_timeout=None, grace_s: float = 5.0) -> tuple[CappedStream, CappedStream, bool]:
    """Like ``proc.communicate(stdin, timeout)`` but holding at most ``cap`` bytes per stream.

    ``proc`` must have ``stdout=PIPE, stderr=PIPE`` (and ``stdin=PIPE`` when ``stdin`` is given).
    On timeout ``on_timeout()`` is called (it must kill the process) and ``timed_out`` is True.
    After the process exits, its pipes are read for at most ``grace_s`` more (a daemon it left
    behind may hold them open). Returns ``(stdout, stderr, timed_out)``.
    """
    out, err = CappedStream(cap), CappedStream(cap)
    readers = [threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True)]
    for t in readers:
        t.start()
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        if on_timeout is not None:
            on_timeout()
        proc.wait()
    end = time.monotonic() + grace_s
    for t in readers:
        t.join(max(0.0, end - time.monotonic()))
    return out, err, timed_out
