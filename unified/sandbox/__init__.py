"""Local sandboxes for untrusted commands (bubblewrap backend; see :mod:`unified.sandbox.bwrap`)."""

from unified.sandbox.bwrap import (
    BACKEND,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxResult,
    bwrap_available,
    throwaway_sandbox,
)
from unified.sandbox.scratch import ScratchSandbox

__all__ = ["BACKEND", "Sandbox", "SandboxConfig", "SandboxError", "SandboxResult", "ScratchSandbox",
           "bwrap_available", "throwaway_sandbox"]
