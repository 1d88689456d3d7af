"""A tmux terminal inside any execution session (the Terminus-2 way of driving a shell).

Terminal-Bench's Terminus-2 harness types keystrokes into a tmux pane and shows the model
what the screen then looks like. :class:`TmuxTerminal` does that through
``ExecutionSession.exec`` only, so it works the same in a local sandbox and in a container
(the environment needs ``tmux``; Terminal-Bench images install it).

Keystrokes: text is typed literally and every ``\\n`` presses Enter; a string that is exactly a
tmux key name (``C-c``, ``C-d``, ``Escape``, ``Up``, ``Tab``, ``M-x`` ...) presses that key. Text
longer than a tmux command may carry goes through a paste buffer (as Harbor's Terminus-2 does).

When a command has finished is told by a completion marker, not by guessing from the pane's
foreground process (a script run as ``bash x.sh`` shows ``bash`` in the foreground while it
runs): the bash in the pane gets ``PS0`` (expanded after a command line is read, before it runs)
and ``PROMPT_COMMAND`` (run before each prompt) that write ``busy PID N`` and
``idle PID N EXIT_CODE`` to a state file. :meth:`TmuxTerminal.wait` returns early only once a
new ``idle`` line has appeared since the keys were sent and stayed for one more poll (so a
second queued command line has had its chance to start); the exit code comes with it. In a
pane without bash (or where the agent replaced the shell) there is no marker and ``wait``
waits the whole duration it was given, as Terminus-2 does.
"""

from __future__ import annotations

import re
import shlex
import time
import uuid

from unified.execution.base import ExecutionError, ExecutionSession

_KEY_NAME = re.compile(r"^(?:[CMS]-.+|Enter|Escape|Tab|BTab|Space|BSpace|Up|Down|Left|Right|Home|End|"
                       r"PageUp|PageDown|PPage|NPage|IC|DC|F\d{1,2})$")


class TmuxTerminal:
    """One tmux session (``name``) inside ``session``; ``start`` it before use."""

    def __init__(self, session: ExecutionSession, name: str = "main", width: int = 160, height: int = 40,
                 socket: str = "/tmp/.unified-tmux.sock", history_limit: int = 10000) -> None:
        self.session, self.name, self.width, self.height = session, name, width, height
        self.socket, self.history_limit = socket, history_limit
        self.state_file = f"/tmp/.unified-tmux-{name}.state"
        self._sent_from: str | None = None
        self._sent_enter = False
        self.last_exit_code: int | None = None
        """Exit status of the last command line the shell finished (from the completion marker)."""

    def _tmux(self, *args: str) -> list[str]:
        return ["tmux", "-S", self.socket, *args]

    def start(self, workdir: str | None = None) -> None:
        """Start the tmux server and a shell in ``workdir``; ExecutionError if tmux is missing."""
        probe = self.session.exec(["sh", "-c", "command -v tmux && (command -v bash || command -v sh)"], timeout_s=30)
        lines = probe.stdout.split()
        if probe.exit_code != 0 or len(lines) < 2:
            raise ExecutionError(f"{self.session.backend}: tmux is not installed in the environment "
                                 "(Terminal-Bench images install it; locally: apt-get install -y tmux)")
        shell = lines[1]
        args = [shell, "--norc", "--noprofile"] if shell.endswith("bash") else [shell]
        cmd = self._tmux("new-session", "-d", "-s", self.name, "-x", str(self.width), "-y", str(self.height),
                         "-c", workdir or self.session.workdir, *args)
        cmd += [";", "set-option", "-g", "history-limit", str(self.history_limit), ";", "set-option", "-g",
                "status", "off"]
        state = shlex.quote(self.state_file)
        markers = {"PS0": f'$(printf "busy %s %s\\n" "$$" "${{__unified_n:-0}}" > {state})',
                   "PROMPT_COMMAND": (f'__unified_rc=$?; __unified_n=$((${{__unified_n:-0}}+1)); '
                                      f'printf "idle %s %s %s\\n" "$$" "$__unified_n" "$__unified_rc" > {state}')}
        res = self.session.exec(cmd, timeout_s=30, env={"TERM": "xterm-256color", "PS1": "$ ", **markers})
        if not res.ok:
            raise ExecutionError(f"{self.session.backend}: cannot start tmux: {res.output().strip()}")
        deadline = time.monotonic() + 10.0  # the first prompt's marker, so the first command has a "before"
        while shell.endswith("bash") and self.shell_state() is None and time.monotonic() < deadline:
            time.sleep(0.1)

    PASTE_OVER = 2000
    """Text longer than this (characters) is pasted from a buffer instead of sent as keys."""

    def send_keys(self, keystrokes: str) -> None:
        """Type ``keystrokes`` (see the module docstring); long text goes through a paste buffer."""
        sequence = self.key_sequence(keystrokes)
        self._sent_from = self.shell_state()
        self._sent_enter = any(kind == "key" for kind, _ in sequence)
        if len(keystrokes) > self.PASTE_OVER and not self.is_key_name(keystrokes):
            self._paste(keystrokes)
            return
        argv = self._tmux()
        for part in sequence:
            kind, value = part
            if len(argv) > 3:
                argv.append(";")
            argv += ["send-keys", "-t", self.name] + (["-l", value] if kind == "text" else [value])
        if len(argv) == 3:
            return
        res = self.session.exec(argv, timeout_s=30)
        if not res.ok:
            raise ExecutionError(f"tmux send-keys failed: {res.output().strip()}")

    def _paste(self, text: str) -> None:
        """Deliver ``text`` through a tmux paste buffer (newlines become Enter)."""
        token = uuid.uuid4().hex[:12]
        path = f"/tmp/.unified-paste-{token}"
        self.session.write_file(path, text.encode(), mode=0o600)
        res = self.session.exec(self._tmux("load-buffer", "-b", token, path, ";", "paste-buffer", "-d", "-b", token,
                                           "-t", self.name), timeout_s=60)
        self.session.exec(["rm", "-f", path], timeout_s=30)
        if not res.ok:
            raise ExecutionError(f"tmux paste-buffer failed: {res.output().strip()}")

    def shell_state(self) -> str | None:
        """The completion marker's last line (``idle PID N EXIT`` or ``busy PID N``); None if there is none."""
        res = self.session.exec(["cat", self.state_file], timeout_s=30)
        line = res.stdout.strip() if res.ok else ""
        return line if line.startswith(("idle ", "busy ")) else None

    @staticmethod
    def is_key_name(keystrokes: str) -> bool:
        """Whether ``keystrokes`` is exactly one tmux key name (``C-c``, ``Escape`` ...)."""
        return bool(_KEY_NAME.match(keystrokes.strip())) and "\n" not in keystrokes.strip()

    @staticmethod
    def key_sequence(keystrokes: str) -> list[tuple[str, str]]:
        """``[("text", ...), ("key", "Enter"), ...]`` for ``keystrokes``."""
        if TmuxTerminal.is_key_name(keystrokes):
            return [("key", keystrokes.strip())]
        out: list[tuple[str, str]] = []
        chunks = keystrokes.split("\n")
        for i, chunk in enumerate(chunks):
            if chunk:
                out.append(("text", chunk))
            if i < len(chunks) - 1:
                out.append(("key", "Enter"))
        return out

    def capture(self, history: bool = False) -> str:
        """The visible screen (``history``: the whole scrollback too), trailing blank lines dropped."""
        args = ["capture-pane", "-p", "-J", "-t", self.name] + (["-S", "-"] if history else [])
        res = self.session.exec(self._tmux(*args), timeout_s=30)
        if not res.ok:
            raise ExecutionError(f"tmux capture-pane failed: {res.output().strip()}")
        return res.stdout.rstrip("\n ") + "\n"

    def current_command(self) -> str:
        res = self.session.exec(self._tmux("display-message", "-p", "-t", self.name, "#{pane_current_command}"),
                                timeout_s=30)
        return res.stdout.strip()

    def wait(self, duration_s: float, min_s: float = 0.1, poll_s: float = 0.25) -> float:
        """Wait up to ``duration_s`` for what the last ``send_keys`` started; return the seconds waited.

        Returns early when the completion marker (see the module docstring) shows a prompt that
        appeared after the keys were sent and is still the latest one a poll later; typed text
        without Enter at an idle prompt returns after ``min_s``. Without a marker, the whole
        ``duration_s``. ``last_exit_code`` is then the finished command's exit status.
        """
        start = time.monotonic()
        time.sleep(min(min_s, duration_s))
        before, enter = self._sent_from, self._sent_enter
        self._sent_from, self._sent_enter = None, False
        previous = None
        while time.monotonic() - start < duration_s:
            state = self.shell_state()
            if state is not None and state.startswith("idle "):
                finished = state != before or (not enter and (before or "").startswith("idle "))
                if finished and state == previous:
                    parts = state.split()
                    self.last_exit_code = int(parts[3]) if len(parts) > 3 and parts[3].lstrip("-").isdigit() else None
                    break
            previous = state
            time.sleep(max(0.0, min(poll_s, duration_s - (time.monotonic() - start))))
        return time.monotonic() - start
