"""One QwenClawBench rollout: a materialised workspace, the OpenClaw-style tools, a sandbox.

The agent gets the tools of the benchmark's agent (OpenClaw): ``read``, ``write``, ``edit``,
``exec``, ``web_fetch`` and ``web_search``. Every call runs inside one
:class:`unified.execution.WorkspaceSession` whose only writable place is the task's workspace (mounted
at ``/workspace``), with a read-only root, no network, and time/memory/process limits. Docker
with the official image is not used by this adapter; ``metadata["sandbox"]`` says which
sandbox ran (``bwrap``), and the results carry it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from unified.benchmarks.contract import Environment
from unified.execution import LocalBackend, WorkspaceSession, WorkspaceSpec
from unified.types import Episode, Message, Observation, ToolCall, ToolSpec

from evaluators.qwenclawbench.tasks import QCBTask, materialise_workspace

WORKSPACE_MOUNT = "/workspace"


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


TOOLS = [
    ToolSpec("read", "Read a file (text). Relative paths are resolved in the workspace. "
             "Optional 1-based line offset and line limit.",
             _schema({"path": {"type": "string", "description": "File path."},
                      "offset": {"type": "integer", "description": "First line (1-based)."},
                      "limit": {"type": "integer", "description": "Number of lines."}}, ["path"])),
    ToolSpec("write", "Create or overwrite a file with the given content (parent directories are created).",
             _schema({"path": {"type": "string", "description": "File path."},
                      "content": {"type": "string", "description": "Full new content."}}, ["path", "content"])),
    ToolSpec("edit", "Replace an exact piece of text in a file (it must occur exactly once).",
             _schema({"path": {"type": "string", "description": "File path."},
                      "oldText": {"type": "string", "description": "Text to find."},
                      "newText": {"type": "string", "description": "Replacement."}}, ["path", "oldText", "newText"])),
    ToolSpec("exec", "Run a shell command in the workspace and return its output and exit code.",
             _schema({"command": {"type": "string", "description": "Shell command."},
                      "workdir": {"type": "string", "description": "Working directory (default: the workspace)."},
                      "timeout": {"type": "integer", "description": "Time limit in seconds."}}, ["command"])),
    ToolSpec("web_fetch", "Fetch a web page by URL and return its text.",
             _schema({"url": {"type": "string", "description": "http(s) URL."},
                      "maxChars": {"type": "integer", "description": "Most characters to return."}}, ["url"])),
    ToolSpec("web_search", "Search the web and return result titles, URLs and snippets.",
             _schema({"query": {"type": "string", "description": "Search query."},
                      "count": {"type": "integer", "description": "Number of results."}}, ["query"])),
]

SYSTEM_PROMPT = (
    "You are a personal assistant agent running inside OpenClaw. Your workspace is {mount}: the user's files "
    "are there and relative paths resolve there. Use the tools to inspect files, run commands and create the "
    "deliverables the user asks for; then answer the user directly. Current date: {date}."
)


class QwenClawBenchEnvironment(Environment):
    """Workspace + sandbox for one run of one task (see the module docstring)."""

    def __init__(self, task: QCBTask, *, exec_timeout_s: float = 120, memory_mb: int = 2048,
                 max_processes: int = 256, scratch_dir: str | None = None) -> None:
        super().__init__()
        self.task = task
        self.exec_timeout_s, self.memory_mb, self.max_processes = exec_timeout_s, memory_mb, max_processes
        self.scratch_dir = scratch_dir
        self.tools = list(TOOLS)
        self.system_prompt = SYSTEM_PROMPT.format(mount=WORKSPACE_MOUNT, date=time.strftime("%Y-%m-%d"))
        self.first_user_message = task.prompt
        self._ws: WorkspaceSession | None = None
        self.workspace: Path | None = None
        self.deadline = 0.0
        self.metadata = {"sandbox": "bwrap", "docker": "not used (local bubblewrap sandbox ran)",
                         "network": "disabled", "task_timeout_s": task.timeout_seconds}

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._ws = LocalBackend().workspace(WorkspaceSpec(
            name=f"qcb-{self.task.id[:40]}-", timeout_s=self.exec_timeout_s, memory_mb=self.memory_mb,
            max_processes=self.max_processes, mount_point=WORKSPACE_MOUNT, scratch_dir=self.scratch_dir))
        self.workspace = self._ws.host_workspace
        self.metadata["workspace_files"] = len(materialise_workspace(self.task, self.workspace))
        self._ws.start()
        self.deadline = time.monotonic() + float(self.task.timeout_seconds)

    def stop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()

    # -- tools -----------------------------------------------------------------------------

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        out = []
        for call in tool_calls:
            start = time.monotonic()
            try:
                ok, text, meta = self._dispatch(call)
            except Exception as exc:  # a tool must never take the run down
                ok, text, meta = False, f"{call.name} failed: {type(exc).__name__}: {exc}", {}
            meta["seconds"] = round(time.monotonic() - start, 3)
            out.append(Observation(call_id=call.id, content=text, is_error=not ok, metadata=meta))
        if time.monotonic() > self.deadline:
            self.done = True
            self.metadata["stopped_by_task_timeout"] = True
        return out

    def _dispatch(self, call: ToolCall) -> tuple[bool, str, dict[str, Any]]:
        if call.parse_error:
            return False, f"could not parse the tool call: {call.parse_error}", {}
        if self._ws is None or not self._ws.running:
            return False, "the environment is not running", {}
        a = call.arguments or {}
        path = a.get("path") or a.get("file_path") or a.get("file")
        if call.name == "read":
            return (*self._ws.tool("read", {"path": path, "offset": a.get("offset"), "limit": a.get("limit")}), {})
        if call.name == "write":
            return (*self._ws.tool("write", {"path": path, "content": a.get("content", "")}), {})
        if call.name == "edit":
            old = a.get("oldText", a.get("old_string", a.get("old")))
            new = a.get("newText", a.get("new_string", a.get("new")))
            return (*self._ws.tool("edit", {"path": path, "old": old, "new": new}), {})
        if call.name in ("exec", "bash"):
            command = str(a.get("command") or a.get("cmd") or "")
            if not command:
                return False, "exec needs a 'command'", {}
            if a.get("workdir"):
                command = f"cd {_quote(str(a['workdir']))} && {command}"
            limit = min(float(a.get("timeout") or self.exec_timeout_s), self.exec_timeout_s)
            remaining = self.deadline - time.monotonic()
            return self._ws.shell(command, timeout_s=max(1.0, min(limit, remaining)))
        if call.name == "web_fetch":
            ok, text = self._ws.tool("fetch", {"url": a.get("url", ""), "max_chars": a.get("maxChars") or 50000,
                                                   "timeout": 10})
            if not ok:
                text = f"web_fetch failed: {text} (this sandbox has no network access)"
            return ok, text, {"network": "disabled"}
        if call.name == "web_search":
            return False, "web_search is unavailable: this sandbox has no network access", {"network": "disabled"}
        names = ", ".join(t.name for t in self.tools)
        return False, f"unknown tool {call.name!r}; available tools: {names}", {}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def transcript_from_episode(episode: Episode) -> list[dict[str, Any]]:
    """The run as an OpenClaw session transcript (the events the task's checks read).

    ``{"type": "message", "message": {"role": ..., "content": [blocks]}}`` with assistant blocks
    ``text`` / ``thinking`` / ``toolCall`` (``id``, ``name``, ``arguments``), and tool answers as
    ``role: "toolResult"`` messages (``toolCallId``, ``toolName``, ``isError``).
    """
    errors = {o.call_id: o.is_error for s in episode.steps for o in s.observations}
    events: list[dict[str, Any]] = [{"type": "session", "id": f"{episode.task_id}-{episode.trial}",
                                     "timestamp": episode.started_at}]
    for msg in episode.messages:
        if msg.role == "system":
            continue
        if msg.role == "user":
            body = {"role": "user", "content": [{"type": "text", "text": msg.content}]}
        elif msg.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if msg.reasoning:
                blocks.append({"type": "thinking", "thinking": msg.reasoning})
            if msg.content:
                blocks.append({"type": "text", "text": msg.content})
            for call in msg.tool_calls:
                blocks.append({"type": "toolCall", "id": call.id, "name": call.name, "arguments": call.arguments})
            body = {"role": "assistant", "content": blocks}
        else:
            body = {"role": "toolResult", "toolCallId": msg.tool_call_id or "", "toolName": msg.name or "",
                    "content": [{"type": "text", "text": msg.content}],
                    "isError": bool(errors.get(msg.tool_call_id or "", False))}
        events.append({"type": "message", "message": body})
    return events
