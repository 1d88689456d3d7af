"""bfcl's executable classes run in our process: a model's call may not freeze it, change its
``decimal``/mpmath state, or fetch the host's loopback/private/link-local addresses.

Attacks (each run against the real bfcl-eval classes): ``MathAPI.power(10, 10**7)`` held the
GIL for 13 s and ``square_root(2, 10**6)`` for 29 s (larger arguments: hours), freezing every
episode; ``square_root`` left the worker thread's ``decimal`` precision at the model's value
(``logarithm`` does the same to mpmath's global precision); ``fetch_url_content`` fetched
``http://127.0.0.1:...`` and followed redirects there. Now the arguments are bounded before the
call (the refusal is the call's error observation), the state is restored after every call, and
every request hop to a non-global address fails before connecting. The same guards hold when
bfcl's checker replays the calls for scoring.
"""

from __future__ import annotations

import decimal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("bfcl_eval")

from evaluators.bfcl_v4 import guard  # noqa: E402
from evaluators.bfcl_v4.environment import BFCLEnvironment  # noqa: E402
from evaluators.bfcl_v4.scoring import checker_call  # noqa: E402
from unified.benchmarks import Task  # noqa: E402
from unified.types import ToolCall  # noqa: E402


def _math_env() -> BFCLEnvironment:
    """A multi-turn task (fixture, bfcl's entry format) whose only backend is bfcl's MathAPI."""
    entry = {"id": "multi_turn_base_fixture_0", "question": [[{"role": "user", "content": "compute"}]],
             "involved_classes": ["MathAPI"], "initial_config": {}, "function": []}
    task = Task(id="multi_turn_base_fixture_0", benchmark="bfcl_v4",
                payload={"category": "multi_turn_base", "entry": entry})
    env = BFCLEnvironment(task, None)
    env.start()
    return env


def _step(env, name, **arguments):
    (obs,) = env.step([ToolCall(name=name, arguments=arguments, id="c0")])
    return obs


@pytest.mark.parametrize("name, arguments, words", [
    ("power", {"base": 10, "exponent": 10**7}, "bits"),
    ("square_root", {"number": 2, "precision": 10**6}, "precision"),
    ("logarithm", {"value": 2, "base": 10, "precision": 10**6}, "precision"),
])
def test_huge_numeric_arguments_are_refused_before_the_call(name, arguments, words):
    env = _math_env()
    obs = _step(env, name, **arguments)
    assert obs.is_error and obs.content.startswith("Error during execution:") and words in obs.content
    assert "this harness executes" in obs.content


def test_ordinary_math_calls_still_run():
    env = _math_env()
    assert _step(env, "power", base=2, exponent=10).content == '{"result": 1024}'
    assert _step(env, "power", base=2.5, exponent=2).content == '{"result": 6.25}'
    assert _step(env, "square_root", number=16, precision=5).content == "{'result': Decimal('4')}"


def test_decimal_and_mpmath_precision_are_restored_after_a_call():
    import mpmath

    env = _math_env()
    before_prec, before_dps = decimal.getcontext().prec, mpmath.mp.dps
    assert not _step(env, "square_root", number=2, precision=60).is_error
    assert not _step(env, "logarithm", value=2, base=10, precision=70).is_error
    assert decimal.getcontext().prec == before_prec and mpmath.mp.dps == before_dps


def test_the_scoring_replay_gets_the_same_refusal():
    text, exact = checker_call("power(base=10, exponent=10000000)", {"power"})
    assert text != "power(base=10, exponent=10000000)" and not exact
    assert checker_call("power(base=2, exponent=10)", {"power"}) == ("power(base=2, exponent=10)", True)


@pytest.mark.parametrize("url", ["http://127.0.0.1/", "http://localhost:8080/x", "http://169.254.169.254/latest/",
                                 "http://10.1.2.3/", "http://192.168.0.1/", "http://[::1]/", "http://0.0.0.0/",
                                 "http://[::ffff:127.0.0.1]/", "http://100.64.0.1/", "file:///etc/passwd"])
def test_non_global_urls_are_refused(url):
    assert guard.url_problem(url)


def test_a_global_address_is_allowed():
    assert guard.url_problem("http://8.8.8.8/") is None


class _Loopback(BaseHTTPRequestHandler):
    """A host-side service the sandboxed agent must not reach; redirects ``/hop`` to ``/secret``."""

    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        type(self).hits.append(self.path)
        if self.path == "/hop":
            self.send_response(302)
            self.send_header("Location", "/secret")
            self.end_headers()
            return
        body = b"HOST-ONLY SECRET"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback():
    handler = type("Loopback", (_Loopback,), {"hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def _web_search():
    from evaluators.bfcl_v4.isolation import import_bfcl

    module = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.web_search")
    api = module.WebSearchAPI()
    api._load_scenario({"show_snippet": True})
    return api


def test_fetch_url_content_never_reaches_loopback(loopback):
    base, handler = loopback
    result = guard.call_guarded(_web_search().fetch_url_content, "fetch_url_content", {"url": f"{base}/secret"})
    assert "error" in result and "refused" in result["error"] and "SECRET" not in str(result)
    assert handler.hits == []


def test_a_redirect_to_loopback_is_refused_at_the_hop(loopback, monkeypatch):
    """The first URL passes the address policy (as a public host would: the policy is told so for
    this one URL); its redirect to a loopback path is checked again and refused."""
    base, handler = loopback
    real = guard.url_problem
    monkeypatch.setattr(guard, "url_problem", lambda url: None if url == f"{base}/hop" else real(url))
    result = guard.call_guarded(_web_search().fetch_url_content, "fetch_url_content", {"url": f"{base}/hop"})
    assert "error" in result and "refused" in result["error"] and "SECRET" not in str(result)
    assert handler.hits == ["/hop"]
