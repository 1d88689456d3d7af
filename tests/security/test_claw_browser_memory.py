"""Claw-Eval browser trials within the run's memory budget (issue #33 R10).

The attack: a web-page task's sandbox may hold 16 GiB (``browser_memory_mb``) with no per-process
address-space limit; with ``--max-in-flight 8`` eight such trials were admitted at once, far past
the host's memory. Now each trial reserves its sandbox's memory limit from the adapter's budget
(``memory_budget_mb``, default 75% of MemTotal) before the sandbox starts: the sum in flight never
passes the budget, a trial that does not fit waits, and a task whose sandbox can never fit is skipped.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from security._support import needs_bwrap

CHECKOUT = Path(__file__).parents[1] / "fixtures" / "claw_eval" / "fixture_checkout"
BROWSER_TASK = """task_id: fixture_W01_page
task_name: Fixture web page
category: multimodal_webpage
tags: [multimodal]
prompt: {text: "Write /workspace/output.html.", language: en}
sandbox_grader_files: [fixtures/fixture_record.py]
env_snapshot_commands: ["python /workspace/fixtures/fixture_record.py"]
environment: {timeout_seconds: 300, max_turns: 5}
"""


def test_a_browser_task_that_can_never_fit_the_budget_is_skipped_naming_the_setting(tmp_path):
    from evaluators.claw_eval import ClawEvalAdapter

    (tmp_path / "mock_services").mkdir()
    (tmp_path / "src" / "claw_eval").mkdir(parents=True)
    task_dir = tmp_path / "tasks" / "fixture_W01_page"
    (task_dir / "fixtures").mkdir(parents=True)
    (task_dir / "task.yaml").write_text(BROWSER_TASK)
    (task_dir / "fixtures" / "fixture_record.py").write_text("from playwright.sync_api import sync_playwright\n")
    (task,) = ClawEvalAdapter(root=str(tmp_path), memory_budget_mb=8192).tasks()
    assert task.skip_reason.startswith("memory budget: its sandbox needs browser_memory_mb=16384 MiB")
    assert "memory_budget_mb" in task.skip_reason
    (task,) = ClawEvalAdapter(root=str(tmp_path), memory_budget_mb=8192, browser_memory_mb=4096).tasks()
    assert not (task.skip_reason or "").startswith("memory budget")


def test_the_default_budget_is_a_share_of_the_host():
    from evaluators.claw_eval import ClawEvalAdapter
    from evaluators.claw_eval.memory import host_memory_mb

    assert ClawEvalAdapter(root=str(CHECKOUT)).memory_budget.total_mb == int(host_memory_mb() * 0.75)


@needs_bwrap
def test_trials_in_flight_never_reserve_more_than_the_budget():
    """Three trials of 2048 MiB against a 4096 MiB budget, started at once: two run, the third
    waits until one stops."""
    from evaluators.claw_eval import ClawEvalAdapter

    adapter = ClawEvalAdapter(root=str(CHECKOUT), memory_budget_mb=4096, memory_mb=2048)
    task = next(t for t in adapter.tasks() if t.id == "fixture_T01_notes")
    envs = [adapter.open(task) for _ in range(3)]
    started: list[float] = []

    def start(env):
        env.start()
        started.append(time.monotonic())

    threads = [threading.Thread(target=start, args=(env,)) for env in envs]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(started) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert len(started) == 2 and adapter.memory_budget.reserved_mb == 4096
        waiting = next(env for env in envs if env._ws is None)
        running = [env for env in envs if env is not waiting]
        stopped_at = time.monotonic()
        running[0].stop()
        threads[envs.index(waiting)].join(60)
        assert len(started) == 3 and started[-1] >= stopped_at
        assert waiting.metadata["memory_budget"]["waited_s"] > 0.4
    finally:
        for env in envs:
            env.stop()
        for thread in threads:
            thread.join(60)
        adapter.stop_services()
    assert adapter.memory_budget.reserved_mb == 0
    assert adapter.memory_budget.report() == {"budget_mb": 4096, "peak_reserved_mb": 4096,
                                              "peak_browser_trials_in_flight": 0, "trials_that_waited": 1}
