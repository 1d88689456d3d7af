"""Skip markers for tests that need a system tool this machine may lack; each reason says how to install it.

``make test`` must pass on a fresh machine without bubblewrap or tmux: what cannot run there
skips with the install line (tests/security/test_without_bubblewrap.py checks this).
"""

from __future__ import annotations

import shutil

import pytest

from unified.execution import LocalBackend
from unified.sandbox import bwrap_available

BWRAP_REASON = "bubblewrap is not installed: apt-get install -y bubblewrap"
TMUX_REASON = "tmux is not installed (the Terminal-Bench terminal): apt-get install -y tmux"

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason=BWRAP_REASON)
_local = LocalBackend().unavailable_reason()
needs_local = pytest.mark.skipif(_local is not None, reason=f"local execution backend unavailable: {_local}")
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason=TMUX_REASON)


def _vllm_reason() -> str | None:
    from unified.inference.vllm_server import VLLMUnavailable, vllm_python

    try:
        vllm_python()
    except VLLMUnavailable as exc:
        return str(exc)
    return None


VLLM_REASON = _vllm_reason()
needs_vllm = pytest.mark.skipif(VLLM_REASON is not None, reason=f"{VLLM_REASON}")


def _harbor_reason() -> str | None:
    from evaluators.terminal_bench.terminus import harbor_python

    return None if harbor_python() else ("harbor (Terminus-2, the default Terminal-Bench agent) is not installed: "
                                         "make harbor (creates .venv-harbor)")


HARBOR_REASON = _harbor_reason()
needs_harbor = pytest.mark.skipif(HARBOR_REASON is not None, reason=f"{HARBOR_REASON}")
