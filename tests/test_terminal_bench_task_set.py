"""Terminal-Bench's task set identity (issue 52): the version and digests of the tasks a run used,
compared with the paper's 2.0; a 2.1 checkout is named 2.1 and not comparable with 2.0 numbers;
harbor's denominator rule is named in the result."""

from __future__ import annotations

import shutil
from pathlib import Path

from evaluators.terminal_bench import TerminalBench2Adapter
from unified.types import EpisodeResult

FIXTURES = Path(__file__).parent / "fixtures" / "terminal_bench"


def _checkout(tmp_path: Path, origin: str) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(FIXTURES, root)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(f'[core]\n\tbare = false\n[remote "origin"]\n\turl = {origin}\n'
                                          '\tfetch = +refs/heads/*:refs/remotes/origin/*\n')
    return root


def _aggregate(root: Path, **kw) -> dict:
    adapter = TerminalBench2Adapter(root=str(root), backend="local", agent="tool_calling", **kw)
    task_set = adapter.read_task_set()  # what tasks() reads too (no sandbox needed for it)
    results = [EpisodeResult(benchmark="terminal_bench_2", task_id=t, trial=0, score=1.0, passed=True,
                             details={"backend": "docker", "agent": "terminus_2"}) for t in ("a", "b")]
    assert task_set["n_tasks"] == len(list(root.glob("*/task.toml")))
    return adapter.aggregate(results)


def test_a_2_1_checkout_is_named_2_1_and_not_comparable_with_the_papers_2_0(tmp_path):
    out = _aggregate(_checkout(tmp_path, "https://github.com/harbor-framework/terminal-bench-2-1.git"))
    assert out["task_set"]["version"] == "2.1" and out["task_set_paper"]["version"] == "2.0"
    assert out["metric"].endswith("Terminal-Bench 2.1")
    assert out["comparable"] is False
    assert any(r.startswith("Terminal-Bench 2.1 task set") and "not comparable with 2.0" in r
               for r in out["not_comparable_because"])
    assert "0.25.0" in out["denominator_rule"] and "0.26.0" in out["denominator_rule"]


def test_the_same_task_names_with_changed_tests_give_another_content_digest(tmp_path):
    v20 = _aggregate(_checkout(tmp_path / "a", "https://github.com/laude-institute/terminal-bench-2.git"))
    changed = _checkout(tmp_path / "b", "https://github.com/laude-institute/terminal-bench-2.git")
    test_sh = next(changed.glob("*/tests/test.sh"))
    test_sh.write_text(test_sh.read_text() + "\n# a 2.1-style fix\n")
    v20b = _aggregate(changed)
    assert v20["task_set"]["version"] == "2.0" and not any("task set" in r for r in v20["not_comparable_because"])
    assert v20["task_set"]["task_list_digest"] == v20b["task_set"]["task_list_digest"]
    assert v20["task_set"]["content_digest"] != v20b["task_set"]["content_digest"]


def test_a_checkout_that_does_not_say_its_version_is_not_taken_for_2_0(tmp_path):
    root = tmp_path / "plain"
    shutil.copytree(FIXTURES, root)
    out = _aggregate(root)
    assert out["task_set"]["version"] is None
    assert any(r.startswith("task set version unknown") for r in out["not_comparable_because"])
    assert _aggregate(root, task_set_version="2.0")["task_set"]["version"] == "2.0"
