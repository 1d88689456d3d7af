"""A tmux terminal inside any execution session (the Terminus-2 way of driving a shell).

Terminal-Bench's Terminus-2 harness types keystrokes into a tmux pane and shows the model
what the screen then looks like. :class:`TmuxTerminal` does that through
``ExecutionSession.exec`` only, so it works the same in a local sandbox and in a container
(the environment needs ``tmux``; Terminal-Bench images install it).

Keystrokes: text is typed literally and every ``\\n`` presses Enter; a string that is exactly a
tmux key name (``C-c``, ``C-d``, ``Escape``, ``Up``, ``Tab``, ``M-x`` ...) presses that key.
"""

from __future__ import annotations

import re
import time

from unified.execution.base import ExecutionError, ExecutionSession

_KEY_NAME = re.compile(r"^(?:[CMS]-.+|Enter|Escape|Tab|BTab|Space|BSpace|Up|Down|Left|Right|Home|End|"
                       r"PageUp|PageDown|PPage|NPage|IC|DC|F\d{1,2})$")
_SHELLS = {"bash", "sh", "dash", "zsh", "ash"}


class TmuxTerminal:
    """One tmux session (``name``) inside ``session``; ``start`` it before use."""

    def __init__(self, session: ExecutionSession, name: str = "main", width: int = 160, height: int = 40,
                 socket: str = "/tmp/.unified-tmux.sock", history_limit: int = 10000) -> None:
        self.session, self.name, self.width, self.height = session, name, width, height
        self.socket, self.history_limit = socket, history_limit

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
        res = self.session.exec(cmd, timeout_s=30, env={"TERM": "xterm-256color", "PS1": "$ "})
        if not res.ok:
            raise ExecutionError(f"{self.session.backend}: cannot start tmux: {res.output().strip()}")

    def send_keys(self, keystrokes: str) -> None:
        """Type ``keystrokes`` (see the module docstring) in one tmux call."""
        argv = self._tmux()
        for part in self.key_sequence(keystrokes):
            kind, value = part
            if len(argv) > 3:
                argv.append(";")
            argv += ["send-keys", "-t", self.name] + (["-l", value] if kind == "text" else [value])
        if len(argv) == 3:
            return
        res = self.session.exec(argv, timeout_s=30)
        if not res.ok:
            raise ExecutionError(f"tmux send-keys failed: {res.output().strip()}")

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
        """Wait up to ``duration_s`` for the typed commands; return early once the shell is idle.

        Idle: the pane's foreground process is a shell again and the screen did not change
        between two polls. Returns the seconds waited.
        """
        start = time.monotonic()
        time.sleep(min(min_s, duration_s))
        previous = None
        while time.monotonic() - start < duration_s:
            screen = self.capture()
            if screen == previous and self.current_command() in _SHELLS:
                break
            previous = screen
            time.sleep(poll_s)
        return time.monotonic() - start
