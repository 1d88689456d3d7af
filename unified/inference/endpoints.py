"""Model endpoints that graders and simulated users talk to over HTTP.

Some callers need an OpenAI-compatible URL rather than an in-process model: a grader running in
a sandbox reaches its LLM judge through a relay, a benchmark checkout's own client code sends
the simulated user's requests. :func:`resolve_endpoint` turns any model spec into one:

- an endpoint spec (``openai:URL#MODEL``, ``http(s)://URL#MODEL``) is used as is;
- a checkpoint spec (``embedded``, a directory, ...) is served on loopback by one
  :class:`unified.inference.server.InProcessServer` per checkpoint and process, over the
  process's shared copy of the weights (the policy's too, when it runs the same checkpoint).
  The server takes each request's own ``max_tokens``, so a judge and a simulated user with
  different budgets share it; it stops at interpreter exit (:func:`stop_local_servers`). It
  requires its per-server bearer token, which the endpoint's ``config.api_key`` carries;
- a ``vllm:SPEC`` is served by the process's vLLM server for that checkpoint
  (:func:`unified.inference.vllm_backend.server_for_spec`), the same one a ``vllm:SPEC`` policy uses;
  so is a bare checkpoint spec whose checkpoint the eval serves with vLLM
  (:func:`unified.inference.routes.routed`). vLLM refuses a ``max_tokens`` above its context, which the
  official judge clients ask for, so such an endpoint is reached through a
  :class:`unified.inference.context_fit.ContextFitProxy` (one per vLLM server), which lowers only that
  field to the context and is named in the endpoint's ``describe()`` line.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass

from unified.inference.context_fit import ContextFitProxy
from unified.inference.openai_compat import EndpointConfig, OpenAICompatClient, parse_endpoint_spec
from unified.inference.routes import routed
from unified.inference.server import InProcessServer
from unified.inference.shared import checkpoint_key
from unified.inference.spec import ENDPOINT_EXAMPLE, SpecError, parse_spec
from unified.inference.vllm_backend import server_for_spec

_SERVERS: dict[tuple, InProcessServer] = {}
_FIT_PROXIES: dict[str, ContextFitProxy] = {}
_LOCK = threading.Lock()


@dataclass
class ResolvedEndpoint:
    """An endpoint ready to call."""

    spec: str
    """What the user configured (recorded with the results)."""
    config: EndpointConfig
    """Where requests go."""
    local: bool
    """True when this process serves a local checkpoint itself."""
    context_fit: ContextFitProxy | None = None
    """The proxy in front of a local vLLM server (module docstring); None elsewhere."""

    @property
    def client(self) -> OpenAICompatClient:
        return OpenAICompatClient(self.config)

    def describe(self) -> str:
        where = f"{self.config.base_url}#{self.config.model}"
        if not self.local:
            return where
        fit = f"; {self.context_fit.describe()}" if self.context_fit is not None else ""
        return f"{self.spec} (local server {where}{fit})"


def local_server(spec: str) -> InProcessServer:
    """The process's loopback server for checkpoint ``spec`` (started on first use, restarted if it died)."""
    parsed = parse_spec(spec)
    key = checkpoint_key(parsed)
    with _LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.running():
            server = _SERVERS[key] = InProcessServer(parsed.checkpoint, served_name="local", max_batch=8)
        return server


def resolve_endpoint(spec: str, *, timeout_s: float = 600.0) -> ResolvedEndpoint:
    """An endpoint for ``spec`` (module docstring); a checkpoint spec starts (once) a loopback server for it."""
    text = str(spec).strip()
    if not text:
        raise SpecError(f"empty model endpoint spec (expected {ENDPOINT_EXAMPLE} or a local checkpoint such as "
                        "`embedded`)")
    parsed = routed(parse_spec(text))
    if parsed.is_endpoint:
        return ResolvedEndpoint(text, parse_endpoint_spec(parsed, timeout_s=timeout_s, max_retries=2), local=False)
    if parsed.backend == "vllm":
        vllm = server_for_spec(parsed)
        with _LOCK:
            proxy = _FIT_PROXIES.get(vllm.base_url)
            if proxy is None:
                proxy = _FIT_PROXIES[vllm.base_url] = ContextFitProxy(vllm.base_url, vllm.max_model_len).start()
        config = parse_endpoint_spec(f"openai:{proxy.base_url}#{vllm.served_name}", timeout_s=timeout_s,
                                     max_retries=1, api_key=vllm.token)
        return ResolvedEndpoint(text, config, local=True, context_fit=proxy)
    if parsed.backend != "hf":
        raise SpecError(f"model spec {text!r}: an endpoint needs {ENDPOINT_EXAMPLE} or a checkpoint served "
                        f"in-process, not a {parsed.backend} spec")
    server = local_server(text)
    config = parse_endpoint_spec(server.spec, timeout_s=timeout_s, max_retries=1, api_key=server.token)
    return ResolvedEndpoint(text, config, local=True)


def stop_local_servers() -> None:
    """Stop every loopback server this module started (also runs at interpreter exit)."""
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
        proxies = list(_FIT_PROXIES.values())
        _FIT_PROXIES.clear()
    for proxy in proxies:
        proxy.close()
    for server in servers:
        try:
            server.stop()
        except Exception:  # pragma: no cover - best effort at exit
            pass


atexit.register(stop_local_servers)
