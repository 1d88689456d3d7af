"""The context-fit proxy in front of a local vLLM judge (unified.inference.context_fit): an official
client's answer budget above the served context is lowered to it, everything else passes byte for byte.
The upstream is a real loopback chat server (tests/_fake_chat.py); requests are sent the way
QwenClawBench's lib_grading sends them (urllib, a bearer header)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from _fake_chat import FakeChat
from unified.inference.context_fit import ContextFitProxy, fit_budget


def test_only_a_budget_above_the_context_changes():
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "{\"score\": 1}"}],
                       "temperature": 0.0, "max_tokens": 20480}).encode()
    fitted, asked = fit_budget(body, 4096)
    assert asked == 20480 and json.loads(fitted) == {**json.loads(body), "max_tokens": 4096}
    for same in (json.dumps({"model": "m", "max_tokens": 512}).encode(), b"not json", b"[1, 2]",
                 json.dumps({"max_tokens": True}).encode(), json.dumps({"max_tokens": "99999"}).encode(),
                 json.dumps({"max_tokens": 4096}).encode()):
        assert fit_budget(same, 4096) == (same, None)
    both, asked = fit_budget(json.dumps({"max_tokens": 9000, "max_completion_tokens": 8192}).encode(), 4096)
    assert asked == 9000 and json.loads(both) == {"max_tokens": 4096, "max_completion_tokens": 4096}


def _post(url: str, payload: bytes, key: str = "k") -> dict:
    request = urllib.request.Request(url + "/chat/completions", data=payload, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def test_the_proxy_forwards_official_bodies_and_lowers_only_the_budget():
    with FakeChat(lambda request, n: f"answer {n}") as upstream:
        proxy = ContextFitProxy(upstream.url, 4096).start()
        try:
            assert proxy.base_url.endswith("/v1") and proxy.base_url != upstream.url
            official = {"model": "fake", "messages": [{"role": "user", "content": "judge this"}],
                        "temperature": 0.0, "max_tokens": 20480}
            small = {"model": "fake", "messages": [{"role": "user", "content": "ü"}], "max_tokens": 77}
            first = _post(proxy.base_url, json.dumps(official).encode())
            second = _post(proxy.base_url, json.dumps(small, ensure_ascii=False).encode())
            assert first["choices"][0]["message"]["content"] == "answer 0"
            assert second["choices"][0]["message"]["content"] == "answer 1"
            assert upstream.asked == [{**official, "max_tokens": 4096}, small]
            assert (proxy.lowered, proxy.largest_asked) == (1, 20480)
            assert "4096 tokens" in proxy.describe()
        finally:
            proxy.close()


def test_an_upstream_that_is_gone_is_a_502_naming_it():
    with FakeChat(lambda request, n: "x") as upstream:
        url = upstream.url
    proxy = ContextFitProxy(url, 16).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            _post(proxy.base_url, b'{"max_tokens": 1}')
        assert refused.value.code == 502 and url in refused.value.read().decode()
    finally:
        proxy.close()


def test_a_proxy_needs_a_positive_context_and_a_plain_http_upstream():
    with pytest.raises(ValueError, match="positive"):
        ContextFitProxy("http://127.0.0.1:1/v1", 0)
    with pytest.raises(ValueError, match="plain-HTTP"):
        ContextFitProxy("https://example.org/v1", 4096)
