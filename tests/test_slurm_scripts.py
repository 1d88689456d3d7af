"""slurm/*.sh for a newcomer: the environment check cannot be fooled by the checkout in the cwd, a
dry run says it started nothing, the variables each script needs are documented, and the paper
recipe without a judge stops before any node starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = [REPO / "slurm" / "eval.sh", REPO / "slurm" / "lwm_warmup.sh"]


def _run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": sys.executable, "REPO": str(REPO), "DRY_RUN": "1", "UNIFIED_HOSTNAMES": "n0",
            **env}
    return subprocess.run(["bash", str(script), *args], env=full, capture_output=True, text=True, cwd=REPO,
                          timeout=120)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_an_interpreter_without_torch_is_refused_even_from_the_checkout(script, tmp_path):
    # an interpreter that imports `unified` from the cwd (the checkout) but has no site-packages, hence no torch
    bare = tmp_path / "python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    assert subprocess.run([str(bare), "-c", "import unified"], cwd=REPO).returncode == 0  # the cwd fakes it
    out = _run(script, PYTHON=str(bare), GPUS_PER_NODE="0", RECIPE="recipes/warmup/embedded_cpu.yaml")
    assert out.returncode != 0 and out.stdout == ""
    assert f"PYTHON={bare} cannot import torch and unified outside the checkout" in out.stderr
    assert "No module named 'torch'" in out.stderr and "VENV=" in out.stderr


def test_a_dry_run_says_it_started_nothing():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # the two dry runs (Python start-ups, nothing written) at once
        evaluation = pool.submit(_run, REPO / "slurm" / "eval.sh", "--limit", "1", SERVER="none", MODEL="embedded")
        warmup = pool.submit(_run, REPO / "slurm" / "lwm_warmup.sh", RECIPE="recipes/warmup/embedded_cpu.yaml",
                             GPUS_PER_NODE="0", NODES="1")
    out = evaluation.result()
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].endswith("dry run: nothing was started (the commands above are what a "
                                                "real run would do)")
    assert "done;" not in out.stdout
    out = warmup.result()
    assert out.returncode == 0, out.stderr
    assert "dry run: nothing was started" in out.stdout.splitlines()[-1] and "checkpoint is" not in out.stdout


def test_the_paper_recipe_without_judge_stops_at_once():
    out = _run(REPO / "slurm" / "lwm_warmup.sh", UNIFIED_HOSTNAMES="n0 n1", NODES="2", GPUS_PER_NODE="8")
    assert out.returncode != 0 and "srun" not in out.stdout
    assert "rewards.rubric.judge_endpoint is empty" in out.stderr and "JUDGE=openai:URL#MODEL" in out.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_variables_a_newcomer_needs_are_documented(script):
    text = script.read_text()
    assert re.search(r"^VENV=\$\{VENV:-", text, re.M) and "docs/slurm.md" in text
    if script.name == "lwm_warmup.sh":
        assert all(word in text for word in ("JUDGE", "--nodes", "MODEL"))
    doc = (REPO / "docs" / "slurm.md").read_text()
    assert script.name in doc and "slurmctld" in doc and "VENV" in doc


def test_without_venv_or_python_the_checkouts_venv_is_used_and_said(tmp_path):
    """``MODEL=... sbatch slurm/eval.sh`` with neither VENV nor PYTHON set: the checkout's ``.venv`` (what
    ``make setup`` made), said on one line, not a bare ``python`` that cannot import torch."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    (repo / "slurm").symlink_to(REPO / "slurm")
    (repo / ".venv").symlink_to(Path(sys.prefix))  # this interpreter's environment stands for make setup's
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VENV")}
    out = subprocess.run(["bash", str(repo / "slurm" / "eval.sh"), "--limit", "1"], capture_output=True, text=True,
                         cwd=repo, timeout=120, env={**env, "REPO": str(repo), "DRY_RUN": "1", "SERVER": "none",
                                                     "MODEL": "gold", "UNIFIED_HOSTNAMES": "n0"})
    assert out.returncode == 0, out.stderr
    assert f"VENV unset: using {repo}/.venv" in out.stderr
    assert "dry run: nothing was started" in out.stdout.splitlines()[-1]
