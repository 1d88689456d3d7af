"""unified.store: atomic replaces leave the old file or the new one, JSONL tails are repaired,
bad lines are named with file:line, and text that is not valid Unicode round-trips."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from unified.store import (
    append_jsonl,
    json_line,
    read_jsonl,
    repair_tail,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)

_WRITER = """
import sys
from unified.store import write_bytes_atomic
path, size = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
i = 0
while True:
    i += 1
    tag = str(i % 10).encode()
    write_bytes_atomic(path, tag * size)
"""


def test_failed_replace_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"v": 1})

    def broken_replace(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk went away"):
        write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_killed_writer_leaves_a_whole_old_or_new_file(tmp_path):
    """A process killed at random points while it rewrites a 2 MB file: every read sees one whole version."""
    path = tmp_path / "big.bin"
    size = 2_000_000
    write_bytes_atomic(path, b"0" * size)
    for delay in (0.05, 0.13, 0.29):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(size)], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        data = path.read_bytes()
        assert len(data) == size and data == data[:1] * size
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "big.bin"]
    for name in leftovers:  # a kill between mkstemp and os.replace can leave a dot-file, never the target half-written
        assert name.startswith(".big.bin.")


def test_permissions_kept_or_readable_by_default(tmp_path):
    new = tmp_path / "new.txt"
    write_text_atomic(new, "x")
    assert new.stat().st_mode & 0o777 == 0o644
    private = tmp_path / "private.txt"
    private.write_text("old")
    private.chmod(0o600)
    write_text_atomic(private, "new")
    assert private.read_text() == "new" and private.stat().st_mode & 0o777 == 0o600


def test_partial_tail_is_skipped_by_reads_and_cut_by_repair(tmp_path):
    path = tmp_path / "results.jsonl"
    append_jsonl(path, {"i": 1})
    append_jsonl(path, {"i": 2})
    with open(path, "ab") as handle:  # what a kill in the middle of a write leaves
        handle.write(b'{"i": 3, "tex')
    assert read_jsonl(path) == [{"i": 1}, {"i": 2}]
    repair_tail(path)
    assert path.read_bytes() == b'{"i": 1}\n{"i": 2}\n'
    append_jsonl(path, {"i": 3})
    assert read_jsonl(path) == [{"i": 1}, {"i": 2}, {"i": 3}]
    repair_tail(path)  # a whole file is left alone
    assert len(read_jsonl(path)) == 3


def test_repair_tail_of_a_file_without_any_complete_line(tmp_path):
    path = tmp_path / "only_partial.jsonl"
    path.write_bytes(b'{"half": ')
    repair_tail(path)
    assert path.read_bytes() == b""
    repair_tail(tmp_path / "missing.jsonl")  # nothing to repair
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_a_bad_line_is_named_with_file_and_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"ok": 1}\n\n{"ok": 2}\nnot json\n{"ok": 3}\n')
    with pytest.raises(ValueError, match=rf"^{path}:4: not a JSON line"):
        read_jsonl(path)


def test_surrogate_text_round_trips(tmp_path):
    """A lone surrogate (a model's broken UTF-16, a tool's undecodable byte) is written \\u-escaped."""
    row = {"completion": "caf\u00e9 \ud83d broken", "ok": "日本"}
    line = json_line(row)
    line.decode("utf-8")  # the file stays valid UTF-8
    assert json.loads(line) == row
    path = tmp_path / "episodes.jsonl"
    append_jsonl(path, row)
    append_jsonl(path, {"plain": "日本"})
    assert read_jsonl(path) == [row, {"plain": "日本"}]
    assert "日本".encode() in path.read_bytes()  # valid text is kept as UTF-8, not escaped


def test_unwritable_value_leaves_the_jsonl_untouched(tmp_path):
    path = tmp_path / "results.jsonl"
    append_jsonl(path, {"i": 1})
    before = path.read_bytes()
    with pytest.raises(ValueError):
        append_jsonl(path, {"x": float("nan"), "loop": None} | {"self": _Circular()})
    assert path.read_bytes() == before


class _Circular:
    """A value whose ``str`` (json's ``default=str`` fallback) fails."""

    def __str__(self) -> str:
        raise ValueError("cannot render")


def test_warmup_metrics_survive_a_torn_line_and_a_resumed_run(tmp_path):
    """A run killed mid-line, then resumed: the torn line is cut before the resumed run appends,
    so every record reads back (appending after the torn text would glue two records into one bad line)."""
    from types import SimpleNamespace

    from unified.warmup.callbacks import JsonlMetricsCallback, read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "lo', encoding="utf-8")
    callback = JsonlMetricsCallback(path)
    state = SimpleNamespace(is_world_process_zero=True, global_step=2)
    callback.on_log(None, state, None, logs={"loss": 0.25})
    assert [(r["step"], r["loss"]) for r in read_metrics(path)] == [(1, 0.5), (2, 0.25)]


def test_read_identity_prefers_the_file_and_falls_back_only_when_it_is_missing(tmp_path):
    from unified.store import IDENTITY_FILE, read_identity

    asked = []

    def derive():
        asked.append(1)
        return {"fields": {"derived": True}}

    assert read_identity(tmp_path, derive) == {"fields": {"derived": True}} and asked == [1]  # no file: derived

    def broken():
        raise KeyError("config")

    assert read_identity(tmp_path, broken) is None  # an older directory that cannot be read: nothing to compare
    (tmp_path / IDENTITY_FILE).write_text('{"fields": {"model": "x"}}')
    assert read_identity(tmp_path, derive) == {"fields": {"model": "x"}} and asked == [1]
    (tmp_path / IDENTITY_FILE).write_text("{not json")
    assert read_identity(tmp_path, derive) is None and asked == [1]  # a malformed file is not replaced by a guess
