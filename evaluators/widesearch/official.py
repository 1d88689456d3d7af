"""The official WideSearch prompts, read at run time from the user's checkout of its repository.

The released evaluator (``ByteDance-Seed/WideSearch``, ``src/evaluation/metric_utils.py``) asks
its LLM judge with two prompts: ``primary_key_preprocess_prompt`` (align the answer's key values
and column names with the gold ones) and ``eval_column_prompt`` (grade an ``llm_judge`` column);
its agent (``src/agent/prompt.py``) starts from ``default_system_prompt_en``/``_zh``. We do not
copy them: with a checkout (``checkout`` in the adapter config or ``$WIDESEARCH_ROOT``) they are
read from its files as string constants (the files are parsed, never executed), and the results
record where the prompts came from; without one the adapter uses its own wording and says so.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path

ROOT_ENV = "WIDESEARCH_ROOT"
JUDGE_FILE = "src/evaluation/metric_utils.py"
AGENT_FILE = "src/agent/prompt.py"
JUDGE_PROMPTS = ("primary_key_preprocess_prompt", "eval_column_prompt")
SYSTEM_PROMPTS = ("default_system_prompt_en", "default_system_prompt_zh")


@dataclass
class OfficialPrompts:
    """What a checkout supplied (empty dicts when there is none)."""

    source: str | None = None
    """The checkout the prompts came from (None: no checkout, our own wording)."""
    judge: dict[str, str] = field(default_factory=dict)
    """``primary_key_preprocess_prompt`` and ``eval_column_prompt`` (``str.format`` templates)."""
    system: dict[str, str] = field(default_factory=dict)
    """``en``/``zh``: the official agent system prompts."""

    def describe(self) -> str:
        return f"official, from {self.source}" if self.source else "own wording (no WideSearch checkout)"


def string_constants(path: Path, names: tuple[str, ...]) -> dict[str, str]:
    """Module-level ``NAME = "..."`` string assignments of a Python file, read without running it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    out[target.id] = node.value.value
    return out


def load_official_prompts(checkout: str | None = None) -> OfficialPrompts:
    """The prompts of the checkout at ``checkout`` (else ``$WIDESEARCH_ROOT``); empty without one.

    A checkout that lacks a prompt the evaluator needs is an error naming the file and the name.
    """
    raw = checkout or os.environ.get(ROOT_ENV)
    if not raw:
        return OfficialPrompts()
    root = Path(raw)
    judge_file, agent_file = root / JUDGE_FILE, root / AGENT_FILE
    if not judge_file.is_file():
        raise FileNotFoundError(f"{root} is not a WideSearch checkout: {JUDGE_FILE} is missing "
                                f"(clone https://github.com/ByteDance-Seed/WideSearch and point ${ROOT_ENV} at it)")
    judge = string_constants(judge_file, JUDGE_PROMPTS)
    missing = [n for n in JUDGE_PROMPTS if n not in judge]
    if missing:
        raise ValueError(f"{judge_file}: no string constant {missing} (the evaluator's judge prompts)")
    system = string_constants(agent_file, SYSTEM_PROMPTS) if agent_file.is_file() else {}
    return OfficialPrompts(source=str(root.resolve()), judge=judge,
                           system={k.rsplit("_", 1)[-1]: v for k, v in system.items()})
