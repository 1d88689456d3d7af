"""One HTTP endpoint for a sandbox without network: a relay on a Unix socket.

A grader that must ask an LLM judge (Claw-Eval's) would otherwise need the host network, and
with it every port on the host's loopback and the internet. Instead the sandbox keeps no
network and gets a Unix socket, bind-mounted in: :class:`EndpointRelay` accepts plain HTTP
requests on it and forwards them to one base URL only (``<base_url><path>``, and only the
paths in :data:`ALLOWED`), adding the API key on the host side, so the key never enters the
sandbox either. Inside, an HTTP client points
at ``http://relay`` through the socket (``httpx.HTTPTransport(uds=...)``).
"""

from __future__ import annotations

import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx

ALLOWED = {("POST", "/chat/completions"), ("POST", "/completions"), ("GET", "/models")}
"""What a grader may ask of the judge's endpoint (paths relative to its base URL); anything else is refused."""
_HOP_HEADERS = {"host", "connection", "content-length", "transfer-encoding", "authorization", "keep-alive",
                "proxy-authorization", "te", "trailer", "upgrade", "accept-encoding"}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class EndpointRelay:
    """Serve ``socket_path``; forward each request to ``base_url`` + its path. Use as a context manager."""

    def __init__(self, socket_path: str | Path, base_url: str, api_key: str | None = None,
                 timeout_s: float = 600.0) -> None:
        self.socket_path = str(socket_path)
        self.base_url = base_url.rstrip("/")
        self.api_key, self.timeout_s = api_key, timeout_s
        self.requests = 0
        self._server: _Server | None = None

    def __enter__(self) -> EndpointRelay:
        relay = self
        client = httpx.Client(timeout=self.timeout_s, trust_env=False)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if (self.command, self.path.split("?")[0].rstrip("/")) not in ALLOWED:
                    data = b'{"error": "relay: only chat/completions, completions and models are forwarded"}'
                    self.send_response(403)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                if relay.api_key:
                    headers["Authorization"] = f"Bearer {relay.api_key}"
                relay.requests += 1
                try:
                    resp = client.request(self.command, relay.base_url + self.path, content=body, headers=headers)
                    status, data = resp.status_code, resp.content
                    ctype = resp.headers.get("content-type", "application/json")
                except httpx.HTTPError as exc:
                    status, data, ctype = 502, f'{{"error": "relay: {type(exc).__name__}"}}'.encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server = _Server(self.socket_path, Handler)
        os.chmod(self.socket_path, 0o777)  # the sandbox's throwaway uid must be able to connect
        self._client = client
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self._client.close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
