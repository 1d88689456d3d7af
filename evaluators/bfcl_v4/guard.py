"""Limits on what a model's call may make bfcl's executable classes do in our process.

bfcl's backend classes (``func_source_code``) run in the host process, both during an episode
(:class:`evaluators.bfcl_v4.environment.BFCLEnvironment`) and when ``multi_turn_checker``
replays the calls for scoring. Three things a call could do there are stopped here:

- **CPU**: ``MathAPI.power(10, 10**7)`` computes a ten-million-digit integer and
  ``square_root(2, 10**6)`` / ``logarithm(..., precision=10**6)`` a million-digit decimal,
  holding the GIL for seconds to hours and freezing every episode of the run. Before a call,
  :func:`argument_problem` refuses an integer power whose result would pass
  :data:`MAX_RESULT_BITS` bits and a precision above :data:`MAX_PRECISION` digits; the call
  is answered with bfcl's error wording and never runs. Every gold call of the benchmark is far
  inside these bounds, so scores on the gold path do not change.
- **process-wide state**: ``square_root`` sets the calling thread's ``decimal`` precision and
  ``logarithm`` mpmath's global ``mp.dps`` to the model's value; :func:`guarded_calls` puts
  both back after every call (and serialises the MathAPI calls that touch mpmath). mpmath is
  reached through the import system (:func:`_loaded_mpmath`), never read from ``sys.modules``
  directly: another episode's thread may be importing it at that moment, and a partially
  initialised module has no ``mp`` yet.
- **the host's network**: ``WebSearchAPI.fetch_url_content`` fetches any URL with redirects
  followed. Inside :func:`guarded_calls`, every request ``requests`` sends from this thread,
  each redirect hop included, must go to a host whose every address is global
  (:func:`url_problem`: no loopback, private, link-local, shared, reserved or multicast
  address); otherwise the request fails before connecting and bfcl reports the error as it
  reports any fetch error. (A name that resolves differently between the check and the
  connection is not covered.)
"""

from __future__ import annotations

import contextlib
import decimal
import ipaddress
import math
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

MAX_RESULT_BITS = 1 << 17
"""Largest integer result (bits, about 39,000 decimal digits) an integer ``power`` may compute."""
MAX_PRECISION = 10_000
"""Largest ``precision`` (decimal digits) of ``square_root`` and ``logarithm``."""

_STATE = threading.local()
_MPMATH_LOCK = threading.Lock()
_INSTALL_LOCK = threading.Lock()
_installed = False


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def argument_problem(name: str, args: dict[str, Any]) -> str | None:
    """Why the call ``name(**args)`` must not run here (None when it may)."""
    if name == "power":
        base, exponent = _int(args.get("base")), _int(args.get("exponent"))
        if base is not None and exponent is not None and exponent > 0 and abs(base) > 1:
            bits = exponent * math.log2(abs(base))
            if bits > MAX_RESULT_BITS:
                return (f"power({base if abs(base) < 10**12 else '...'}, {exponent}) would compute an integer of about "
                        f"{int(bits)} bits; this harness executes results up to {MAX_RESULT_BITS} bits")
    elif name in ("square_root", "logarithm"):
        precision = _int(args.get("precision"))
        if precision is not None and precision > MAX_PRECISION:
            return f"{name} precision {precision} is above the {MAX_PRECISION} digits this harness executes"
    return None


def url_problem(url: str) -> str | None:
    """Why ``url`` must not be fetched from this host (None when it may): not http(s), no host, a
    host that does not resolve, or one with any address that is not global."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        return f"unparseable URL ({exc})"
    if parts.scheme not in ("http", "https") or not host:
        return "only http(s) URLs with a host are fetched"
    try:
        infos = socket.getaddrinfo(host, port or (443 if parts.scheme == "https" else 80), proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        return f"{host} does not resolve ({exc})"
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        mapped = getattr(address, "ipv4_mapped", None)
        if not (mapped or address).is_global or (mapped or address).is_multicast:
            return f"{host} resolves to {address}, a loopback/private/link-local address this harness never fetches"
    return None


def _install_request_guard() -> None:
    """Wrap ``requests``' adapter ``send`` once: inside :func:`guarded_calls`, a request (every
    redirect hop goes through ``send``) to a non-global address fails before connecting."""
    global _installed
    with _INSTALL_LOCK:
        if _installed:
            return
        try:
            import requests
            from requests.adapters import HTTPAdapter
        except ImportError:  # bfcl's web search needs requests; without it nothing can fetch
            _installed = True
            return
        original = HTTPAdapter.send

        def send(self, request, *args, **kwargs):
            if getattr(_STATE, "active", 0):
                problem = url_problem(request.url)
                if problem:
                    raise requests.exceptions.ConnectionError(f"refused to fetch {request.url}: {problem}")
            return original(self, request, *args, **kwargs)

        HTTPAdapter.send = send
        _installed = True


def _loaded_mpmath() -> Any:
    """mpmath when some module has imported it (None otherwise), fully initialised: ``import``
    waits on the module's import lock while another thread is still executing it, where a
    plain ``sys.modules`` read would return the half-built module."""
    if "mpmath" not in sys.modules:
        return None
    import mpmath

    return mpmath


@contextlib.contextmanager
def guarded_calls() -> Iterator[None]:
    """Run bfcl backend calls under the guards of the module docstring: the thread's ``decimal``
    context and mpmath's precision restored on exit, requests to non-global addresses refused."""
    _install_request_guard()
    saved_decimal = decimal.getcontext().copy()
    mpmath = _loaded_mpmath()
    saved_dps = mpmath.mp.dps if mpmath is not None else None
    _STATE.active = getattr(_STATE, "active", 0) + 1
    try:
        yield
    finally:
        _STATE.active -= 1
        decimal.setcontext(saved_decimal)
        mpmath = _loaded_mpmath()
        if mpmath is not None:
            mpmath.mp.dps = saved_dps if saved_dps is not None else 15


def call_guarded(method, name: str, args: dict[str, Any]) -> Any:
    """``method(**args)`` under :func:`guarded_calls`, after :func:`argument_problem` (raises
    ``ValueError`` with the reason instead of calling). Calls that set mpmath's global precision
    are serialised."""
    problem = argument_problem(name, args)
    if problem:
        raise ValueError(problem)
    lock = _MPMATH_LOCK if name == "logarithm" else contextlib.nullcontext()
    with lock, guarded_calls():
        return method(**args)


__all__ = ["MAX_PRECISION", "MAX_RESULT_BITS", "argument_problem", "call_guarded", "guarded_calls", "url_problem"]
