"""``unified.view``, ``unified.trace`` and ``--compare`` read only the run's own record files.

A run directory holds what the runner wrote (``summary.json``, ``run.json``,
``<benchmark>/episodes.jsonl`` and ``results.jsonl``) and ``<benchmark>/work/``, where adapters and
sandboxed episodes leave files. What may be there: anything under ``work/``. What it may NEVER
cause:

- a forged ``work/zz.jsonl`` replacing a transcript or adding a task to the page and the trace
  (every ``*.jsonl`` under the run was read, and the last episode of a key won);
- a reader that hangs: a FIFO named ``work/p.jsonl`` or ``summary.json`` blocked ``unified.view``
  in ``open()`` until something wrote to it;
- a record file read through a link, or read whole whatever its size: a clear error naming the
  file instead.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from unified.eval.cli import main as eval_main
from unified.trace.load import load_run
from unified.view import render

TESTS = Path(__file__).resolve().parents[1]
FIXTURE = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter format, written for tests
BENCH = "fixture_echo"


@pytest.fixture
def run(tmp_path, monkeypatch) -> Path:
    """A real eval run directory (3 fixture tasks, gold answers)."""
    monkeypatch.syspath_prepend(str(TESTS))
    out = tmp_path / "run"
    assert eval_main(["--model", "gold", "--benchmarks", FIXTURE, "--set", f"benchmarks.{FIXTURE}.n=3",
                      "--out", str(out)]) == 0
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_forged_jsonl_under_work_neither_replaces_a_transcript_nor_adds_a_task(run):
    before = load_run(run)
    episode = _lines(run / BENCH / "episodes.jsonl")[0]
    result = _lines(run / BENCH / "results.jsonl")[0]
    forged_episode = json.loads(json.dumps(episode))
    forged_episode["steps"][0]["completion"] = "FORGED TRANSCRIPT"
    forged_result = {**result, "task_id": "forged-task", "score": 1.0}
    work = run / BENCH / "work"
    work.mkdir(exist_ok=True)
    (work / "zz.jsonl").write_text(json.dumps(forged_episode) + "\n" + json.dumps(forged_result) + "\n")
    after = load_run(run)
    assert [e.to_dict() for e in after.episodes] == [e.to_dict() for e in before.episodes]
    assert sorted(r.task_id for r in after.results) == sorted(r.task_id for r in before.results)
    page, count = render(run)
    assert count == 3 and "FORGED TRANSCRIPT" not in page and "forged-task" not in page


def _finishes(call, fifos: list[Path], seconds: float = 10.0):
    """``call()``'s result or exception, or a test failure when it is still blocked after ``seconds``
    (the FIFOs are then opened for writing so that the blocked reader returns)."""
    box: dict = {}

    def target():
        try:
            box["value"] = call()
        except Exception as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        thread.join(10)
        pytest.fail(f"the reader was still blocked after {seconds} s (on {', '.join(map(str, fifos))})")
    return box


def test_a_fifo_under_work_or_in_place_of_a_record_never_blocks_the_viewer(run):
    work = run / BENCH / "work"
    work.mkdir(exist_ok=True)
    os.mkfifo(work / "p.jsonl")
    box = _finishes(lambda: render(run), [work / "p.jsonl"])
    assert "error" not in box and box["value"][1] == 3
    (run / "summary.json").unlink()
    os.mkfifo(run / "summary.json")
    box = _finishes(lambda: render(run), [run / "summary.json"])
    assert isinstance(box.get("error"), ValueError), box
    assert "summary.json" in str(box["error"]) and "FIFO" in str(box["error"])


def test_a_record_file_behind_a_link_is_refused_naming_it(run, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere.jsonl"
    results = run / BENCH / "results.jsonl"
    elsewhere.write_text(results.read_text().replace('"score": 1.0', '"score": 0.0'))
    results.unlink()
    os.symlink(elsewhere, results)
    with pytest.raises(ValueError, match=r"results\.jsonl.*symbolic link"):
        load_run(run)
    other = tmp_path / "other-summary.json"
    other.write_text((run / "summary.json").read_text())
    (run / "summary.json").unlink()
    os.symlink(other, run / "summary.json")
    with pytest.raises(SystemExit) as stopped:
        eval_main(["--compare", str(run), str(run)])
    assert stopped.value.code == 2
    assert "summary.json" in capsys.readouterr().err


def test_a_record_file_past_the_readers_cap_is_an_error_naming_it(run, monkeypatch):
    import unified.trace.load as load

    monkeypatch.setattr(load, "MAX_JSONL_BYTES", 1 << 20, raising=False)
    episodes = run / BENCH / "episodes.jsonl"
    with open(episodes, "r+b") as fh:
        fh.truncate(8 << 20)  # a hole: 8 MiB apparent, no disk
    with pytest.raises(ValueError, match=r"episodes\.jsonl: .*8388608 bytes.*1048576"):
        load_run(run)


@pytest.mark.parametrize("record", ["identity.json", f"{BENCH}/results.jsonl", "plan.json"])
def test_a_fifo_in_place_of_a_record_never_hangs_a_resume(run, record, capsys):
    """Issue 42, R9: a FIFO ``identity.json`` or ``results.jsonl`` hung the rerun (resume) of a run
    directory in ``open()``. The resume reads records only as regular files: it finishes, and a FIFO
    results file is refused naming it (nothing is appended to, or read through, the FIFO)."""
    path = run / record
    path.unlink()
    os.mkfifo(path)
    argv = ["--model", "gold", "--benchmarks", FIXTURE, "--set", f"benchmarks.{FIXTURE}.n=3", "--out", str(run)]

    def rerun() -> int:
        try:
            return eval_main(argv)
        except SystemExit as exc:
            return int(exc.code or 0)

    box = _finishes(rerun, [path])
    if record.endswith("results.jsonl"):  # the records cannot be read: refused, naming the file
        assert box.get("value", 0) != 0 or "FIFO" in str(box.get("error")), box
        assert "results.jsonl" in capsys.readouterr().err + str(box.get("error", ""))
        assert stat.S_ISFIFO(os.lstat(path).st_mode)  # never appended to or replaced
    else:  # a record the rerun rewrites: replaced atomically by a regular file, never read through
        assert box.get("value") == 0, box
        assert stat.S_ISREG(os.lstat(path).st_mode)
