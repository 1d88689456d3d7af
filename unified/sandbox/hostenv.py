"""The host's environment never reaches a sandbox, a grader or a recorded episode.

Two rules, both needed:

- Every process chain that ends in a sandbox (``prlimit``/``unshare``/``setpriv``/``bwrap``) is
  started with :func:`minimal_host_env` instead of inheriting ours. ``bwrap --clearenv`` only
  cleans the *child's* environment: bubblewrap itself (pid 1 of the sandbox's PID namespace)
  keeps the environment it was started with, and the sandboxed command can read it from
  ``/proc/1/environ``. With a minimal environment there is nothing to read.
- Defense in depth: :func:`redact_host_secrets` replaces the value of every secret-looking host
  variable (``*_KEY``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*`` ...) in a text. The agent loop
  applies it to every observation before it is recorded or shown to the model, so a secret that
  leaks through some other door still never lands in ``episodes.jsonl`` or a later prompt.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|AUTH|COOKIE|SESSION)",
                          re.IGNORECASE)
_MIN_SECRET_LEN = 8
"""Shorter values (``1``, ``true``, a port) are too common in ordinary output to redact."""


def minimal_host_env() -> dict[str, str]:
    """The whole environment of a host-side sandbox launcher: a system PATH and a UTF-8 locale."""
    return {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def secret_items(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(name, value)`` of the secret-looking variables of ``environ`` (default: ours), longest value first."""
    environ = os.environ if environ is None else environ
    found = [(k, v) for k, v in environ.items() if _SECRET_NAME.search(k) and len(v.strip()) >= _MIN_SECRET_LEN]
    return sorted(found, key=lambda kv: -len(kv[1]))


def redact_host_secrets(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with every secret-looking host variable's value replaced by ``[redacted $NAME]``."""
    if not text or not isinstance(text, str):
        return text
    for name, value in secret_items(environ):
        if value in text:
            text = text.replace(value, f"[redacted ${name}]")
    return text
