"""Promise: a benchmark's task file cannot copy host files into the agent's workspace.

Attack (QwenClawBench): a task file whose ``workspace_files`` entry says ``source:
../../../../etc/...``, an absolute path, or an asset that is a symlink out of the checkout.
Before the fix the host file was copied into the workspace, and its content reached the
agent (and ``episodes.jsonl``). Now each is refused with an error naming the task file and
the field; an ordinary asset still arrives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.qwenclawbench.tasks import TaskFormatError, materialise_workspace, parse_task_file


def _dataset(tmp_path: Path) -> Path:
    ds = tmp_path / "checkout" / "data" / "qwenclawbench-v1.1-100"
    (ds / "tasks").mkdir(parents=True)
    (ds / "assets" / "t_ok").mkdir(parents=True)
    (ds / "assets" / "t_ok" / "notes.txt").write_text("task asset\n")
    return ds


def _task(ds: Path, task_id: str, source: str):
    path = ds / "tasks" / f"task_{task_id}.md"
    path.write_text(f"---\nid: {task_id}\nworkspace_files:\n  - source: {source}\n    dest: got.txt\n---\n"
                    "## Prompt\nRead got.txt.\n")
    return parse_task_file(path, ds / "assets")


def test_sources_outside_the_checkout_are_refused(tmp_path):
    ds = _dataset(tmp_path)
    secret = tmp_path / "host_secret.txt"
    secret.write_text("HOST SECRET\n")
    (ds / "assets" / "t_link").mkdir()
    (ds / "assets" / "t_link" / "notes.txt").symlink_to(secret)
    climbs = "../" * (len(secret.parent.parts) + 4) + str(secret).lstrip("/")
    for task_id, source in (("t_climb", climbs), ("t_abs", str(secret)), ("t_link", "notes.txt")):
        task = _task(ds, task_id, source)
        with pytest.raises(TaskFormatError) as info:
            materialise_workspace(task, tmp_path / f"ws_{task_id}")
        message = str(info.value)
        assert f"task_{task_id}.md" in message and "workspace_files source" in message and "outside" in message
        assert not (tmp_path / f"ws_{task_id}" / "got.txt").exists()


def test_an_ordinary_asset_still_arrives(tmp_path):
    ds = _dataset(tmp_path)
    task = _task(ds, "t_ok", "notes.txt")
    assert materialise_workspace(task, tmp_path / "ws") == ["got.txt"]
    assert (tmp_path / "ws" / "got.txt").read_text() == "task asset\n"
