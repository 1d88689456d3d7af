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
"""

from __future__ import annotations

import re

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
