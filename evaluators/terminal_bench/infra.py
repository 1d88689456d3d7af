"""A Terminal-Bench verifier that could not run is an infrastructure error, not a wrong answer.

Every published Terminal-Bench 2.0 verifier installs its tools when it starts (``apt-get
install curl``, uv's installer, ``uvx -p 3.13 -w pytest ...``, which downloads CPython) and runs
pytest with pytest-json-ctrf, which writes ``/logs/verifier/ctrf.json``. When that file is
missing the tests never ran; if the verifier's output then shows a download, DNS,
package-index or missing-interpreter failure (:mod:`unified.execution.infra`), the episode is
``error: infrastructure`` with those lines as evidence: listed in the summary and left out of
the score. A verifier without pytest-json-ctrf is judged the same way when it wrote no reward.
A missing ``ctrf.json`` without such evidence keeps the reward the verifier gave (an answer
can break pytest too) and says so in ``reward_note``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from unified.execution.infra import infrastructure_error, infrastructure_evidence

CTRF = "/logs/verifier/ctrf.json"
_USES_CTRF = re.compile(r"--ctrf\b|pytest-json-ctrf")


def verifier_infrastructure_error(task_path: str, read: Callable[[str], bytes], details: dict[str, Any]) -> str | None:
    """``"infrastructure: ...\\nEVIDENCE"`` when the verifier could not run (module docstring), else None."""
    reward = details.get("reward")
    if (reward is not None and reward >= 1.0) or details.get("verifier_timed_out"):
        return None
    test_sh = Path(task_path) / "tests" / "test.sh"
    uses_ctrf = bool(_USES_CTRF.search(test_sh.read_text(errors="replace"))) if test_sh.is_file() else False
    if uses_ctrf and _non_empty(read, CTRF):
        return None
    if not uses_ctrf and reward is not None:
        return None
    try:
        output = read("/logs/verifier/test-stdout.txt").decode(errors="replace")
    except (FileNotFoundError, OSError, RuntimeError):
        output = ""
    evidence = infrastructure_evidence(output or str(details.get("verifier_output") or ""))
    if not evidence:
        if uses_ctrf:
            details["reward_note"] = f"no {CTRF} (pytest did not finish) and no sign of an infrastructure failure"
        return None
    what = f"the verifier could not run (no {CTRF})" if uses_ctrf else "the verifier could not run (no reward)"
    return infrastructure_error(what, evidence)


def _non_empty(read: Callable[[str], bytes], path: str) -> bool:
    try:
        return bool(read(path))
    except (FileNotFoundError, OSError, RuntimeError):
        return False
