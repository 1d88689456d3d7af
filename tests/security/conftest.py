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
