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
task and image digest while the host's resources stay the same, run only after the episode's own
environment is closed; a baseline that raises confirms nothing), and only when that run shows a
failure of the same kind is the episode ``error: infrastructure``; otherwise it is scored as the grader says (0), with the unconfirmed
evidence kept in ``details["infrastructure_unconfirmed"]``.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Callable, Sequence

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


LOW_DISK_BYTES = 1 << 30
"""Less free space than this on a watched file system is a host resource state of its own (:func:`host_resources`)."""
WATCHED_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf")
"""The host's name-resolution files: a change expires every cached baseline (:func:`host_resources`)."""


STORAGE_DIRS = ("/var/lib/containers", "/var/lib/docker", "~/.local/share/containers")
"""Container storage whose free space is watched when it exists (:func:`host_resources`)."""


def host_resources(paths: Sequence[str | Path] | None = None,
                   files: Sequence[str | Path] = WATCHED_FILES) -> tuple[str, ...]:
    """What of the host a baseline's answer depends on: for each of ``paths`` (the temporary directory, the
    container storage that exists, by default) whether its file system has less than :data:`LOW_DISK_BYTES` free, and the sha256 of
    each of ``files``. A baseline cached under other resources is run again (:class:`InfrastructureBaselines`)."""
    if paths is None:
        paths = [d for d in (os.path.expanduser(p) for p in STORAGE_DIRS) if os.path.isdir(d)]
    state = []
    for path in [tempfile.gettempdir(), *paths]:
        try:
            st = os.statvfs(path)
            state.append(f"disk {path}: {'low' if st.f_bavail * st.f_frsize < LOW_DISK_BYTES else 'ok'}")
        except OSError as exc:
            state.append(f"disk {path}: {type(exc).__name__}")
    for name in files:
        try:
            state.append(f"file {name}: {hashlib.sha256(Path(name).read_bytes()).hexdigest()}")
        except OSError as exc:
            state.append(f"file {name}: {type(exc).__name__}")
    return tuple(state)


class InfrastructureBaselines:
    """The grader of each task run once without the agent: is an infrastructure failure the machine's?

    ``confirm(key, episode_error, baseline, image=...)`` returns the error text to record (``episode_error``
    plus :data:`CONFIRMED`) when ``baseline()`` (the grader on a fresh environment, no agent actions; it
    returns its own :func:`infrastructure_error` text or None) shows a failure of a kind the episode's
    evidence also names; else None, and the caller scores the episode as its grader said (0).

    Nothing about it can be forced by the agent (issue 42, R4): the caller runs it only after the
    episode's own environment is closed (a disk the agent filled is freed first); a baseline that
    raises is *not* a confirmation (the episode keeps its 0) and is not cached; an answer is cached
    per ``(key, image)``, ``image`` being the image's digest (a rebuilt image is asked again), and
    only while the host's resources (:func:`host_resources`: free disk, name-resolution files) stay
    as they were when it ran.
    """

    def __init__(self, resources: Callable[[], tuple[str, ...]] = host_resources) -> None:
        self._lock = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._results: dict[tuple[str, str], tuple[tuple[str, ...], str | None]] = {}
        self._resources = resources
        self.runs = 0
        """How many baselines ran."""
        self.failures: list[str] = []
        """Why each baseline that raised raised (none of them confirmed anything)."""

    def baseline(self, key: str, run: Callable[[], str | None], image: str = "") -> str | None:
        """The cached (or now run) baseline of ``(key, image)`` under the current host resources."""
        with self._lock:
            lock = self._locks.setdefault((key, image), threading.Lock())
        with lock:
            resources = self._resources()
            cached = self._results.get((key, image))
            if cached is not None and cached[0] == resources:
                return cached[1]
            self.runs += 1
            try:
                found = run()
            except Exception as exc:  # noqa: BLE001 - no baseline: nothing is confirmed (the episode keeps its 0)
                self.failures.append(f"{key}: {type(exc).__name__}: {exc}"[:300])
                return None
            self._results[(key, image)] = (resources, found)
            return found

    def confirm(self, key: str, episode_error: str, run: Callable[[], str | None], image: str = "") -> str | None:
        """``episode_error`` confirmed (with :data:`CONFIRMED` appended), or None: not shown to be the machine's fault."""
        found = self.baseline(key, run, image)
        if found is None or not evidence_kinds(found) & evidence_kinds(episode_error):
            return None
        return f"{episode_error}\n{CONFIRMED}"
