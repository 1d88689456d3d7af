"""A loopback OpenAI-compatible chat endpoint for tests: real HTTP on 127.0.0.1, each answer made
by ``reply(request, n)`` (the request's JSON, how many came before); ``asked`` keeps every request.
The answer is named ``model`` (None: the model the request named)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeChat:
    """``with FakeChat(reply) as chat:`` serves ``chat.url`` (``.../v1``) until the block ends."""

    def __init__(self, reply: Callable[[dict[str, Any], int], str], model: str | None = "fake") -> None:
        self.reply, self.model = reply, model
        self.asked: list[dict[str, Any]] = []
        chat = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                n = len(chat.asked)
                chat.asked.append(request)
                body = json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                   "model": chat.model or request.get("model"),
                                   "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                       "role": "assistant", "content": chat.reply(request, n)}}],
                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def spec(self) -> str:
        """The ``openai:URL#MODEL`` spec of this endpoint."""
        return f"openai:{self.url}#{self.model}"

    def __enter__(self) -> "FakeChat":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
