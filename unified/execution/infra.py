"""Evidence that a grader could not run because of the machine, not because of the answer.

A verifier that installs its tools at verify time (``apt-get``, ``pip``, ``uvx -p 3.13``, which
downloads CPython) fails on a machine without the network or a registry before a single test
runs; its reward of 0 says nothing about the solution. Graders call
:func:`infrastructure_evidence` on the verifier's output only when their own check shows
that the tests never ran (no ``ctrf.json`` from pytest-json-ctrf, no parsed test status), and
then record the episode as ``error: infrastructure`` with these lines as evidence, so it is
listed and left out of the score instead of counted wrong.

The patterns are failures of fetching from outside or of a missing grading tool; a refused
connection to ``localhost`` (a service the solution should have started) is not one of them.

That output is the agent's to shape, though: a CSV row it wrote that reads ``Could not resolve
host`` lands in the checker's traceback, a fake ``bash`` prints ``pytest: command not found``. So
evidence alone never takes an episode out of the score: :class:`InfrastructureBaselines` runs the
task's grader once more on a fresh environment from the same image *without the agent* (cached per
task for the run), and only when that run shows a failure of the same kind is the episode
``error: infrastructure``; otherwise it is scored as the grader says (0), with the unconfirmed
evidence kept in ``details["infrastructure_unconfirmed"]``.
"""

from __future__ import annotations

import re
import threading
from typing import Callable

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("DNS", re.compile(r"Could not resolve host|Temporary failure (?:in name resolution|resolving)|Name or service "
                       r"not known|failed to lookup address|dns error|getaddrinfo failed|No address associated", re.I)),
    ("download", re.compile(r"Failed to download|error sending request for url|Failed to fetch http|"
                            r"Network is unreachable|curl: \((?:6|28|35|56|60)\)|SSL certificate problem|"
                            r"CERTIFICATE_VERIFY_FAILED|Connection (?:timed out|reset by peer) while|"
                            r"Max retries exceeded with url: (?!.*(?:localhost|127\.0\.0\.1))", re.I)),
    ("apt", re.compile(r"^E: (?:Unable to locate package|Failed to fetch|Package '.*' has no installation candidate|"
                       r"Some index files failed to download)", re.I | re.M)),
    ("pip", re.compile(r"No matching distribution found for|Could not find a version that satisfies the requirement|"
                       r"ERROR: Could not install packages due to an OSError", re.I)),
    ("interpreter", re.compile(r"No interpreter found for Python|No (?:download|Python) found for request|"
                               r"\b(?:uvx?|python3?(?:\.\d+)?|pytest|pip3?|curl|apt-get): (?:command )?not found", re.I)),
)


def infrastructure_evidence(output: str, limit: int = 5) -> list[str]:
    """Up to ``limit`` lines of ``output`` that show a download, DNS, package-index or interpreter failure,
    each prefixed with its kind (``"DNS: curl: (6) Could not resolve host: astral.sh"``)."""
    found: list[str] = []
    for line in output.splitlines():
        text = line.strip()
        for kind, pattern in PATTERNS:
            if text and pattern.search(text):
                item = f"{kind}: {text[:240]}"
                if item not in found:
                    found.append(item)
                break
        if len(found) >= limit:
            break
    return found


def infrastructure_error(what: str, evidence: list[str]) -> str:
    """The ``EpisodeResult.error`` text: one grouping line, then the evidence."""
    return "\n".join([f"infrastructure: {what}", *evidence])


def evidence_kinds(error_or_evidence: str | list[str]) -> set[str]:
    """The kinds (``DNS``, ``download``, ...) named by :func:`infrastructure_error` text or an evidence list."""
    lines = error_or_evidence.splitlines()[1:] if isinstance(error_or_evidence, str) else error_or_evidence
    kinds = {line.split(":", 1)[0] for line in lines}
    return kinds & {kind for kind, _ in PATTERNS}


CONFIRMED = "reproduced without the agent: the grader on a fresh environment from the same image failed the same way"
NOT_REPRODUCED = ("not reproduced without the agent (the grader on a fresh environment from the same image did not fail "
                  "this way), so the output that showed it was the agent's doing: scored as the grader says")


class InfrastructureBaselines:
    """The grader of each task run once without the agent, per run: is an infrastructure failure the machine's?

    ``confirm(key, episode_error, baseline)`` returns the error text to record (``episode_error`` plus
    :data:`CONFIRMED`) when ``baseline()`` (the grader on a fresh environment, no agent actions; it
    returns its own :func:`infrastructure_error` text or None) shows a failure of a kind the episode's
    evidence also names; else None, and the caller scores the episode as its grader said. Each key's
    baseline runs once (thread-safe; a baseline that raises counts as confirmed: the fresh environment
    itself could not be had).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._results: dict[str, str | None] = {}
        self.runs = 0
        """How many baselines ran (one per key at most)."""

    def baseline(self, key: str, run: Callable[[], str | None]) -> str | None:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._results:
                self.runs += 1
                try:
                    self._results[key] = run()
                except Exception as exc:  # noqa: BLE001 - the fresh environment itself failed: the machine's fault
                    self._results[key] = infrastructure_error("a fresh environment without the agent failed",
                                                              [f"environment: {type(exc).__name__}: {exc}"[:240]])
            return self._results[key]

    def confirm(self, key: str, episode_error: str, run: Callable[[], str | None]) -> str | None:
        """``episode_error`` confirmed (with :data:`CONFIRMED` appended), or None: not the machine's fault."""
        found = self.baseline(key, run)
        if found is None:
            return None
        if found.splitlines()[1:2] and found.splitlines()[1].startswith("environment: "):
            return f"{episode_error}\n{CONFIRMED} ({found.splitlines()[1]})"
        if not evidence_kinds(found) & evidence_kinds(episode_error):
            return None
        return f"{episode_error}\n{CONFIRMED}"
