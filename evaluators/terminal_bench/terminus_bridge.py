"""Harbor's Terminus-2 agent, run by harbor's own interpreter, talking to unified over a pipe.

Not imported by unified: :mod:`evaluators.terminal_bench.terminus` starts it as
``HARBOR_PYTHON terminus_bridge.py`` (harbor needs Python >= 3.12 and its own dependencies, so it
lives in ``.venv-harbor``, ``make harbor``). It imports only the standard library and ``harbor``.

What runs here is harbor's :class:`harbor.agents.terminus_2.Terminus2` itself, unchanged: its
``setup`` (harbor's ``TmuxSession``: tmux install attempt, ``tmux new-session ... 'bash --login'``,
``pipe-pane`` to ``/logs/agent/terminus_2.pane``) and its ``run`` (the prompt template, the JSON or
XML parser, the completion double-check, the timeout template, output limiting, proactive and
context-overflow summarisation, the trajectory file). Two seams are replaced, both through
harbor's own interfaces:

* the environment: an object with harbor's ``exec`` signature whose every command is sent to
  unified, which runs it in the task's sandbox or container (``ExecutionSession.exec``) and
  sends back stdout, stderr and the exit code (harbor's ``ExecResult``);
* the model: a :class:`harbor.llms.base.BaseLLM` whose ``call(prompt, message_history)`` is sent
  to unified, where the agent loop generates the answer with the eval's policy (any
  OpenAI-compatible endpoint, vLLM or the in-process checkpoint). A ``finish_reason`` of
  ``length`` raises harbor's ``OutputLengthExceededError``, as harbor's LiteLLM backend does; the
  context and output limits come from the settings, else from harbor's LiteLLM for
  ``model_name`` (its model map). A policy request that fails (a context overflow included) ends
  the episode in unified's loop: harbor's ``ContextLengthExceededError`` path never runs.

Protocol (one JSON object per line; stdout carries only the protocol, everything harbor or
litellm print goes to stderr):

* unified -> bridge, first line: ``{"instruction", "model_name", "parser_name", "logs_dir",
  "enable_summarize", "context_limit", "output_limit", "max_turns", "pane_width", "pane_height"}``
* bridge -> unified: ``{"type": "hello", "harbor_version"}``, then any number of
  ``{"type": "exec", "id", "command", "user", "cwd", "env", "timeout_sec"}`` (answer
  ``{"id", "stdout", "stderr", "return_code"}``) and ``{"type": "llm", "id", "prompt",
  "history"}`` (answer ``{"id", "content", "reasoning", "finish_reason", "prompt_tokens",
  "completion_tokens"}`` or ``{"id", "error": TEXT}``), and last
  ``{"type": "done", "completed", "n_episodes", "summarization_count", "error"}``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

PROTOCOL = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)  # whatever harbor or litellm print goes to stderr, never into the protocol
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm's bundled model map

from harbor.agents.terminus_2 import Terminus2  # noqa: E402
from harbor.environments.base import ExecResult  # noqa: E402
from harbor.llms.base import BaseLLM, LLMResponse, OutputLengthExceededError  # noqa: E402
from harbor.models.agent.context import AgentContext  # noqa: E402
from harbor.models.metric.usage_info import UsageInfo  # noqa: E402

_next_id = 0


def send(message: dict[str, Any]) -> None:
    PROTOCOL.write(json.dumps(message) + "\n")
    PROTOCOL.flush()


def ask(kind: str, **fields: Any) -> dict[str, Any]:
    """Send one request to unified and wait for its answer (the agent is one coroutine: blocking is fine)."""
    global _next_id
    _next_id += 1
    send({"type": kind, "id": _next_id, **fields})
    line = sys.stdin.readline()
    if not line:
        raise EOFError("unified closed the bridge")
    answer = json.loads(line)
    if answer.get("id") != _next_id:
        raise RuntimeError(f"bridge: answer {answer.get('id')} to request {_next_id}")
    return answer


class UnifiedEnvironment:
    """What Terminus-2 and its ``TmuxSession`` use of a harbor environment: ``exec`` (and names)."""

    session_id = "unified"
    default_user = None

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,  # safe: harbor's environment method; the command runs in our sandbox (ExecutionSession.exec), never on the host
                   timeout_sec: int | None = None, user: str | int | None = None, **_: Any) -> ExecResult:
        answer = ask("exec", command=command, cwd=cwd, env=env, timeout_sec=timeout_sec,
                     user=None if user is None else str(user))
        return ExecResult(stdout=answer.get("stdout"), stderr=answer.get("stderr"),
                          return_code=int(answer.get("return_code", 1)))

    async def upload_file(self, source_path: Any, target_path: str) -> None:
        raise RuntimeError("the unified bridge uploads no files (terminal recording is off)")

    async def download_file(self, source_path: str, target_path: Any) -> None:
        raise RuntimeError("the unified bridge downloads no files (terminal recording is off)")


class UnifiedLLM(BaseLLM):
    """Harbor's LLM interface answered by unified's agent loop (the module docstring)."""

    def __init__(self, model_name: str, context_limit: int | None, output_limit: int | None) -> None:
        super().__init__()
        from harbor.llms.lite_llm import LiteLLM

        self._limits = LiteLLM(model_name=model_name)  # harbor's own lookup, for limits not set
        self._context_limit, self._output_limit = context_limit, output_limit

    async def call(self, prompt: str, message_history: list[dict[str, Any]] | None = None,
                   **_: Any) -> LLMResponse:
        history = [{"role": m.get("role"), "content": m.get("content")} for m in (message_history or [])]
        answer = ask("llm", prompt=prompt, history=history)
        if answer.get("error"):
            raise RuntimeError(f"unified: {answer['error']}")
        content = answer.get("content") or ""
        if answer.get("finish_reason") == "length":
            raise OutputLengthExceededError("the policy hit its max_tokens limit", truncated_response=content)
        usage = UsageInfo(prompt_tokens=int(answer.get("prompt_tokens") or 0),
                          completion_tokens=int(answer.get("completion_tokens") or 0), cache_tokens=0, cost_usd=0.0)
        return LLMResponse(content=content, reasoning_content=answer.get("reasoning"), usage=usage)

    def get_model_context_limit(self) -> int:
        return int(self._context_limit) if self._context_limit else self._limits.get_model_context_limit()

    def get_model_output_limit(self) -> int | None:
        return int(self._output_limit) if self._output_limit else self._limits.get_model_output_limit()


async def run(config: dict[str, Any]) -> dict[str, Any]:
    logs_dir = Path(config.get("logs_dir") or tempfile.mkdtemp(prefix="terminus-2-"))
    logs_dir.mkdir(parents=True, exist_ok=True)
    agent = Terminus2(logs_dir=logs_dir, model_name=config["model_name"], parser_name=config.get("parser_name", "json"),
                      enable_summarize=bool(config.get("enable_summarize", True)), record_terminal_session=False,
                      max_turns=config.get("max_turns"), suppress_max_turns_warning=True,
                      tmux_pane_width=int(config.get("pane_width", 160)),
                      tmux_pane_height=int(config.get("pane_height", 40)))
    agent._llm = UnifiedLLM(config["model_name"], config.get("context_limit"), config.get("output_limit"))
    environment = UnifiedEnvironment()
    await agent.setup(environment)
    context = AgentContext()
    await agent.run(config["instruction"], environment, context)
    metadata = context.metadata or {}
    return {"completed": bool(agent._pending_completion), "n_episodes": metadata.get("n_episodes"),
            "summarization_count": metadata.get("summarization_count"),
            "trajectory": str(logs_dir / "trajectory.json")}


def main() -> int:
    config = json.loads(sys.stdin.readline())
    send({"type": "hello", "harbor_version": importlib.metadata.version("harbor")})
    try:
        done = asyncio.run(run(config))
    except EOFError:
        return 0
    except Exception as exc:  # reported to unified, which records it as the episode's error
        send({"type": "done", "completed": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"})
        return 1
    send({"type": "done", "error": None, **done})
    return 0


if __name__ == "__main__":
    sys.exit(main())
