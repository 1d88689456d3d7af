"""Promise: ``make test`` passes on a fresh machine without bubblewrap or tmux.

Before the fix, ``tests/test_execution.py::test_get_backend_by_name_env_and_auto`` raised
BackendUnavailable there, so the README's test command failed. This runs the test files that
use the sandbox, the local backend or tmux in a child pytest whose ``PATH`` hides ``bwrap`` and
``tmux``: everything passes or skips, and the skip reasons carry the install lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]
FILES = ["test_sandbox.py", "test_execution.py", "test_terminal_bench.py", "test_swe_bench.py",
         "test_qwenclawbench_adapter.py", "test_claw_eval_adapter.py", "test_qwenclawbench_fidelity.py",
         "test_claw_eval_fidelity.py", "test_execution_in_domain_suite.py", "test_lwm_harvest.py",
         *[f"security/test_{name}.py" for name in ("host_secrets", "grader_isolation", "verifier_isolation",
                                                   "resource_limits", "task_files", "special_files_and_leftovers")]]
"""Every test file that runs sandboxes, the local backend or tmux (a new one belongs here too)."""
HIDDEN = {"bwrap", "tmux"}


def _path_without(tmp_path: Path) -> str:
    """A PATH holding links to every program of ours except the hidden ones."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            link = bin_dir / name
            if name not in HIDDEN and not link.exists() and not link.is_symlink():
                link.symlink_to(os.path.join(directory, name))
    return str(bin_dir)


@pytest.mark.skipif(os.environ.get("UNIFIED_HIDING_BWRAP") == "1", reason="already inside the bwrap-less run")
def test_the_suite_passes_without_bubblewrap_and_tmux(tmp_path):
    env = {**os.environ, "PATH": _path_without(tmp_path), "UNIFIED_HIDING_BWRAP": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
           *[str(TESTS / f) for f in FILES]]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=TESTS.parent, timeout=900)
    tail = out.stdout[-6000:]
    assert out.returncode == 0, tail
    assert "apt-get install -y bubblewrap" in out.stdout and "apt-get install -y tmux" in out.stdout, tail
