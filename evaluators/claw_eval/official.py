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
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

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
