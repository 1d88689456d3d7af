"""Writing files so that nothing is lost: atomic replaces and append-only JSON lines, once.

- :func:`write_text_atomic` / :func:`write_json_atomic`: write a temporary file in the same
  directory, fsync it, then ``os.replace`` it over the target: a reader (or a process killed
  mid-write) sees the old file or the new one, never half of one. Summaries, manifests,
  configs and caches are written this way.
- :func:`append_jsonl`: one record per line, encoded whole before anything is written, flushed
  and fsync'ed; :func:`repair_tail` cuts the partial last line a kill can leave, and
  :func:`read_jsonl` reads every complete line, naming file and line of a bad one.
- :func:`read_regular_file`: the bytes of a file something untrusted may have placed, only when
  it is a regular file (never through a link, never blocking on a FIFO) within a size cap.
- Run identity helpers (:func:`flatten_identity`, :func:`identity_differences`, fingerprints):
  the eval's run directory and the warmup's output directory record what defines their results
  and name what differs when a rerun would mix in something else.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Replace ``path`` with ``data`` as indented strict JSON, atomically: a float that is not finite
    (NaN, Infinity, which Python would write as tokens no JSON reader accepts) is written ``null``."""
    text = json.dumps(finite_json(data), indent=2, sort_keys=False, default=str, allow_nan=False)
    write_text_atomic(path, text + "\n")


def finite_json(data: Any) -> Any:
    """``data`` with every non-finite float (in dicts, lists, tuples) replaced by None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite_json(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite_json(value) for value in data]
    return data


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8), atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` (temporary file, fsync, ``os.replace``); parents are created.

    The new file keeps the old one's permission bits, or gets ``0o644`` (a temporary file is
    created ``0o600``, which would hide shared data and run records from other users)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def repair_tail(path: str | os.PathLike[str]) -> None:
    """Cut a partial last line (a write interrupted by a kill)."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path}: not a regular file (a link, FIFO or device); record files are only "
                         "repaired and appended to as regular files")
    if info.st_size == 0:
        return
    with open(path, "rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        end = info.st_size  # look back for the last newline, a MiB at a time, at most one line's cap
        while end > 0 and info.st_size - end <= JSONL_LINE_MAX_BYTES:
            start = max(0, end - (1 << 20))
            handle.seek(start)
            at = handle.read(end - start).rfind(b"\n")
            if at >= 0:
                handle.truncate(start + at + 1)
                return
            end = start
        if end > 0:
            raise ValueError(f"{path}: its last {info.st_size - end} bytes hold no newline, more than a line this "
                             f"reader takes ({JSONL_LINE_MAX_BYTES} bytes): not a torn record, not cut")
        handle.truncate(0)


JSONL_MAX_BYTES = 8 << 30
"""Most bytes :func:`read_jsonl` reads from one file (a larger one is an error naming it, not a hang)."""
JSONL_LINE_MAX_BYTES = 64 << 20
"""Longest JSONL line read (64 MiB): a longer one is an error naming file and line once this much of it is in,
so a reader holds at most this much of a line (a sparse multi-GiB file of no newline is refused, not loaded)."""


def jsonl_lines(path: str | os.PathLike[str], *, max_bytes: int = JSONL_MAX_BYTES,
                max_line_bytes: int = JSONL_LINE_MAX_BYTES) -> Iterator[tuple[int, str, bool, bool]]:
    """Stream ``(line number, text without its newline, whether it ended in a newline, whether it is the last)``
    of a JSONL file,
    read only as a regular file (:func:`open_regular`) of at most ``max_bytes``, a line at a time: a line longer
    than ``max_line_bytes`` or not UTF-8 is a ValueError naming file and line. A last line without its newline
    (a torn write) comes with ``complete`` False; callers decide. FileNotFoundError when it does not exist."""
    path = Path(path)
    fd = open_regular(path)
    with os.fdopen(fd, "rb", buffering=1 << 20) as handle:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise ValueError(f"{path}: {size} bytes, more than the {max_bytes} bytes this reader takes")
        number, total, line = 0, 0, handle.readline(max_line_bytes + 1)
        while line:
            number += 1
            total += len(line)
            if total > max_bytes:  # grew while we read
                raise ValueError(f"{path}: more than the {max_bytes} bytes this reader takes")
            if len(line) > max_line_bytes and not line.endswith(b"\n") or len(line) > max_line_bytes + 1:
                raise ValueError(f"{path}:{number}: a line of more than {max_line_bytes} bytes, longer than this "
                                 "reader takes (not a record the runner writes)")
            following = handle.readline(max_line_bytes + 1)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{number}: not UTF-8 ({exc})") from None
            complete = text.endswith("\n")
            yield number, text[:-1] if complete else text, complete, not following
            line = following


def read_jsonl(path: str | os.PathLike[str], *, max_bytes: int = JSONL_MAX_BYTES) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path``; a bad line is an error naming file and line. The file is
    read only as a regular file (:func:`open_regular`: a FIFO or a link in a run directory is an
    error naming it, never a wait), streamed a line at a time (:func:`jsonl_lines`: a line of more than
    :data:`JSONL_LINE_MAX_BYTES` is an error, so memory follows the rows, not the file's size)."""
    rows: list[dict[str, Any]] = []
    path = Path(path)
    try:
        lines = jsonl_lines(path, max_bytes=max_bytes)
        for number, line, complete, _ in lines:
            if not complete:
                break  # a partial last line
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from None
    except FileNotFoundError:
        return rows
    return rows


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path``, which must be a regular file (the caller closes it).

    For readers of files that something untrusted may have placed (a run directory's records, a
    checkpoint's weights): opened with ``O_NOFOLLOW | O_NONBLOCK``, so a symbolic link is refused and
    a FIFO never blocks the reader, then checked on the open descriptor (``fstat``) before a byte is
    read; ``O_NONBLOCK`` is cleared again on a regular file. FileNotFoundError when it does not exist;
    ValueError naming the file otherwise."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except NotADirectoryError:  # a parent is a file (an --out under a file): the file does not exist either
        raise FileNotFoundError(errno.ENOENT, f"{path}: a parent is not a directory") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{path}: a symbolic link; record files are read only as regular files, "
                             "never through a link") from None
        raise ValueError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                    else "a directory" if stat.S_ISDIR(info.st_mode) else "a device")
            raise ValueError(f"{path}: {kind}, not a regular file; such files are read only as regular files")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """The bytes of ``path``, which must be a regular file (:func:`open_regular`) of at most
    ``max_bytes`` bytes (checked on the descriptor before a byte is read, and again while reading).
    FileNotFoundError when it does not exist; ValueError naming the file otherwise."""
    path = Path(path)
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise ValueError(f"{path}: {size} bytes, more than the {max_bytes} bytes this reader takes")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # grew while we read
        raise ValueError(f"{path}: more than the {max_bytes} bytes this reader takes")
    return data


def json_line(data: dict[str, Any]) -> bytes:
    """One record as a UTF-8 JSON line. Text that is not valid Unicode (a lone surrogate from a
    model or a tool) is written \\u-escaped, so the file stays valid UTF-8 and reads back the same."""
    line = json.dumps(data, default=str, ensure_ascii=False) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(data, default=str, ensure_ascii=True) + "\n").encode("ascii")


def append_jsonl(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Append :func:`json_line` of ``data``, encoded whole before anything is written (a value that
    cannot be written leaves the file untouched), flushed and fsync'ed."""
    encoded = json_line(data)
    with open(path, "ab") as handle:
        handle.write(encoded)
        handle.flush()
        os.fsync(handle.fileno())


# --------------------------------------------------------------------------------------
# run identity: what defines the results in a run directory


IDENTITY_FILE = "identity.json"
"""The identity record of a run directory (eval ``--out``, warmup ``output_dir``)."""
IDENTITY_MAX_BYTES = 16 << 20
"""Most bytes of an ``identity.json`` that are read."""
WEIGHT_FILES = ("*.json", "*.safetensors", "*.bin", "*.pt", "*.gguf", "*.model")
"""The files of a local checkpoint whose names, sizes and times make its ``model.files`` digest."""


def read_identity(directory: str | os.PathLike[str], derive: Callable[[], dict[str, Any] | None]
                  ) -> dict[str, Any] | None:
    """The identity recorded in ``directory/identity.json``; without that file, ``derive()`` (an identity
    worked out from an older directory's own records; any exception in it: None, nothing to compare
    against); an unreadable or malformed file: None."""
    try:
        return json.loads(read_regular_file(Path(directory) / IDENTITY_FILE, max_bytes=IDENTITY_MAX_BYTES))
    except FileNotFoundError:
        pass
    except (OSError, ValueError):  # a FIFO, link or oversized file too: nothing to compare against
        return None
    try:
        return derive()
    except Exception:  # an older directory this version cannot read
        return None


def flatten_identity(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"sampling": {"top_p": 1.0}}`` -> ``{"sampling.top_p": 1.0}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten_identity(value, name + "."))
        else:
            out[name] = value
    return out


def identity_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"KEY A -> B"`` for each key whose value differs between two flat identities.

    A key present on one side only is not a difference (an older record that did not know it, or
    a section that only one of the runs used)."""
    def show(value: Any) -> str:
        text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
        return text if len(text) <= 80 else text[:77] + "..."

    return [f"{key} {show(recorded[key])} -> {show(current[key])}" for key in current
            if key in recorded and json.dumps(recorded[key], sort_keys=True, default=str)
            != json.dumps(current[key], sort_keys=True, default=str)]


def files_fingerprint(path: str | os.PathLike[str], patterns: tuple[str, ...] = ("*",)) -> str:
    """A short digest of the names, sizes and modification times of ``path`` (a file) or of the
    files directly in ``path`` (a directory) matching ``patterns``: changes when a checkpoint is
    rewritten, costs no read of the weights."""
    import hashlib

    root = Path(path)
    files = [root] if root.is_file() else sorted({f for p in patterns for f in root.glob(p) if f.is_file()})
    digest = hashlib.sha256()
    for f in files:
        st = f.stat()
        digest.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def content_fingerprint(paths: list[str | os.PathLike[str]]) -> str:
    """A short sha256 of the contents of ``paths`` (files, or every file under a directory, sorted)."""
    import hashlib

    digest = hashlib.sha256()
    for item in paths:
        root = Path(item)
        files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file())
        for f in files:
            digest.update(f.name.encode() + b"\0")
            with open(f, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:16]
