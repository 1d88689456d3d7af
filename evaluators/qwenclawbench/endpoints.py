"""Model endpoints the benchmarks' graders talk to: the LLM judge and Claw-Eval's simulated user.

A spec is either an OpenAI-compatible endpoint, ``openai:URL#MODEL`` (any vLLM/SGLang/hosted
server), or a local checkpoint spec (``embedded``, an HF directory) that is served on loopback
by :class:`unified.clients.local_server.LocalOpenAIServer` the first time it is needed and
stopped when the process exits. Both adapters share this module (Claw-Eval imports it).
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass

from unified.clients.openai_compat import EndpointConfig, OpenAICompatClient, parse_endpoint_spec

_LOCAL_SERVERS: dict[tuple[str, int], object] = {}
_LOCK = threading.Lock()


@dataclass
class ResolvedEndpoint:
    """An endpoint ready to call."""

    spec: str
    """What the user configured (recorded with the results)."""
    config: EndpointConfig
    """Where requests go."""
    local: bool
    """True when we serve a local checkpoint ourselves."""

    @property
    def client(self) -> OpenAICompatClient:
        return OpenAICompatClient(self.config)

    def describe(self) -> str:
        where = f"{self.config.base_url}#{self.config.model}"
        return f"{self.spec} (local server {where})" if self.local else where


def is_endpoint_spec(spec: str) -> bool:
    """``openai:URL#MODEL`` or ``http(s)://URL#MODEL``."""
    return spec.startswith(("openai:", "http://", "https://"))


def resolve_endpoint(spec: str, *, max_new_tokens: int = 256, timeout_s: float = 600.0) -> ResolvedEndpoint:
    """An endpoint for ``spec``; a local checkpoint spec starts (once) a loopback server for it."""
    spec = str(spec).strip()
    if not spec:
        raise ValueError("empty model endpoint spec (expected openai:URL#MODEL or a local checkpoint such as `embedded`)")
    if is_endpoint_spec(spec):
        return ResolvedEndpoint(spec, parse_endpoint_spec(spec, timeout_s=timeout_s, max_retries=2), local=False)
    from unified.clients.local_server import LocalOpenAIServer

    key = (spec, int(max_new_tokens))
    with _LOCK:
        server = _LOCAL_SERVERS.get(key)
        if server is None or getattr(server, "process", None) is None or server.process.poll() is not None:
            server = LocalOpenAIServer(spec, served_name="judge", max_new_tokens=int(max_new_tokens), max_batch=4)
            server.__enter__()
            _LOCAL_SERVERS[key] = server
    config = parse_endpoint_spec(server.spec, timeout_s=timeout_s, max_retries=1)
    return ResolvedEndpoint(spec, config, local=True)


def stop_local_servers() -> None:
    """Stop every loopback server this module started (also runs at interpreter exit)."""
    with _LOCK:
        for server in _LOCAL_SERVERS.values():
            try:
                server.__exit__(None, None, None)
            except Exception:  # pragma: no cover - best effort at exit
                pass
        _LOCAL_SERVERS.clear()


atexit.register(stop_local_servers)
