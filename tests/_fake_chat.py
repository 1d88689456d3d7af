"""Loopback JSON servers for tests: real HTTP on 127.0.0.1.

- :class:`JSONServer`: each POST's JSON body goes to ``answer(request, n)`` (n: how many came before),
  which returns ``(status, payload)``; ``asked`` keeps every request; a GET goes to ``get(path)`` (when
  given, else 404).
- :class:`FakeChat`: an OpenAI-compatible chat endpoint on it, each answer's text made by
  ``reply(request, n)``, named ``model`` (None: the model the request named)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONServer:
    """``with JSONServer(answer) as server:`` serves ``server.url`` (``.../v1``) until the block ends."""

    def __init__(self, answer: Callable[[dict[str, Any], int], tuple[int, Any]],
                 get: Callable[[str], tuple[int, Any]] | None = None) -> None:
        self.answer = answer
        self.asked: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                n = len(owner.asked)
                owner.asked.append(request)
                self._send(*owner.answer(request, n))

            def do_GET(self):  # noqa: N802
                self._send(*(get(self.path) if get is not None else (404, {"error": "no GET here"})))

            def _send(self, status: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.url = f"{self.base_url}/v1"

    def __enter__(self) -> "JSONServer":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


class FakeChat(JSONServer):
    """``with FakeChat(reply) as chat:`` serves ``chat.url`` (``.../v1``) until the block ends."""

    def __init__(self, reply: Callable[[dict[str, Any], int], str], model: str | None = "fake") -> None:
        self.reply, self.model = reply, model
        super().__init__(self._chat_answer)

    def _chat_answer(self, request: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
        return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": self.model or request.get("model"),
                     "choices": [{"index": 0, "finish_reason": "stop", "message": {
                         "role": "assistant", "content": self.reply(request, n)}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def spec(self) -> str:
        """The ``openai:URL#MODEL`` spec of this endpoint."""
        return f"openai:{self.url}#{self.model}"
