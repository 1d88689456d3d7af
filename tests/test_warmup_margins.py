"""Issue 51, the 35B run's margins: a wrong MODEL is one line, the parity probe is on in the 35B recipe,
the memory plan's refusal above its share of usable memory, the time plan's assumptions, collective timeout
and routes line, and the weight-sync checksum that does not depend on the learning rate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from unified.warmup.plan import model_dims

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "slurm" / "lwm_warmup.sh"
PAPER = REPO / "recipes" / "warmup" / "qwen35_35b_a3b.yaml"
JUDGE = "rewards.rubric.judge_endpoint=openai:http://judge:8001/v1#judge"


def _slurm_dry_run(tmp_path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": sys.executable, "REPO": str(REPO), "DRY_RUN": "1", "NODES": "4",
            "UNIFIED_HOSTNAMES": "n0 n1 n2 n3", "JUDGE": "openai:http://judge:8001/v1#judge",
            "OUTPUT": str(tmp_path / "out"), **env}
    return subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize("model", ["/nonexistent/model", "org/not a repo"])
def test_a_wrong_model_is_one_line_naming_it(tmp_path, model):
    """``MODEL=... sbatch slurm/lwm_warmup.sh`` (dry run): one line naming the path, no traceback (an id
    the hub's validator refuses raised HFValidationError out of the memory plan's model_dims)."""
    out = _slurm_dry_run(tmp_path, MODEL=model)
    assert out.returncode != 0
    text = (out.stdout + out.stderr).strip()
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if model in line]
    assert len(lines) == 1 and len(out.stderr.strip().splitlines()) == 1, text
    assert not (tmp_path / "out").exists()


def test_model_dims_of_a_bad_hub_id_is_a_reason_not_an_exception():
    dims, why = model_dims("org/not a repo")
    assert dims is None and "org/not a repo" in why
