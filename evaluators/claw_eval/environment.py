"""One Claw-Eval trial: the task's mock services, its tools, a sandboxed workspace, a simulated user.

Tools are the task's own (``tools`` with ``input_schema``), each POSTed as JSON to its
``tool_endpoints`` URL on the running mock service, plus the benchmark's sandbox tools
(``Bash``, ``Read``, ``Write``, ``Edit``, ``Glob``, ``Grep``) on a workspace that holds the
task's ``sandbox_files`` at ``/workspace/<path>``, a :class:`unified.execution.WorkspaceSession`
(bubblewrap: read-only root, no network, limits; the tools run inside it). The browser/media tools of the benchmark's Docker image
(``BrowserScreenshot``, ``ReadMedia``, ...) are not offered; ``metadata`` says so. Every call is
logged as the benchmark's ``ToolDispatch`` record (status, request, response), which the
task's grader reads. Multi-turn tasks: when the agent answers without tool calls, the
simulated user (an OpenAI-compatible endpoint) plays the task's persona for up to
``user_agent.max_rounds`` rounds and ends the dialogue with ``[DONE]``.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx

from unified.benchmarks.contract import Environment
from unified.execution import CopyBudget, CopyBudgetExceeded, LocalBackend, WorkspaceSession, WorkspaceSpec
from unified.types import Episode, Message, Observation, ToolCall, ToolSpec

from evaluators.claw_eval import official
from evaluators.claw_eval.services import ServiceGroup, ServiceSpec
from evaluators.claw_eval.browser import playwright_setup, sandbox_spec
from evaluators.claw_eval.memory import MemoryBudget, Reservation
from evaluators.claw_eval.read_rules import read_entry
from evaluators.claw_eval.tasks import ClawTask, fixture_source, used_programs

WORKSPACE = "/workspace"
COMMANDS = {"python": "/usr/bin/python3"}
"""Extra commands inside the sandbox: ``python`` -> ``python3``, as the official agent image has it,
so task and snapshot commands that call ``python`` run."""

SANDBOX_TOOLS = [
    ToolSpec("Bash", "Run a bash command in the sandbox (working directory /workspace) and return its output.",
             {"type": "object", "properties": {"command": {"type": "string", "description": "The command."},
                                               "timeout": {"type": "integer", "description": "Limit in milliseconds."}},
              "required": ["command"]}),
    ToolSpec("Read", "Read a text file (absolute path, or relative to /workspace); optional 1-based offset/limit.",
             {"type": "object", "properties": {"file_path": {"type": "string"}, "offset": {"type": "integer"},
                                               "limit": {"type": "integer"}}, "required": ["file_path"]}),
    ToolSpec("Write", "Write a file (parent directories are created; an existing file is overwritten).",
             {"type": "object", "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
              "required": ["file_path", "content"]}),
    ToolSpec("Edit", "Replace an exact string in a file (must be unique unless replace_all).",
             {"type": "object", "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"},
                                               "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}},
              "required": ["file_path", "old_string", "new_string"]}),
    ToolSpec("Glob", "List files matching a glob pattern (e.g. '**/*.json') under a directory (default /workspace).",
             {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
              "required": ["pattern"]}),
    ToolSpec("Grep", "Search file contents with a regular expression.",
             {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"},
                                               "glob": {"type": "string"},
                                               "output_mode": {"type": "string",
                                                               "enum": ["content", "files_with_matches", "count"]},
                                               "case_insensitive": {"type": "boolean"},
                                               "head_limit": {"type": "integer"}}, "required": ["pattern"]}),
]
NOT_OFFERED = ["BrowserScreenshot", "ReadMedia", "and the other media tools of the benchmark's Docker image"]

# our fallbacks, used only when the checkout cannot build its own (official.py)
SYSTEM_PROMPT = (
    "You are a personal assistant agent running inside OpenClaw. Use the available tools to do what the user "
    "asks; tool names are case-sensitive. Call tools directly through tool calls (never describe a call in "
    "text instead of making it). Act carefully: do not take irreversible or sensitive actions the user did not "
    "ask for. Files for the task, if any, are under {ws}.\n\n## Tools\n{tools}"
)

USER_SIM_PROMPT = (
    "You play a user talking to an AI assistant. Stay in the role described below and never reveal that you "
    "are simulated.\n\n## Your role\n{persona}\n\n## How to answer\n"
    "- Answer the assistant's questions truthfully from your role; if your role does not contain the answer, "
    "say you don't know it.\n- Speak like a real user: short and natural, one to three sentences.\n"
    "- When the assistant has fully answered your request and you have nothing more to ask, reply with [DONE] only."
)


class ClawEvalEnvironment(Environment):
    """Services + sandbox + user simulator for one trial (see the module docstring)."""

    def __init__(self, task: ClawTask, *, user_endpoint=None, sandbox_tools: bool = True,
                 exec_timeout_s: float = 120, memory_mb: int = 2048, http_timeout_s: float = 30,
                 services: ServiceGroup | None = None, memory_budget: MemoryBudget | None = None) -> None:
        super().__init__()
        self.memory_budget = memory_budget
        """The run's budget the sandbox's memory limit is reserved from (:mod:`evaluators.claw_eval.memory`)."""
        self._reservation: Reservation | None = None
        self.task = task
        self.user_endpoint = user_endpoint
        self.use_sandbox = sandbox_tools
        self.exec_timeout_s, self.memory_mb, self.http_timeout_s = exec_timeout_s, memory_mb, http_timeout_s
        self.browser_memory_mb = 16384
        """Memory of the sandbox when the task runs a browser (see the adapter's ``browser_memory_mb``)."""
        self.services: ServiceGroup | None = services
        self._own_services = services is None
        self.dispatches: list[dict[str, Any]] = []
        self.user_rounds = 0
        self.user_done = False
        self._ws: WorkspaceSession | None = None
        self.workspace: Path | None = None
        self.deadline = 0.0
        self.snapshot_refused: list[str] = []
        """Snapshot files left unread because they would pass ``snapshot_mb`` (see :meth:`env_snapshot`)."""
        task_tools = [ToolSpec(t["name"], t["description"], t["parameters"]) for t in task.tools]
        names = {t.name for t in task_tools}
        sandbox = [t for t in SANDBOX_TOOLS if t.name not in names] if sandbox_tools else []
        try:  # the checkout's own system prompt and sandbox tool specs (official.py)
            setup = official.agent_setup(task.checkout, task.dir, [t.name for t in sandbox])
            specs = {t["name"]: ToolSpec(t["name"], t["description"], t["input_schema"]) for t in setup["sandbox_tools"]}
            sandbox = [specs.get(t.name, t) for t in sandbox]
            self.system_prompt, self.prompts = setup["system_prompt"], "checkout"
        except Exception as exc:  # a checkout without runner/system_prompt.py: ours, and the result says so
            self.prompts = f"ours (the checkout's prompt builder failed: {str(exc)[:200]})"
            listing = "\n".join(f"- {t.name}: {t.description}" for t in task_tools + sandbox) or "- (none)"
            self.system_prompt = SYSTEM_PROMPT.format(ws=WORKSPACE, tools=listing)
        self.tools = task_tools + sandbox
        suffix = (task.user_agent or {}).get("system_prompt_suffix") if self.multi_turn else None
        if suffix:
            self.system_prompt += "\n\n" + str(suffix).strip()
        self.first_user_message = task.prompt
        self.metadata = {"sandbox": "bwrap" if sandbox_tools else "none", "prompts": self.prompts,
                         "docker": "not used (local bubblewrap sandbox ran)", "tools_not_offered": NOT_OFFERED}

    @property
    def multi_turn(self) -> bool:
        return bool((self.task.user_agent or {}).get("enabled"))

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def runs_browser(self) -> bool:
        """Whether the trial's snapshot runs a browser (Playwright) in the sandbox."""
        return self.use_sandbox and "playwright" in used_programs(self.task) and playwright_setup().ok

    def sandbox_memory_mb(self) -> int:
        """The sandbox's memory limit: ``browser_memory_mb`` when a browser runs, else ``memory_mb``."""
        return max(self.memory_mb, self.browser_memory_mb) if self.runs_browser else self.memory_mb

    def reserve_memory(self) -> None:
        """Wait until the sandbox's memory limit fits the run's budget beside the trials in flight,
        then hold it until :meth:`stop` (once; nothing without a sandbox or a budget)."""
        if not self.use_sandbox or self._reservation is not None:
            return
        need = self.metadata["memory_mb"] = self.sandbox_memory_mb()
        if self.memory_budget is not None:
            self._reservation = self.memory_budget.reserve(need, browser=self.runs_browser)
            self.metadata["memory_budget"] = {"reserved_mb": need, "budget_mb": self.memory_budget.total_mb,
                                              "waited_s": self._reservation.waited_s}

    def start(self) -> None:
        self.reserve_memory()
        if self.services is None:
            specs = [ServiceSpec.from_dict(s, f"{self.task.dir}/task.yaml") for s in self.task.services]
            self.services = ServiceGroup(specs, Path(self.task.checkout)).__enter__()
        else:
            failures = self.services.reset()
            if failures:
                raise RuntimeError(f"service reset failed between trials: {failures}")
        self.metadata["services"] = {s.name: self.services.port(s) for s in self.services.specs}
        if self.use_sandbox:
            # the official image (python:3.11-slim) has `python`
            spec = WorkspaceSpec(name=f"claw-{self.task.id[:40]}-", timeout_s=self.exec_timeout_s,
                                 memory_mb=self.memory_mb, mount_point=WORKSPACE, commands=dict(COMMANDS))
            if self.runs_browser:  # the browser folder bound in, no per-process RLIMIT_AS (browser.sandbox_spec)
                setup = playwright_setup()
                self.metadata["browser"] = setup.browser
                sandbox_spec(setup, spec)
                self.metadata["address_space_limit"] = "none per process (a browser runs); sandbox-wide memory limit kept"
                spec.memory_mb = self.sandbox_memory_mb()
            self.reserve_memory()
            self._ws = LocalBackend().workspace(spec)
            self.workspace = self._ws.host_workspace
            self.workspace.mkdir()
            for rel in self.task.sandbox_files:
                self._inject(rel)
            self._ws.start()
        self.deadline = time.monotonic() + self.task.timeout_seconds

    def _inject(self, rel: str) -> None:
        """Copy the listed task file ``rel`` into the workspace: it, and every link under it, must
        resolve inside the checkout (a symlink in the task folder never copies a host file)."""
        self._ws.copy_task_file(fixture_source(self.task, rel), rel, root=Path(self.task.checkout),
                                where=f"{self.task.dir}/task.yaml: sandbox file {rel!r}")

    def stop(self) -> None:
        ws, self._ws = self._ws, None
        try:
            if ws is not None:
                ws.close()
        finally:
            held, self._reservation = self._reservation, None
            if held is not None:
                self.memory_budget.release(held)
        if self._own_services and self.services is not None:
            self.services.stop()
            self.services = None

    # -- tools -----------------------------------------------------------------------------

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        out = []
        for call in tool_calls:
            if call.parse_error:
                out.append(Observation(call.id, f"could not parse the tool call: {call.parse_error}", is_error=True))
                continue
            start = time.monotonic()
            try:
                status, body, text = self._dispatch(call)
            except Exception as exc:
                status, body, text = 500, {"error": str(exc)}, f"Error: {type(exc).__name__}: {exc}"
            latency_ms = (time.monotonic() - start) * 1000
            endpoint = self.task.endpoints.get(call.name, {}).get("url", "")
            self.dispatches.append({
                "tool_use_id": call.id, "tool_name": call.name,
                "endpoint_url": self.services.url(endpoint) if endpoint and self.services else (
                    f"local://sandbox/{call.name}" if call.name in {t.name for t in SANDBOX_TOOLS} else ""),
                "request_body": call.arguments, "response_status": status, "response_body": body,
                "latency_ms": round(latency_ms, 2)})
            out.append(Observation(call.id, text, is_error=status >= 400, metadata={"status": status}))
        if time.monotonic() > self.deadline:
            self.done = True
            self.metadata["stopped_by_task_timeout"] = True
        return out

    def _dispatch(self, call: ToolCall) -> tuple[int, Any, str]:
        endpoint = self.task.endpoints.get(call.name)
        if endpoint is not None:
            url = self.services.url(endpoint["url"]) if self.services else endpoint["url"]
            try:
                response = httpx.request(endpoint["method"], url, json=call.arguments, timeout=self.http_timeout_s,
                                         trust_env=False)
                body = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                return 500, {"error": str(exc)}, f"Error: {exc}"
            return response.status_code, body, json.dumps(body, ensure_ascii=False)
        if self._ws is not None and call.name in {t.name for t in SANDBOX_TOOLS}:
            return self._sandbox_tool(call)
        return 404, {"error": f"unknown tool '{call.name}'"}, f"Error: unknown tool '{call.name}'"

    def _sandbox_tool(self, call: ToolCall) -> tuple[int, Any, str]:
        a = call.arguments or {}
        if call.name == "Bash":
            limit = self.exec_timeout_s
            if a.get("timeout"):
                limit = min(limit, max(1.0, float(a["timeout"]) / 1000.0))
            ok, text, meta = self._ws.shell(str(a.get("command", "")), timeout_s=limit)
            return 200, {"exit_code": meta.get("exit_code"), "output": text[-5000:]}, text
        op = {"Read": "read", "Write": "write", "Edit": "edit", "Glob": "glob", "Grep": "grep"}[call.name]
        args = dict(a)
        args["path"] = a.get("file_path") or a.get("path")
        if call.name == "Edit":
            args.update(old=a.get("old_string"), new=a.get("new_string"), replace_all=bool(a.get("replace_all")))
        ok, text = self._ws.tool(op, args)
        return (200, {"content": text[-5000:]}, text) if ok else (200, {"error": text}, f"Error: {text}")

    # -- simulated user --------------------------------------------------------------------

    def next_user_turn(self, episode: Episode) -> str | None:
        ua = self.task.user_agent or {}
        if not self.multi_turn or self.user_endpoint is None:
            return None
        if self.user_rounds >= int(ua.get("max_rounds", 3)):
            return None
        if self.prompts == "checkout":  # the checkout's UserAgent: its prompts, sampling and retries
            config = self.user_endpoint.config
            messages = [{"role": m.role, "content": m.content} for m in episode.messages
                        if m.role in ("user", "assistant") and m.content]
            reply = official.user_reply(self.task.checkout, persona=str(ua.get("persona", "")), messages=messages,
                                        base_url=config.base_url, model=config.model, api_key=config.api_key)
            if not reply:
                self.user_done = True
                return None
            self.user_rounds += 1
            return f"[user_agent]\n{reply}"
        lines = []
        for msg in episode.messages:
            if msg.role not in ("user", "assistant") or not msg.content:
                continue
            text = msg.content
            if msg.role == "user" and text.startswith("[user_agent]"):
                text = text[len("[user_agent]"):].strip()
            lines.append(f"[{'User' if msg.role == 'user' else 'Assistant'}]: {text}")
        prompt = ("The conversation so far:\n\n" + "\n".join(lines)
                  + "\n\nReply to the assistant's last message, in your role. If you are satisfied, reply [DONE].")
        result = self.user_endpoint.client.chat(
            [{"role": "system", "content": USER_SIM_PROMPT.format(persona=ua.get("persona", ""))},
             {"role": "user", "content": prompt}], temperature=0.7, max_tokens=self.user_max_tokens)
        text = (result.text or "").strip()
        if not text or "[DONE]" in text:
            self.user_done = True
            return None
        self.user_rounds += 1
        return f"[user_agent]\n{text}"

    user_max_tokens = 256

    # -- what the grader reads -------------------------------------------------------------

    def env_snapshot(self) -> dict[str, Any]:
        """Run the task's snapshot commands, then read its snapshot files, from the sandbox.

        Grader-only files (``sandbox_grader_files``) are put in first, as the benchmark does
        after the agent finished. Keys and values follow the benchmark: ``cmd:<command>`` ->
        ``{exit_code, stdout, stderr}`` (a failed command's too: the grader reads it), ``file:<path>`` ->
        what the benchmark's ``/read`` answers (:mod:`evaluators.claw_eval.read_rules`),
        ``local_file:<path>`` -> base64 of a grader file read on the host.

        Files are read into this process up to ``snapshot_mb`` in all (apparent size: a sparse file
        counts in full); a file past that budget is an ``{"error": ...}`` entry that says so, and
        ``self.snapshot_refused`` lists it.
        """
        snapshot: dict[str, Any] = {}
        budget = CopyBudget(int(self.snapshot_mb * 2**20))
        self.snapshot_refused = []
        if self._ws is not None:
            for rel in self.task.sandbox_grader_files:
                self._inject(rel)
            timeout = float(self.task.env_snapshot_timeout)
            for cmd in self.task.env_snapshot_commands:
                result = self._ws.exec(cmd, timeout_s=timeout)
                if result.timed_out:  # the benchmark's /exec answer to a timeout
                    snapshot[f"cmd:{cmd}"] = {"exit_code": -1, "stdout": "", "stderr": f"Timed out after {timeout:.0f}s"}
                else:
                    snapshot[f"cmd:{cmd}"] = {"exit_code": result.exit_code, "stdout": result.stdout,
                                              "stderr": result.stderr}
            for pattern in self.task.env_snapshot_files:
                paths = [pattern]
                if any(ch in pattern for ch in "*?"):
                    ok, text = self._ws.tool("glob", {"pattern": pattern, "path": "/"})
                    paths = [p for p in text.splitlines() if ok and p.startswith("/")][:50]
                for path in paths:
                    snapshot[f"file:{path}"] = self._read_for_grader(path, budget)
        checkout = Path(self.task.checkout).resolve()
        for rel in self.task.local_grader_files:
            source = Path(self.task.dir, rel)
            if source.resolve() != checkout and checkout not in source.resolve().parents:
                snapshot[f"local_file:{rel}"] = {"error": f"refused: {source} resolves outside the checkout"}
            elif source.is_file():
                snapshot[f"local_file:{rel}"] = {"encoding": "base64",
                                                 "content": base64.b64encode(source.read_bytes()).decode()}
            else:
                snapshot[f"local_file:{rel}"] = {"error": f"not found: {source}"}
        return snapshot

    snapshot_mb: float = 256.0
    """Budget (MiB, apparent size) of the workspace files one snapshot reads into this process."""

    def _read_for_grader(self, path: str, budget: CopyBudget) -> dict[str, Any]:
        try:
            data = self._ws.read_workspace_file(path, budget)
        except FileNotFoundError:
            return {"error": f"File not found: {path}"}
        except CopyBudgetExceeded as exc:
            self.snapshot_refused.append(path)
            return {"error": f"not read: {exc}"}
        return read_entry(path, data)  # the benchmark's /read rules (images decoded in the grader's sandbox)

