"""The SWE-bench agent scaffold: a repository at its base commit, a bash tool and a file editor.

The environment is the instance's image on a container engine (the repository is at
``/testbed`` for SWE-bench Verified, ``/app`` for SWE-bench Pro). On the ``local`` backend there
is no image: the repository comes from ``repos_dir/<owner>__<name>`` (a clone, checked out at
``base_commit``, or a plain snapshot committed with fixed author and date, whose hash must be
``base_commit``) and runs with the host's tools inside the sandbox.

Tools (SWE-agent / OpenHands style): ``bash(command)`` and ``str_replace_editor(command, path,
...)`` with ``view``, ``create``, ``str_replace``, ``insert``. The final patch is what the agent
changed: ``git add -A && git diff --cached <base_commit>`` in the repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unified.benchmarks.contract import Environment
from unified.execution import EnvironmentSpec, ExecutionBackend, ExecutionError, ExecutionSession
from unified.types import Message, Observation, ToolCall, ToolSpec

MAX_OBSERVATION = 12000
FIXED_GIT_ENV = {"GIT_AUTHOR_NAME": "fixture", "GIT_AUTHOR_EMAIL": "fixture@example.com",
                 "GIT_COMMITTER_NAME": "fixture", "GIT_COMMITTER_EMAIL": "fixture@example.com",
                 "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000"}

BASH = ToolSpec(name="bash", description="Run a bash command in the repository and return its output and exit code.",
                parameters={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
EDITOR = ToolSpec(
    name="str_replace_editor",
    description=("View, create and edit files. `view` shows a file with line numbers (or lists a directory); "
                 "`create` writes `file_text` to a new file; `str_replace` replaces `old_str`, which must occur "
                 "exactly once, by `new_str`; `insert` puts `new_str` after line `insert_line`."),
    parameters={"type": "object", "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
        "path": {"type": "string", "description": "Absolute path, or relative to the repository."},
        "file_text": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"},
        "insert_line": {"type": "integer"},
        "view_range": {"type": "array", "items": {"type": "integer"}, "description": "[first, last] lines"}},
        "required": ["command", "path"]})

SYSTEM_PROMPT = """You are a software engineer fixing an issue in a repository. The repository is checked out in \
{workdir}. Use the bash tool to explore, reproduce the problem and run tests, and the str_replace_editor tool \
to change files. Make the smallest change that resolves the issue; do not modify the existing tests. When you \
are done, answer with a short summary and no tool call: your changes to the repository are the submission."""


def repo_source(repos_dir: Path | None, repo: str) -> Path | None:
    """The local copy of ``repo`` (``owner/name``) under ``repos_dir``, if there is one."""
    if repos_dir is None:
        return None
    path = Path(repos_dir) / repo.replace("/", "__")
    return path if path.is_dir() else None


def environment_spec(workdir: str, image: str, exec_timeout_s: float, memory_mb: int, name: str) -> EnvironmentSpec:
    return EnvironmentSpec(image=image, workdir=workdir, timeout_s=exec_timeout_s, memory_mb=memory_mb,
                           extra_dirs=["/tmp/unified-eval"], name=name)


def open_repository(backend: ExecutionBackend, spec: EnvironmentSpec, base_commit: str,
                    source: Path | None) -> ExecutionSession:
    """A session whose ``spec.workdir`` is the repository at ``base_commit`` (see the module docstring)."""
    session = backend.start(spec)
    try:
        if session.backend == "local":
            if source is None:
                raise ExecutionError("local backend: no local copy of the repository (repos_dir)")
            session.copy_in(source, spec.workdir)
            if (source / ".git").exists():
                res = session.exec(["git", "checkout", "-q", "-f", base_commit], timeout_s=120)
            else:
                res = session.exec("git init -q -b main && git add -A && git commit -q -m base", env=FIXED_GIT_ENV,
                                   timeout_s=120)
            if not res.ok:
                raise ExecutionError(f"local: cannot prepare the repository: {res.output().strip()[-500:]}")
            session.exec("printf '__pycache__/\\n*.pyc\\n' >> .git/info/exclude", timeout_s=30)
        head = session.exec(["git", "rev-parse", "HEAD"], timeout_s=60).stdout.strip()
        if head != base_commit:
            raise ExecutionError(f"{session.backend}: the repository is at {head or '?'}, not base_commit "
                                 f"{base_commit}")
    except BaseException:
        session.close()
        raise
    return session


class SWEEnvironment(Environment):
    """One SWE-bench instance: repository session + bash + editor."""

    def __init__(self, row: dict[str, Any], variant: str, backend: ExecutionBackend, spec: EnvironmentSpec,
                 source: Path | None, log_dir: Path | None = None) -> None:
        super().__init__()
        self.row, self.variant, self.backend, self.spec, self.source = row, variant, backend, spec, source
        self.log_dir = log_dir
        """Where grading writes its logs (the run's work directory), or None."""
        self.session: ExecutionSession | None = None
        self.tools = [BASH, EDITOR]
        self.system_prompt = SYSTEM_PROMPT.format(workdir=spec.workdir)
        text = f"<issue>\n{row['problem_statement'].strip()}\n</issue>"
        if variant == "pro" and row.get("requirements"):
            text += f"\n\n<requirements>\n{row['requirements'].strip()}\n</requirements>"
        if variant == "pro" and row.get("interface"):
            text += f"\n\n<interface>\n{row['interface'].strip()}\n</interface>"
        self.first_user_message = (f"The repository {row['repo']} is in {spec.workdir}. Resolve this issue:\n\n"
                                   f"{text}")

    def start(self) -> None:
        self.session = open_repository(self.backend, self.spec, self.row["base_commit"], self.source)
        self.metadata.update({"backend": self.session.backend, "execution": dict(self.session.info)})

    def stop(self) -> None:
        if self.session is not None:
            try:
                self.session.close()
            except Exception:
                pass
            self.session = None

    def final_patch(self) -> str:
        """``git add -A && git diff --cached <base_commit>`` (text; binary hunks left out)."""
        assert self.session is not None
        res = self.session.exec(f"git add -A && git diff --cached {self.row['base_commit']}", timeout_s=120)
        if res.exit_code != 0:
            raise ExecutionError(f"cannot extract the patch: {res.stderr.strip()}")
        return res.stdout

    # -- tools -----------------------------------------------------------------------------

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        return [self._one(call) for call in tool_calls]

    def _one(self, call: ToolCall) -> Observation:
        if call.parse_error:
            return Observation(call.id, f"Malformed tool call: {call.parse_error}", is_error=True)
        try:
            if call.name == "bash":
                return self._bash(call)
            if call.name == "str_replace_editor":
                return self._edit(call)
        except ExecutionError as exc:
            return Observation(call.id, f"Error: {exc}", is_error=True)
        return Observation(call.id, f"Unknown tool {call.name!r}; use bash or str_replace_editor.", is_error=True)

    def _bash(self, call: ToolCall) -> Observation:
        command = call.arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return Observation(call.id, "bash needs a non-empty string `command`.", is_error=True)
        assert self.session is not None
        res = self.session.exec(["bash", "-c", command])
        text = res.output()
        if len(text) > MAX_OBSERVATION:
            text = text[:MAX_OBSERVATION // 2] + "\n[... output cut ...]\n" + text[-MAX_OBSERVATION // 2:]
        suffix = f"\n[command timed out after {res.duration_s:.0f}s]" if res.timed_out else ""
        return Observation(call.id, f"{text}{suffix}\n[exit code {res.exit_code}]",
                           is_error=res.exit_code != 0, metadata={"exit_code": res.exit_code})

    def _edit(self, call: ToolCall) -> Observation:
        assert self.session is not None
        args = call.arguments
        command, path = args.get("command"), args.get("path")
        if not isinstance(path, str) or not path:
            return Observation(call.id, "str_replace_editor needs `path`.", is_error=True)
        path = path if path.startswith("/") else f"{self.spec.workdir.rstrip('/')}/{path}"
        s = self.session
        if command == "create":
            text = args.get("file_text")
            if not isinstance(text, str):
                return Observation(call.id, "`create` needs `file_text`.", is_error=True)
            s.write_file(path, text if text.endswith("\n") or not text else text + "\n")
            return Observation(call.id, f"File created: {path}")
        if command == "view":
            if s.exec(["test", "-d", path], timeout_s=30).exit_code == 0:
                res = s.exec(["find", path, "-maxdepth", "2", "-not", "-path", "*/.git*"], timeout_s=30)
                return Observation(call.id, res.stdout[:MAX_OBSERVATION])
        try:
            content = s.read_file(path).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return Observation(call.id, f"No such file: {path}", is_error=True)
        lines = content.split("\n")
        if command == "view":
            first, last = 1, len(lines)
            rng = args.get("view_range")
            if isinstance(rng, list) and len(rng) == 2:
                first, last = max(1, int(rng[0])), (len(lines) if int(rng[1]) == -1 else int(rng[1]))
            shown = "\n".join(f"{i:6d}\t{lines[i - 1]}" for i in range(first, min(last, len(lines)) + 1))
            return Observation(call.id, shown[:MAX_OBSERVATION])
        if command == "str_replace":
            old, new = args.get("old_str"), args.get("new_str", "")
            if not isinstance(old, str) or not old:
                return Observation(call.id, "`str_replace` needs `old_str`.", is_error=True)
            count = content.count(old)
            if count != 1:
                return Observation(call.id, f"`old_str` occurs {count} times in {path}; it must occur exactly once.",
                                   is_error=True)
            s.write_file(path, content.replace(old, str(new)))
            return Observation(call.id, f"Edited {path}.")
        if command == "insert":
            try:
                at = int(args.get("insert_line"))
            except (TypeError, ValueError):
                return Observation(call.id, "`insert` needs an integer `insert_line`.", is_error=True)
            if not 0 <= at <= len(lines):
                return Observation(call.id, f"`insert_line` must be within 0..{len(lines)}.", is_error=True)
            new_lines = str(args.get("new_str", "")).split("\n")
            s.write_file(path, "\n".join(lines[:at] + new_lines + lines[at:]))
            return Observation(call.id, f"Inserted {len(new_lines)} line(s) after line {at} of {path}.")
        return Observation(call.id, f"Unknown command {command!r}; use view, create, str_replace or insert.",
                           is_error=True)
