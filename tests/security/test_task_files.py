"""Promise: a benchmark's task file cannot copy host files into the agent's workspace, and
copies made on the host (grader copy, snapshot) stay within a size budget.

Attack (QwenClawBench): a task file whose ``workspace_files`` entry says ``source:
../../../../etc/...``, an absolute path, or an asset that is a symlink out of the checkout.
Attack (Claw-Eval): a symlink in the task folder (a file, a directory, or a link inside a
listed directory) named in ``sandbox_files``. Before the fix the host file was copied into the
workspace, and its content reached the agent (and ``episodes.jsonl``). Now each is refused
with an error naming the task file and the field; an ordinary asset (or a link inside the
checkout) still arrives.

Attack (sparse files): files of holes use no blocks in the sandbox, but the QwenClawBench
grader copy wrote them out on the host (4 x 256 MiB cost 1 GiB of /tmp) and Claw-Eval's
snapshot read them into host memory. Now both count apparent size against a budget and say
what they refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.qwenclawbench.tasks import TaskFormatError, materialise_workspace, parse_task_file
from _requires import needs_bwrap


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


# -- Claw-Eval: a symlink listed in sandbox_files ------------------------------------------------------


def _claw_checkout(tmp_path: Path, task_yaml: str) -> Path:
    """A one-task Claw-Eval checkout (fixture, the benchmark's task.yaml format), no services."""
    checkout = tmp_path / "claw"
    task_dir = checkout / "tasks" / "fixture_T90_links"
    (task_dir / "fixtures").mkdir(parents=True)
    (task_dir / "fixtures" / "ok.txt").write_text("task fixture\n")
    (task_dir / "task.yaml").write_text(task_yaml)
    return checkout


def _claw_env(checkout: Path):
    from evaluators.claw_eval.environment import ClawEvalEnvironment
    from evaluators.claw_eval.tasks import parse_task_yaml

    task = parse_task_yaml(checkout / "tasks" / "fixture_T90_links" / "task.yaml", checkout)
    return ClawEvalEnvironment(task, sandbox_tools=True, exec_timeout_s=30, memory_mb=512)


@needs_bwrap
@pytest.mark.parametrize("listed", ["fixtures/secret.txt", "fixtures/secret_dir", "fixtures/holder"])
def test_claw_eval_sandbox_file_symlinks_out_of_the_checkout_are_refused(tmp_path, listed):
    from unified.execution.copying import CopyRefused

    secret_dir = tmp_path / "host_home"
    secret_dir.mkdir()
    (secret_dir / "id_rsa").write_text("HOST SECRET KEY\n")
    checkout = _claw_checkout(tmp_path, "task_id: fixture_T90_links\nprompt: {text: read the files}\n"
                                        f"sandbox_files: [fixtures/ok.txt, {listed}]\n")
    fixtures = checkout / "tasks" / "fixture_T90_links" / "fixtures"
    (fixtures / "secret.txt").symlink_to(secret_dir / "id_rsa")  # a file link out
    (fixtures / "secret_dir").symlink_to(secret_dir)  # a directory link out
    (fixtures / "holder").mkdir()
    (fixtures / "holder" / "inner").symlink_to(secret_dir / "id_rsa")  # a link out inside a listed directory
    env = _claw_env(checkout)
    try:
        with pytest.raises(CopyRefused, match="outside the task's checkout"):
            env.start()
        copied = [p.read_text() for p in env.workspace.rglob("*") if p.is_file()] if env.workspace else []
        assert "HOST SECRET KEY\n" not in copied
    finally:
        env.stop()


@needs_bwrap
def test_claw_eval_links_inside_the_checkout_still_arrive(tmp_path):
    checkout = _claw_checkout(tmp_path, "task_id: fixture_T90_links\nprompt: {text: read}\n"
                                        "sandbox_files: [fixtures/ok.txt, fixtures/alias.txt]\n")
    (checkout / "tasks" / "fixture_T90_links" / "fixtures" / "alias.txt").symlink_to("ok.txt")
    env = _claw_env(checkout)
    try:
        env.start()
        assert (env.workspace / "fixtures" / "alias.txt").read_text() == "task fixture\n"
    finally:
        env.stop()


# -- size budgets: sparse files in the grader copy and the snapshot ----------------------------------


def _sparse(path: Path, mib: int) -> None:
    with open(path, "wb") as f:
        f.truncate(mib * 2**20)


def test_qwenclawbench_grader_copy_has_a_budget_at_apparent_size(tmp_path):
    from evaluators.qwenclawbench.grading import run_automated_checks

    workspace = tmp_path / "ws"
    workspace.mkdir()
    for i in range(4):
        _sparse(workspace / f"hole{i}.bin", 64)  # 256 MiB apparent, no blocks
    result = run_automated_checks("def grade(t, w):\n    return {'a': 1.0}\n", [], workspace, copy_mb=128)
    assert result["score"] == 0.0 and "budget" in result["error"] and "apparent size" in result["error"]


@needs_bwrap
def test_claw_eval_snapshot_reads_no_file_past_its_budget(tmp_path):
    checkout = _claw_checkout(tmp_path, "task_id: fixture_T90_links\nprompt: {text: write}\n"
                                        "env_snapshot_files: [/workspace/big.bin, /workspace/small.txt]\n")
    env = _claw_env(checkout)
    try:
        env.start()
        env.snapshot_mb = 64
        _sparse(env.workspace / "big.bin", 300)
        (env.workspace / "small.txt").write_text("answer\n")
        snapshot = env.env_snapshot()
    finally:
        env.stop()
    assert snapshot["file:/workspace/small.txt"]["content"] == "answer\n"
    assert "budget" in snapshot["file:/workspace/big.bin"]["error"]
    assert env.snapshot_refused == ["/workspace/big.bin"]
