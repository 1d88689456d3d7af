"""A real OpenAI-compatible chat server over a local checkpoint, for tests and laptops.

``python -m unified.inference.server --model SPEC --port 8000`` serves
``POST /v1/chat/completions``, ``POST /v1/completions`` (token-id or text prompts; ``echo`` +
``logprobs`` for log-likelihood scoring, as lm-evaluation-harness's ``local-completions`` sends),
vLLM's tokenizer endpoints ``GET /tokenizer_info``, ``POST /tokenize``, ``POST /detokenize``
(see :mod:`unified.inference.completions`), ``GET /v1/models`` and ``GET /health`` on loopback. Concurrent
requests are generated together by continuous batching
(:class:`unified.models.continuous.ContinuousBatcher`: a request joins the decoding batch at the
next step and leaves it when it ends, each with its own sampling settings), so concurrent clients
(the judge, many episodes in flight) get real throughput. Models the batcher does not support fall
back to gathering requests for ``--batch-wait`` seconds and generating them as one batch
(:func:`unified.models.generation.batched_generate`). The handlers are clients of the
checkpoint's one :class:`unified.inference.engine.Engine`: each submits its request and waits on
the future. Prompts are rendered with the checkpoint's own chat
template; the reasoning (split by :func:`unified.chatformat.reasoning.split_reasoning`) comes back
as ``reasoning_content`` and tool-call markup stays in ``content`` (like a vLLM server started
without a tool parser). Every request brings its own ``max_tokens`` (``--max-new-tokens`` is
only the default for requests that give none), so one server serves a judge, a simulated user
and a policy with different budgets; as vLLM does, a budget is cut to what the model's context window
(``max_position_embeddings``) leaves after the prompt, and a prompt that fills it is a 400 in vLLM's words
(:func:`fit_new_tokens`: Claw-Eval's simulated user asks 65,536 tokens of a 8,192-token model). ``"logprobs": true`` on a chat request returns each
generated token's log-probability in ``choices[0].logprobs.content`` (OpenAI's shape).

:class:`InProcessServer` serves the same routes from threads of *this* process over its shared
copy of the model (:func:`unified.inference.shared.shared_checkpoint`): an embedded run whose
judge and simulated user need an HTTP endpoint (a grader in a sandbox, a checkout's own client)
loads the model once, for the policy and the server together, and the server's requests join the
same engine (and the same decode steps) as the policy's episodes.

Authentication: :class:`InProcessServer` makes a random bearer token per server (``token``) and
answers 401 to any request without ``Authorization: Bearer <token>`` (``/health`` excepted):
loopback is shared with whatever else runs on the host (a sandbox with the host network, another
user's process), and the model is not theirs to call. :func:`unified.inference.endpoints.resolve_endpoint`
hands the token to its clients (``EndpointConfig.api_key``). The command-line server and
:class:`LocalOpenAIServer` require one when ``$UNIFIED_SERVER_API_KEY`` is set (``api_key=``).

:class:`LocalOpenAIServer` starts it in a subprocess on a free port, waits until it is healthy
and always stops it. The server never outlives the process that started it: started with
``--parent-pid``, it exits as soon as that process is gone, even after a ``kill -9`` that left
no time to stop it (:func:`exit_with_parent`; a server holds GBs with a real model). Its log
goes to ``log_path`` when given, else to a temporary file removed when the server stops.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from unified.config import ArgumentParser
from unified.inference import completions as comp
from unified.chatformat.reasoning import split_reasoning
from unified.inference.engine import engine_for
from unified.inference.shared import shared_checkpoint
from unified.models.generation import SamplingParams
from unified.models.prefix_cache import PrefixCache

log = logging.getLogger(__name__)


class _Client:
    """The server as a client of its checkpoint's engine: its own prefix cache, its batch size."""

    def __init__(self, loaded, max_batch: int, wait_s: float, prefix_cache_mb: float | None = None) -> None:
        self.loaded = loaded
        self.engine = engine_for(loaded, max_rows=max_batch)
        self.engine.gather_s = wait_s
        # KV reuse across requests (a multi-turn client resends its growing history)
        self.prefix_cache = PrefixCache(None if prefix_cache_mb is None else int(prefix_cache_mb * (1 << 20)))

    def generate(self, prompt: str | list[int], params: SamplingParams) -> Future:
        return self.engine.generate(prompt, params, prefix_cache=self.prefix_cache)

    def score(self, ids: list[int], top: int, generate: bool) -> Future:
        """Log-probabilities of prompt ids (``echo``), computed on the engine's thread between steps."""
        return self.engine.call(lambda loaded: comp.score_prompt(loaded.model, loaded.tokenizer, ids, top, generate))


def _normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI wire messages -> what chat templates expect (tool-call arguments as dicts)."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                call = json.loads(json.dumps(call))
                fn = call.get("function", call)
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"] or "{}")
                    except json.JSONDecodeError:
                        fn["arguments"] = {"_raw": fn["arguments"]}
                calls.append(call)
            message["tool_calls"] = calls
        if message.get("content") is None:
            message["content"] = ""
        out.append(message)
    return out


def _chat_logprobs(tokenizer, output) -> dict[str, Any] | None:
    """OpenAI's ``choices[i].logprobs`` for a chat completion: one entry per generated token."""
    if output.logprobs is None:
        return None
    tokens = tokenizer.convert_ids_to_tokens(list(output.token_ids))
    return {"content": [{"token": token, "logprob": logprob, "bytes": None, "top_logprobs": []}
                        for token, logprob in zip(tokens, output.logprobs)]}


TOKEN_ENV = "UNIFIED_SERVER_API_KEY"
"""Environment variable holding the bearer token the command-line server requires (unset: none)."""


class PromptTooLong(ValueError):
    """A prompt that already fills the model's context window (answered 400 in vLLM's words)."""


def context_window(model: Any) -> int | None:
    """The model's context window in tokens (``config.max_position_embeddings``, or its ``text_config``'s), None
    when the config does not say."""
    config = getattr(model, "config", None)
    for cfg in (config, getattr(config, "text_config", None)):
        value = getattr(cfg, "max_position_embeddings", None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def fit_new_tokens(asked: int, prompt_tokens: int, window: int | None) -> int:
    """The answer budget a request gets: what it asked, cut to what the context window leaves after its prompt, as
    vLLM does (an official client's ``max_tokens=65536`` on a 8,192-token model generates at most 8,192 - prompt;
    generating past the window would decode positions the model was never trained on, at a cost that grows with
    every token). Raises :class:`PromptTooLong` when the prompt leaves no room."""
    if window is None:
        return max(1, asked)
    if prompt_tokens >= window:
        raise PromptTooLong(f"This model's maximum context length is {window} tokens; the prompt has {prompt_tokens}")
    return max(1, min(asked, window - prompt_tokens))


def make_handler(loaded, client: _Client, served_name: str, default_max_tokens: int, token: str | None = None):
    """The request handler; with ``token``, every route but ``/health`` needs ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token}".encode() if token else None
    window = context_window(loaded.model)  # answer budgets are cut to it (fit_new_tokens)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _refused(self) -> bool:
            """Answer 401 (and close) unless the request carries the token."""
            if expected is None or hmac.compare_digest(self.headers.get("Authorization", "").encode(), expected):
                return False
            self.close_connection = True  # the body is not read
            self._send(401, {"error": {"message": "missing or wrong bearer token", "type": "authentication_error"}})
            return True

        def log_message(self, fmt, *args):  # quiet; errors still go to stderr via log
            log.debug(fmt, *args)

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server naming)
            if self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {"status": "ok"})
            elif self._refused():
                return
            elif self.path.rstrip("/") == "/tokenizer_info":
                self._send(200, comp.tokenizer_info(loaded.tokenizer))
            elif self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": served_name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):  # noqa: N802
            if self._refused():
                return
            route = self.path.rstrip("/")
            if route in ("/v1/completions", "/tokenize", "/detokenize"):
                return self._completions_or_tokenizer(route)
            if route != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                messages = _normalise_messages(request["messages"])
                kwargs = dict(request.get("chat_template_kwargs") or {})
                prompt = loaded.tokenizer.apply_chat_template(
                    messages, tools=request.get("tools") or None, tokenize=False, add_generation_prompt=True, **kwargs)
                asked = int(request.get("max_completion_tokens") or request.get("max_tokens") or default_max_tokens)
                prompt_tokens = len(loaded.tokenizer(prompt, add_special_tokens=False)["input_ids"])
                params = SamplingParams(
                    max_new_tokens=fit_new_tokens(asked, prompt_tokens, window),
                    temperature=float(request.get("temperature") or 0.0), top_p=float(request.get("top_p") or 1.0),
                    seed=request.get("seed"))
            except PromptTooLong as exc:
                return self._send(400, {"error": {"message": str(exc), "code": "context_length_exceeded"}})
            except (KeyError, ValueError, TypeError) as exc:
                return self._send(400, {"error": {"message": f"bad request: {type(exc).__name__}: {exc}"}})
            except Exception as exc:  # template errors (e.g. raise_exception in the template)
                return self._send(400, {"error": {"message": f"cannot render the chat template: {exc}"}})
            try:
                output = client.generate(prompt, params).result()
            except Exception as exc:
                return self._send(500, {"error": {"message": f"generation failed: {exc}"}})
            reasoning, content = split_reasoning(output.text)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning:
                message["reasoning_content"] = reasoning
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": output.finish_reason}
            if request.get("logprobs") is True:
                choice["logprobs"] = _chat_logprobs(loaded.tokenizer, output)
            self._send(200, {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": served_name,
                "choices": [choice],
                "usage": {"prompt_tokens": output.prompt_tokens, "completion_tokens": len(output.token_ids),
                          "total_tokens": output.prompt_tokens + len(output.token_ids)},
            })

        def _completions_or_tokenizer(self, route: str) -> None:
            tokenizer = loaded.tokenizer
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if route == "/tokenize":
                    ids = tokenizer(request["prompt"], add_special_tokens=bool(request.get("add_special_tokens")))
                    return self._send(200, {"tokens": ids["input_ids"], "count": len(ids["input_ids"])})
                if route == "/detokenize":
                    return self._send(200, {"prompt": tokenizer.decode([int(t) for t in request["tokens"]])})
                prompts = [comp.prompt_ids(tokenizer, p) for p in comp.normalise_prompts(request.get("prompt"))]
                max_tokens = int(request["max_tokens"] if request.get("max_tokens") is not None else 16)
                echo = bool(request.get("echo"))
                if echo and max_tokens > 1:
                    raise ValueError("echo is supported with max_tokens 0 or 1 (log-likelihood scoring)")
                params = [SamplingParams(max_new_tokens=fit_new_tokens(max_tokens, len(ids), window) if not echo
                                         else max(1, max_tokens),
                                         temperature=float(request.get("temperature") or 0.0),
                                         top_p=float(request.get("top_p") or 1.0), seed=request.get("seed"))
                          for ids in prompts]
            except PromptTooLong as exc:
                return self._send(400, {"error": {"message": str(exc), "code": "context_length_exceeded"}})
            except (KeyError, ValueError, TypeError) as exc:
                return self._send(400, {"error": {"message": f"bad request: {type(exc).__name__}: {exc}"}})
            futures = [client.score(ids, int(request.get("logprobs") or 1), max_tokens == 1) if echo
                       else client.generate(ids, p) for ids, p in zip(prompts, params)]
            choices, prompt_tokens, completion_tokens = [], 0, 0
            for index, (ids, future) in enumerate(zip(prompts, futures)):
                try:
                    output = future.result()
                except Exception as exc:
                    return self._send(500, {"error": {"message": f"generation failed: {exc}"}})
                prompt_tokens += len(ids)
                if echo:
                    text = output.pop("text")
                    completion_tokens += len(output.pop("generated_ids"))
                    choices.append({"index": index, "text": text, "logprobs": output, "finish_reason": "length"})
                    continue
                text, stopped = comp.cut_at_stop(output.text, request.get("stop"))
                completion_tokens += len(output.token_ids)
                choices.append({"index": index, "text": text, "logprobs": None,
                                "finish_reason": "stop" if stopped else output.finish_reason})
            self._send(200, {
                "id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
                "model": served_name, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens},
            })

    return Handler


def serve(model: str, host: str = "127.0.0.1", port: int = 8000, *, served_name: str | None = None,
          max_batch: int = 8, batch_wait_s: float = 0.05, max_new_tokens: int = 256,
          prefix_cache_mb: float | None = None, token: str | None = None) -> None:
    loaded = shared_checkpoint(model)
    client = _Client(loaded, max_batch, batch_wait_s, prefix_cache_mb)
    server = ThreadingHTTPServer((host, port), make_handler(loaded, client, served_name or model, max_new_tokens,
                                                            token))
    print(f"unified local server: {served_name or model} on http://{host}:{port}/v1", flush=True)
    server.serve_forever()


class LoopbackAddress:
    """The address of a server on 127.0.0.1 (``port``) serving ``served_name``."""

    port: int
    served_name: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def spec(self) -> str:
        """The ``openai:URL#MODEL`` spec of this server."""
        return f"openai:{self.base_url}#{self.served_name}"


class InProcessServer(LoopbackAddress):
    """The server's routes on a loopback port, served by threads of this process over its shared
    copy of ``model`` (see the module docstring); ``stop()`` (or leaving the ``with``) ends them.

    Same attributes as :class:`LocalOpenAIServer` (``port``, ``base_url``, ``spec``, ``running()``).
    """

    def __init__(self, model: str, *, served_name: str = "local", max_new_tokens: int = 1024, max_batch: int = 8,
                 batch_wait_s: float = 0.05, prefix_cache_mb: float | None = None, loaded: Any = None,
                 token: str | None = None) -> None:
        self.model, self.served_name = str(model), served_name
        self.token = token or secrets.token_urlsafe(32)
        """The bearer token every request but ``/health`` must carry (random per server unless given)."""
        self.loaded = loaded if loaded is not None else shared_checkpoint(model)
        self._client = _Client(self.loaded, max_batch, batch_wait_s, prefix_cache_mb)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self.loaded, self._client, served_name,
                                                                          max_new_tokens, self.token))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="unified-server-http", daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving (the engine is the checkpoint's, shared with the other clients: it goes on)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "InProcessServer":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


PARENT_POLL_S = 0.5
"""How often a server started with ``--parent-pid`` checks that its parent is still there."""


def exit_with_parent(parent_pid: int, poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """End this process (``os._exit``) once ``parent_pid`` is no longer its parent.

    A parent killed with SIGKILL cannot stop its children; the orphan is re-parented (to init or
    a subreaper), so ``os.getppid()`` changes: a daemon thread polls it every ``poll_s`` seconds.
    (``PR_SET_PDEATHSIG`` is not used: it fires when the *thread* that started the child ends,
    and servers are started lazily from worker threads.)
    """
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(0)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


class LocalOpenAIServer(LoopbackAddress):
    """Start ``serve`` in a subprocess on a free loopback port; stop it on exit, always.

    The subprocess exits by itself if this process dies (``--parent-pid``). Its output goes to
    ``log_path`` (kept) or to a temporary file that is removed when the server stops.
    """

    def __init__(self, model: str, *, served_name: str = "local", max_new_tokens: int = 128, max_batch: int = 8,
                 ready_timeout_s: float = 300.0, env: dict[str, str] | None = None,
                 log_path: str | Path | None = None, api_key: str | None = None) -> None:
        self.model, self.served_name = str(model), served_name
        self.token = api_key
        """Bearer token the server requires (passed through ``$UNIFIED_SERVER_API_KEY``, never argv); None: none."""
        self.max_new_tokens, self.max_batch, self.ready_timeout_s = max_new_tokens, max_batch, ready_timeout_s
        self.env = env
        self.log_path = Path(log_path) if log_path else None
        self.port = 0
        self.process: subprocess.Popen | None = None
        self._log = None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> "LocalOpenAIServer":
        self.port = free_port()
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "a+b")
        else:  # unlinked once the server has it open: nothing is left in /tmp, even after a kill -9 of us
            self._log = tempfile.TemporaryFile(prefix="unified-server-", suffix=".log")
        cmd = [sys.executable, "-m", "unified.inference.server", "--model", self.model, "--port", str(self.port),
               "--served-name", self.served_name, "--max-new-tokens", str(self.max_new_tokens),
               "--max-batch", str(self.max_batch), "--parent-pid", str(os.getpid())]
        env = {k: v for k, v in {**os.environ, **(self.env or {})}.items() if k != TOKEN_ENV}
        if self.token:
            env[TOKEN_ENV] = self.token
        self.process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.__exit__(None, None, None)
                raise RuntimeError(f"local server exited with {self.process.returncode}: {tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        tail = self.log_tail()
        self.__exit__(None, None, None)
        raise TimeoutError(f"local server not ready after {self.ready_timeout_s}s: {tail}")

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's output (read through the open log, which may have no name)."""
        if not self._log:
            return ""
        try:
            size = os.fstat(self._log.fileno()).st_size
            data = os.pread(self._log.fileno(), 4 * chars, max(0, size - 4 * chars))
        except OSError:
            return ""
        return data.decode("utf-8", "replace")[-chars:]

    def __exit__(self, *exc_info) -> None:
        if self.process and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=10)
        if self._log:
            self._log.close()
            self._log = None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m unified.inference.server", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-name", default=None)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--batch-wait", type=float, default=0.05, help="seconds to gather a batch")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="default when a request gives none")
    parser.add_argument("--prefix-cache-mb", type=float, default=None,
                        help="KV prefix-cache budget in MiB (0 = off; default $UNIFIED_PREFIX_CACHE_MB or 1024)")
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="exit as soon as this process is no longer the parent (it died)")
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        exit_with_parent(args.parent_pid)
    logging.basicConfig(level=logging.WARNING)
    serve(args.model, args.host, args.port, served_name=args.served_name, max_batch=args.max_batch,
          batch_wait_s=args.batch_wait, max_new_tokens=args.max_new_tokens, prefix_cache_mb=args.prefix_cache_mb,
          token=os.environ.get(TOKEN_ENV) or None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
