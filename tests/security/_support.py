"""Canaries shared by the threat-model tests (skip markers: tests/_requires.py)."""

from __future__ import annotations

from _requires import needs_bwrap, needs_local, needs_tmux

CANARIES = {"OPENAI_API_KEY": "sk-canary-openai-3f9a61c0d2", "HF_TOKEN": "hf_canary_token_77b1e0c4"}
"""Fake secrets planted in the host environment; no sandboxed process, grader or record may show them."""

__all__ = ["CANARIES", "needs_bwrap", "needs_local", "needs_tmux"]
