"""Claw-Eval snapshots as the official grader receives them (``claw_eval/cli.py`` ``_collect_env_snapshot``
and the sandbox server's ``/exec``, ``/glob``, ``/read``).

The tasks are our own, written in Claw-Eval's task.yaml format with the snapshot shapes of real
tasks (the ``fixture_`` prefix; the real tasks' fixtures are binary files the tests do not ship):

- ``fixture_T101_wal_shape``: T101's snapshot command reads the agent's SQLite database; an agent that
  corrupts it makes the command exit 1, and the trial is graded with that output (the official
  grader scores it), not turned into an error worth 0;
- ``fixture_M001_page_shape``: M001's recording script fails when the page never loads; its frames
  glob then finds nothing and the snapshot holds no file entry;
- ``fixture_M082_chart_shape``: M082 snapshots a CSV and a PNG: a text file named ``.png`` is refused
  by the official ``/read`` (an error entry), a real PNG is decoded and re-encoded as PNG;
- ``fixture_V01_clip_shape``: the video tasks' ``ffprobe``-style check of a clip the agent did not
  write exits 1 (graded), a clip is read as base64 ``video/mp4``; a command our sandbox cannot run
  (exit 127) is an infrastructure failure, never a score.
"""

from __future__ import annotations

import base64
import io
import shutil
import sqlite3
from pathlib import Path

import pytest

from evaluators.claw_eval.read_rules import PENDING_IMAGE, READ_FAILED, decode_image, decode_pending_images, read_entry
from unified.types import Episode, Message, ToolCall
from _requires import needs_bwrap

CHECKOUT = Path(__file__).parent / "fixtures" / "claw_eval" / "fixture_checkout"

TASK = """task_id: {task_id}
task_name: {task_id}
category: {category}
tags: [general]
prompt: {{text: "Do the task.", language: en}}
tools: []
tool_endpoints: []
sandbox_files: {sandbox_files}
env_snapshot_commands: {commands}
env_snapshot_files: {files}
environment: {{timeout_seconds: 120, max_turns: 5, env_snapshot_timeout: 10}}
scoring_components: []
safety_checks: []
expected_actions: []
judge_rubric: ""
"""

GRADER = '''"""Fixture grader: completion 1 when the row count the snapshot command printed is 3, else 0."""
import json
from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class FixtureShapeGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        scores = DimensionScores()
        entry = next((v for k, v in (env_snapshot or {}).items() if k.startswith("cmd:")), {})
        try:
            rows = json.loads(entry.get("stdout") or "{}").get("row_count")
        except ValueError:
            rows = None
        scores.completion = 1.0 if rows == 3 else 0.0
        scores.robustness = self.compute_robustness(dispatches)
        return scores
'''

COUNT_ROWS = ("python3 -c \\\"import sqlite3,json;c=sqlite3.connect('/workspace/fixtures/test.db');"
              "print(json.dumps({'row_count':len(c.execute('SELECT * FROM items').fetchall())}))\\\"")


def _checkout(tmp_path: Path, task_id: str, category: str, *, sandbox_files="[]", commands="[]", files="[]",
              fixtures: dict[str, bytes] | None = None) -> Path:
    checkout = tmp_path / "checkout"
    shutil.copytree(CHECKOUT, checkout)
    for old in (checkout / "tasks").iterdir():
        shutil.rmtree(old)
    task_dir = checkout / "tasks" / task_id
    (task_dir / "fixtures").mkdir(parents=True)
    (task_dir / "task.yaml").write_text(TASK.format(task_id=task_id, category=category, sandbox_files=sandbox_files,
                                                    commands=commands, files=files))
    (task_dir / "grader.py").write_text(GRADER)
    for name, data in (fixtures or {}).items():
        (task_dir / "fixtures" / name).write_bytes(data)
    return checkout


def _database(rows: int) -> bytes:
    path = Path(__import__("tempfile").mkdtemp()) / "test.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE items (id INTEGER)")
    con.executemany("INSERT INTO items VALUES (?)", [(i,) for i in range(rows)])
    con.commit()
    con.close()
    return path.read_bytes()


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 3), (255, 0, 0)).save(out, format="PNG")
    return out.getvalue()


def _adapter(checkout: Path):
    from evaluators.claw_eval import ClawEvalAdapter

    adapter = ClawEvalAdapter(root=str(checkout), judge="openai:http://127.0.0.1:9/v1#never-asked")
    return adapter, adapter.tasks()[0]


def _score_after(adapter, task, calls: list[ToolCall]):
    try:
        with adapter.open(task) as env:
            env.step(calls) if calls else None
            episode = Episode(benchmark="claw_eval", task_id=task.id,
                              messages=[Message("user", env.first_user_message), Message("assistant", "done")])
            return adapter.score(task, episode, env)
    finally:
        adapter.stop_services()


@needs_bwrap
def test_t101_shape_a_database_the_agent_broke_is_graded_with_the_commands_output(tmp_path):
    checkout = _checkout(tmp_path, "fixture_T101_wal_shape", "coding", sandbox_files="[fixtures/test.db]",
                         commands=f'["{COUNT_ROWS}"]', fixtures={"test.db": _database(3)})
    adapter, task = _adapter(checkout)
    intact = _score_after(adapter, task, [])
    assert intact.error is None and intact.details["completion"] == 1.0 and "snapshot_failed" not in intact.details
    broken = _score_after(adapter, task, [ToolCall("Bash", {"command": "head -c 4096 /dev/urandom > "
                                                                      "/workspace/fixtures/test.db"}, id="b")])
    # the official grader scores this trial (completion 0, robustness 1): 0.2, not an error worth 0
    assert broken.error is None and broken.passed is False
    assert broken.score == pytest.approx(0.2) and broken.details["completion"] == 0.0
    (failed,) = broken.details["snapshot_failed"]
    assert failed["exit_code"] == 1 and "DatabaseError" in failed["why"]


@needs_bwrap
def test_m001_shape_a_page_that_never_loads_leaves_the_frames_glob_empty(tmp_path):
    record = "python3 -c 'import sys; sys.exit(\\\"page did not load\\\")'"
    checkout = _checkout(tmp_path, "fixture_M001_page_shape", "multimodal", commands=f'["{record}"]',
                         files="[/workspace/grading_frames/*.png]")
    adapter, task = _adapter(checkout)
    try:
        with adapter.open(task) as env:
            snapshot = env.env_snapshot()
    finally:
        adapter.stop_services()
    cmd = snapshot[f"cmd:{record.replace(chr(92), '')}"]
    assert cmd == {"exit_code": 1, "stdout": "", "stderr": "page did not load\n"}
    assert not [k for k in snapshot if k.startswith("file:")]  # the official glob finds no frame either
    graded = _score_after(adapter, task, [])
    assert graded.error is None and graded.details["snapshot_failed"][0]["exit_code"] == 1


@needs_bwrap
def test_m082_shape_a_text_file_named_png_is_refused_and_a_real_png_decoded(tmp_path):
    checkout = _checkout(tmp_path, "fixture_M082_chart_shape", "multimodal",
                         files="[/workspace/reasoning_math.csv, /workspace/math_reasoning_scatter.png, "
                               "/workspace/real.png, /workspace/rows.jsonl, /workspace/missing.png]")
    adapter, task = _adapter(checkout)
    png = _png()
    try:
        with adapter.open(task) as env:
            env.step([ToolCall("Write", {"file_path": "/workspace/reasoning_math.csv", "content": "m,a\r\nx,1\r\n"}, "a"),
                      ToolCall("Write", {"file_path": "/workspace/math_reasoning_scatter.png",
                                         "content": "matplotlib was not installed"}, "b"),
                      ToolCall("Write", {"file_path": "/workspace/rows.jsonl", "content": "{}\n"}, "c"),
                      ToolCall("Bash", {"command": f"echo {base64.b64encode(png).decode()} | base64 -d > "
                                                   "/workspace/real.png"}, "d")])
            host_side = env.env_snapshot()
    finally:
        adapter.stop_services()
    assert host_side["file:/workspace/math_reasoning_scatter.png"]["encoding"] == PENDING_IMAGE  # not decoded on the host
    snapshot = decode_pending_images(host_side)  # what the grader's sandbox hands the grader
    assert snapshot["file:/workspace/math_reasoning_scatter.png"] == {"error": READ_FAILED}
    assert snapshot["file:/workspace/reasoning_math.csv"] == {"content": "m,a\nx,1\n", "mime_type": "text/csv",
                                                             "encoding": "utf-8"}
    real = snapshot["file:/workspace/real.png"]
    assert real["encoding"] == "base64" and real["mime_type"] == "image/png"
    assert base64.b64decode(real["content"])[:8] == b"\x89PNG\r\n\x1a\n"
    rows = snapshot["file:/workspace/rows.jsonl"]  # no mime type, not a text extension: base64 as the official
    assert rows["encoding"] == "base64" and rows["size_bytes"] == 3
    assert snapshot["file:/workspace/missing.png"] == {"error": "File not found: /workspace/missing.png"}


@needs_bwrap
def test_video_shape_a_missing_clip_is_graded_and_an_unrunnable_probe_is_infrastructure(tmp_path):
    probe = "test -s /workspace/out.mp4"  # ffprobe's verdict on a clip the agent never wrote: exit 1
    checkout = _checkout(tmp_path, "fixture_V01_clip_shape", "multimodal", commands=f'["{probe}"]',
                         files="[/workspace/out.mp4]")
    adapter, task = _adapter(checkout)
    graded = _score_after(adapter, task, [])
    assert graded.error is None and graded.details["snapshot_failed"][0]["exit_code"] == 1
    assert read_entry("/workspace/out.mp4", b"\x00\x00\x00\x18ftypmp42") == {
        "content": base64.b64encode(b"\x00\x00\x00\x18ftypmp42").decode(), "mime_type": "video/mp4",
        "encoding": "base64", "size_bytes": 12}
    unrunnable = _checkout(tmp_path / "b", "fixture_V01_clip_shape", "multimodal",
                           commands='["no_such_probe_program /workspace/out.mp4"]')
    adapter, task = _adapter(unrunnable)
    result = _score_after(adapter, task, [])
    assert result.error.startswith("infrastructure: snapshot command not runnable") and result.passed is None


def test_image_decoder_refusals_are_the_official_read_failure():
    assert decode_image(b"<svg xmlns='http://www.w3.org/2000/svg'/>") == {"error": READ_FAILED}
    assert decode_image(_png())["mime_type"] == "image/png"
