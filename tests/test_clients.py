"""Batched generation, the local OpenAI-compatible server, and the client against real servers."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from unified.chatformat.reasoning import split_reasoning
from unified.inference.server import LocalOpenAIServer
from unified.inference.openai_compat import EndpointConfig, EndpointError, OpenAICompatClient, parse_endpoint_spec
from unified.models import load_checkpoint
from unified.models.generation import SamplingParams, batched_generate


def test_batched_greedy_equals_one_at_a_time(tiny_checkpoint):
    loaded = load_checkpoint(tiny_checkpoint, device="cpu", experts_implementation="eager")
    tok = loaded.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
               for text in ("hi", "list the files of the workspace please", "predict the next observation")]
    params = SamplingParams(max_new_tokens=12)
    together = batched_generate(loaded.model, tok, prompts, params)
    alone = [batched_generate(loaded.model, tok, [p], params)[0] for p in prompts]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert all(o.finish_reason in ("stop", "length") and o.prompt_tokens > 0 for o in together)
    assert together[1].prompt_tokens > together[0].prompt_tokens


def test_endpoint_spec_parsing():
    cfg = parse_endpoint_spec("openai:http://127.0.0.1:8000/v1#Qwen/Qwen3.5-35B-A3B", max_concurrency=3)
    assert cfg.base_url == "http://127.0.0.1:8000/v1" and cfg.model == "Qwen/Qwen3.5-35B-A3B"
    assert cfg.max_concurrency == 3
    with pytest.raises(ValueError, match="expected openai:URL#MODEL"):
        parse_endpoint_spec("openai:http://127.0.0.1:8000/v1")


def test_split_reasoning():
    assert split_reasoning("plan it\n</think>\n\nanswer") == ("plan it", "answer")
    assert split_reasoning("just text") == (None, "just text")


@pytest.mark.slow
def test_local_server_end_to_end(tiny_checkpoint):
    server = LocalOpenAIServer(str(tiny_checkpoint), served_name="tiny", max_new_tokens=8)
    with server:
        client = OpenAICompatClient(parse_endpoint_spec(server.spec, max_retries=0))
        one = client.chat([{"role": "user", "content": "hello"}], max_tokens=6, temperature=0)
        assert one.completion_tokens <= 6 and one.prompt_tokens > 0 and one.finish_reason in ("stop", "length")
        tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}]
        many = client.chat_many([{"messages": [{"role": "user", "content": f"question {i}"}], "tools": tools,
                                  "max_tokens": 4} for i in range(4)])
        assert all(not isinstance(r, Exception) for r in many), many
        # the server rejects what the template rejects, with its message
        bad = client.chat_many([{"messages": [{"role": "user", "content": "x"}, {
            "role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}]},
            {"role": "wizard", "content": "?"}]}])[0]
        assert isinstance(bad, EndpointError) and bad.status == 400 and "unknown message role" in str(bad)
        port, process = server.port, server.process
    assert process.poll() is not None  # stopped
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))  # nothing listens on the port any more


class _Flaky(BaseHTTPRequestHandler):
    """A loopback server that fails the first ``failures`` requests with 503."""

    failures = 2
    seen = 0

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        type(self).seen += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = json.loads(body)
        if request["model"] == "reject":
            status, payload = 400, {"error": {"message": "model not allowed"}}
        elif type(self).seen <= type(self).failures:
            status, payload = 503, {"error": {"message": "busy"}}
        else:
            status, payload = 200, {"choices": [{"message": {"content": "ok", "tool_calls": [
                {"id": "c1", "function": {"name": "ls", "arguments": "{\"path\": \"/\"}"}}]}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def flaky_server():
    _Flaky.seen = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_client_retries_then_succeeds(flaky_server):
    client = OpenAICompatClient(EndpointConfig(flaky_server, "m", max_retries=3, backoff_s=0.01))
    result = client.chat([{"role": "user", "content": "hi"}])
    assert result.text == "ok" and _Flaky.seen == 3
    assert result.tool_calls == [{"id": "c1", "name": "ls", "arguments": {"path": "/"}}]


def test_client_gives_up_and_does_not_retry_client_errors(flaky_server):
    _Flaky.failures = 10
    try:
        client = OpenAICompatClient(EndpointConfig(flaky_server, "m", max_retries=1, backoff_s=0.01))
        with pytest.raises(EndpointError, match="gave up after 2 attempts.*503"):
            client.chat([{"role": "user", "content": "hi"}])
        seen = _Flaky.seen
        with pytest.raises(EndpointError, match="model not allowed") as info:
            OpenAICompatClient(EndpointConfig(flaky_server, "reject", max_retries=3)).chat([])
        assert info.value.status == 400 and _Flaky.seen == seen + 1
    finally:
        _Flaky.failures = 2


def test_client_timeout_is_retried_then_reported():
    with socket.socket() as listener:  # accepts connections but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        client = OpenAICompatClient(EndpointConfig(url, "m", timeout_s=0.3, max_retries=1, backoff_s=0.01))
        with pytest.raises(EndpointError, match="ReadTimeout"):
            client.chat([{"role": "user", "content": "hi"}])


def test_separate_prefill_matches_padded_prefill(tiny_checkpoint, tiny_tokenizer):
    import torch

    from unified.models.generation import prefilled_batch_cache
    from unified.models.tiny import tiny_moe_model

    loaded = load_checkpoint(tiny_checkpoint, device="cpu", experts_implementation="eager")
    tok = loaded.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
               for t in ("short", "a much longer question about the files of the workspace and the shell")]
    params = SamplingParams(max_new_tokens=10)
    separate = batched_generate(loaded.model, tok, prompts, params, prefill_separately=True)
    padded = batched_generate(loaded.model, tok, prompts, params, prefill_separately=False)
    assert [o.token_ids for o in separate] == [o.token_ids for o in padded]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    cache = prefilled_batch_cache(loaded.model, enc["input_ids"], enc["attention_mask"])
    width = enc["input_ids"].shape[1]
    assert cache is not None and cache.get_seq_length() == width - 1
    assert cache.layers[0].keys.shape[0] == 2
    assert torch.count_nonzero(cache.layers[0].keys[0, :, : width - 1 - (enc["attention_mask"][0].sum() - 1)]) == 0
    # linear-attention states (Qwen3.5-MoE) cannot be padded this way: the caller falls back
    linear = tiny_moe_model("qwen3_5_moe", vocab_size=len(tiny_tokenizer))
    assert prefilled_batch_cache(linear, enc["input_ids"], enc["attention_mask"]) is None
