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
