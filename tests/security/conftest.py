"""Fixtures of the threat-model tests."""

from __future__ import annotations

import pytest

from security._support import CANARIES


@pytest.fixture
def canaries(monkeypatch):
    """Plant the canary secrets in this process's environment (what a sandbox launched now would inherit)."""
    for key, value in CANARIES.items():
        monkeypatch.setenv(key, value)
    return dict(CANARIES)


@pytest.fixture(scope="module")
def podman_service_adapter(tmp_path_factory):
    """The service fixture task on podman (security/_containers.py; the test module carries its skip marks)."""
    from security._containers import podman_service_adapter as adapter

    with adapter(tmp_path_factory.mktemp("conf")) as opened:
        yield opened


def pytest_report_header(config) -> str | None:
    """As root, one line when another user (make test-security-nonroot's uid 65534) could not run this Python."""
    import os

    from security._nonroot import nonroot_note

    return nonroot_note() if os.geteuid() == 0 else None
