"""The Claw-Eval checkout's own agent system prompt, sandbox tool specs and simulated user, at runtime.

Nothing of them is copied here: a subprocess (the checkout's code imports pydantic models and the
OpenAI SDK; it stays out of our process) imports from ``<checkout>/src``:

- ``claw_eval.runner.system_prompt.build_system_prompt(task, cfg.prompt, extra_tools=...)`` with
  ``TaskDefinition.from_yaml`` and the default ``PromptConfig`` (or the ``prompt:`` section of the
  checkout's ``config_general.yaml`` when it has one), the sandbox tools being the checkout's
  ``runner/sandbox_tools.py`` specs of the tools we offer; the runner then appends the task's
  ``user_agent.system_prompt_suffix`` (``runner/loop.py``);
- ``claw_eval.runner.user_agent.UserAgent(...).generate_response(persona, messages)``: the
  simulated user's prompts, sampling (temperature, ``max_tokens``) and retries, unchanged.

``claw_eval.runner`` is entered as a bare package so that its ``__init__`` (the whole agent loop and
its dependencies) is not imported. When any of this fails (a checkout without these modules),
the caller falls back to its own prompts and records why.

Which judge and simulated user the benchmark's own runs use differs per split: the checkout keeps
one run config per kind of task (``config_general.yaml``, ``config_multimodal.yaml``,
``config_user_agent.yaml`` for multi-turn; at 9365e1a gemini-3-flash-preview grades general and
multimodal, claude-opus-4.6 grades multi-turn and plays its user). :func:`grading_models` reads the
``judge`` and ``user_agent_model`` of a split's config at run time, so the aggregate names every
judge and user that is not the checkout's own, per split.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

_PRELUDE = r'''
import json, sys, types, os
args = json.loads(sys.argv[1])
src = os.path.join(args["checkout"], "src")
sys.path.insert(0, src)
pkg = types.ModuleType("claw_eval.runner")
pkg.__path__ = [os.path.join(src, "claw_eval", "runner")]
sys.modules["claw_eval.runner"] = pkg
'''

_SETUP = _PRELUDE + r'''
import yaml
from claw_eval.models.task import TaskDefinition
from claw_eval.config import PromptConfig
from claw_eval.runner.system_prompt import build_system_prompt
from claw_eval.runner.sandbox_tools import SANDBOX_TOOLS
cfg_path = os.path.join(args["checkout"], "config_general.yaml")
section = (yaml.safe_load(open(cfg_path)) or {}).get("prompt") if os.path.exists(cfg_path) else None
prompt_cfg = PromptConfig(**section) if section else PromptConfig()
task = TaskDefinition.from_yaml(args["task_yaml"])
extra = [t for t in SANDBOX_TOOLS if t.name in args["sandbox_tools"]]
print(json.dumps({"system_prompt": build_system_prompt(task, prompt_cfg, extra_tools=extra),
                  "sandbox_tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                                    for t in extra]}))
'''

_USER = _PRELUDE + r'''
from claw_eval.models.message import Message
from claw_eval.runner.user_agent import UserAgent
agent = UserAgent(model_id=args["model"], api_key=args["api_key"] or "unused", base_url=args["base_url"])
messages = [Message(role=m["role"], content=m["content"]) for m in args["messages"]]
print(json.dumps({"reply": agent.generate_response(args["persona"], messages)}))
'''


def _run(script: str, args: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-I", "-c", script, json.dumps(args)], capture_output=True, text=True,
                          timeout=timeout_s, cwd=args["checkout"])
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1] if (done.stderr or done.stdout)
                           else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@lru_cache(maxsize=512)
def _setup(checkout: str, task_yaml: str, sandbox_tools: tuple[str, ...]) -> str:
    return json.dumps(_run(_SETUP, {"checkout": checkout, "task_yaml": task_yaml,
                                    "sandbox_tools": list(sandbox_tools)}, timeout_s=120))


def agent_setup(checkout: str | Path, task_dir: str | Path, sandbox_tools: list[str]) -> dict[str, Any]:
    """``{"system_prompt", "sandbox_tools": [{name, description, input_schema}]}`` built by the
    checkout's code for this task (cached per task). Raises when the checkout cannot build it."""
    return json.loads(_setup(str(Path(checkout).resolve()), str(Path(task_dir, "task.yaml").resolve()),
                             tuple(sandbox_tools)))


def user_reply(checkout: str | Path, *, persona: str, messages: list[dict[str, str]], base_url: str, model: str,
               api_key: str | None, timeout_s: float = 3600) -> str | None:
    """The checkout's simulated user's next message (None: it is done, ``[DONE]``), from the
    conversation so far (``[{"role", "content"}]``, user and assistant text)."""
    return _run(_USER, {"checkout": str(Path(checkout).resolve()), "persona": persona, "messages": messages,
                        "base_url": base_url, "model": model, "api_key": api_key}, timeout_s=timeout_s)["reply"]


SPLIT_CONFIGS = {"general": "config_general.yaml", "multimodal": "config_multimodal.yaml",
                 "multi_turn": "config_user_agent.yaml"}
"""The checkout's run config of each split (its README: one config per kind of task; the
``judge:`` section grades, ``user_agent_model:`` plays the user of multi-turn tasks)."""


@dataclass(frozen=True)
class GradingModels:
    """The models the checkout's config of one split names (None: the config does not name one)."""

    split: str
    config: str
    judge: str | None
    user: str | None
    found: bool


def grading_models(checkout: str | Path, split: str) -> GradingModels:
    """The judge and simulated user of ``split`` as the checkout's own config names them
    (:data:`SPLIT_CONFIGS`, read at run time; ``found`` False when the file is missing or unreadable)."""
    name = SPLIT_CONFIGS.get(split, SPLIT_CONFIGS["general"])
    try:
        data = yaml.safe_load((Path(checkout) / name).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return GradingModels(split, name, None, None, False)

    def model_of(section: str) -> str | None:
        value = data.get(section) if isinstance(data, dict) else None
        model = value.get("model_id") if isinstance(value, dict) else None
        return str(model) if model else None

    return GradingModels(split, name, model_of("judge"), model_of("user_agent_model"), True)
