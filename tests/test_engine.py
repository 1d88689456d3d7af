"""One engine per loaded model (unified.inference.engine), on tiny real MoE checkpoints."""

from __future__ import annotations

import os
import threading
import time

import pytest

from unified.inference import engine as engine_module
from unified.inference.base import PolicyRequest, SamplingConfig, make_chat_model
from unified.inference.engine import Engine, GenerationJob, engine_for
from unified.inference.hf import HFPolicy
from unified.inference.shared import shared_chat_model, shared_checkpoint
from unified.models import load_checkpoint
from unified.models.generation import SamplingParams, batched_generate

QUESTIONS = ["hi", "list the files in /tmp and say which one is the largest, then delete it",
             "what is 2 + 2?", "write one line of a poem about the sea, the sky and the long walk home at night"]


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint, device="cpu")


def _requests(questions=QUESTIONS):
    return [PolicyRequest(messages=[{"role": "user", "content": q}]) for q in questions]


def _plain_generate(loaded, prompt: str, max_new_tokens: int) -> list[int]:
    """Reference: transformers' own ``generate`` on the prompt alone (greedy, no cache reuse, no padding)."""
    out = batched_generate(loaded.model, loaded.tokenizer, [prompt], SamplingParams(max_new_tokens=max_new_tokens),
                           prefill_separately=False)
    return out[0].token_ids


@pytest.mark.parametrize("continuous", [True, False])
def test_greedy_completions_from_concurrent_clients_equal_plain_generate(loaded, continuous):
    """Four threads (a policy's episodes, a judge, a user) submit at once; every completion is the one
    transformers' ``generate`` gives the prompt alone."""
    policy = HFPolicy("tiny", SamplingConfig(max_new_tokens=10, thinking=False), loaded=loaded,
                      continuous=continuous)
    requests = _requests()
    outputs: dict[int, object] = {}
    barrier = threading.Barrier(len(requests))

    def client(i: int) -> None:
        barrier.wait()
        outputs[i] = policy.submit(requests[i]).result(timeout=900)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, request in enumerate(requests):
        expected = _plain_generate(loaded, policy.render(request), 10)
        assert outputs[i].token_ids == expected, QUESTIONS[i]
        assert outputs[i].prompt == policy.render(request) and outputs[i].completion_tokens == len(expected)
    assert policy.generate(requests)[2].token_ids == outputs[2].token_ids  # generate = submit + result


def test_policy_judge_and_server_on_one_checkpoint_share_one_engine(tiny_checkpoint):
    from unified.inference.server import InProcessServer

    spec = str(tiny_checkpoint)
    policy = make_chat_model(spec, SamplingConfig(max_new_tokens=6, thinking=False))
    judge = shared_chat_model(spec)
    with InProcessServer(spec, max_new_tokens=6) as server:
        assert policy.engine is judge.engine is engine_for(server.loaded) is engine_for(shared_checkpoint(spec))
        client = make_chat_model(server.spec, SamplingConfig(max_new_tokens=6, thinking=False), api_key=server.token)
        messages = [{"role": "user", "content": "hello there"}]
        over_http = client.generate([PolicyRequest(messages=messages)])[0]
        in_process = policy.generate([PolicyRequest(messages=messages)])[0]
        assert over_http.text == in_process.text and over_http.completion_tokens == in_process.completion_tokens


def test_a_bad_job_fails_alone_and_the_others_complete(loaded):
    engine = Engine(loaded, max_rows=4)
    prompt = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                  add_generation_prompt=True)
    good = engine.generate(prompt, SamplingParams(max_new_tokens=4))
    bad = engine.generate(prompt, SamplingParams(max_new_tokens=0))
    empty = engine.generate([], SamplingParams(max_new_tokens=4))
    assert len(good.result(timeout=900).token_ids) >= 1
    with pytest.raises(ValueError, match="max_new_tokens"):
        bad.result(timeout=900)
    with pytest.raises(ValueError, match="empty prompt"):
        empty.result(timeout=900)
    # a request whose deadline passed is answered at once, with no text
    late = engine.submit(GenerationJob(prompt, SamplingParams(max_new_tokens=4), deadline=time.monotonic() - 1))
    assert late.done() and late.result().finish_reason == "timeout" and late.result().text == ""


def test_the_engine_thread_exits_when_idle_and_the_next_submit_starts_it(loaded, monkeypatch):
    monkeypatch.setattr(engine_module, "IDLE_EXIT_S", 0.05)
    engine = Engine(loaded)
    prompt = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                  add_generation_prompt=True)
    first = engine.generate(prompt, SamplingParams(max_new_tokens=3)).result(timeout=900)
    deadline = time.monotonic() + 600
    while engine.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not engine.running  # no thread holds the model while nobody generates
    again = engine.generate(prompt, SamplingParams(max_new_tokens=3)).result(timeout=900)
    assert again.token_ids == first.token_ids


def test_a_client_thread_hands_its_idle_openmp_workers_back_when_it_submits(loaded):
    """GNU OpenMP spins its workers only briefly once it manages more threads than CPUs, so the idle
    pool a client's thread keeps after parallel torch code (loading weights, say) slowed every step of
    the engine's thread; submit frees the caller's pool: after a submit there is none left to free."""
    import torch

    if torch.get_num_threads() < 2 or engine_module._gomp_pause() is None:
        pytest.skip("needs torch on GNU OpenMP with 2+ threads")
    for thread in threading.enumerate():  # other tests' engines exit after IDLE_EXIT_S: the count must hold still
        if thread.name == "unified-engine":
            thread.join(timeout=120)
    engine = Engine(loaded)
    prompt = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                  add_generation_prompt=True)
    seen: dict[str, object] = {}

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    def client() -> None:
        torch.ones(1 << 22).exp_()  # a parallel op: this thread now keeps idle OpenMP workers
        seen["with_pool"] = threads()
        seen["freed"] = engine_module.release_openmp_threads()
        seen["without_pool"] = threads()
        torch.ones(1 << 22).exp_()  # the pool again, then a submit
        seen["output"] = engine.generate(prompt, SamplingParams(max_new_tokens=3)).result(timeout=900)
        seen["after_submit"] = threads()
        engine_module.release_openmp_threads()
        seen["released_again"] = threads()

    worker = threading.Thread(target=client)
    worker.start()
    worker.join()
    assert seen["freed"] is True and seen["without_pool"] < seen["with_pool"]  # the pool is real and freeable
    assert seen["output"].token_ids  # the engine generated for this client
    assert seen["released_again"] == seen["after_submit"]  # submit had already freed it


def test_the_local_server_cuts_an_official_budget_to_the_context_window_as_vllm_does(tiny_checkpoint):
    """Claw-Eval's simulated user asks max_tokens 65536: the local server generates at most what the model's
    window (the tiny checkpoint's max_position_embeddings, 1024) leaves after the prompt, and a prompt that fills
    the window is a 400 in vLLM's words (which the eval's client reads as the context being full)."""
    import json
    import urllib.error
    import urllib.request

    from unified.inference.server import InProcessServer, context_window, fit_new_tokens

    def ask(server, content: str, max_tokens: int) -> tuple[int, dict]:
        body = json.dumps({"model": server.served_name, "max_tokens": max_tokens,
                           "messages": [{"role": "user", "content": content}]}).encode()
        request = urllib.request.Request(f"{server.base_url}/chat/completions", data=body, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {server.token}"})
        try:
            with urllib.request.urlopen(request, timeout=300) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with InProcessServer(str(tiny_checkpoint), max_new_tokens=6) as server:
        window = context_window(server.loaded.model)
        assert window == 1024
        tokenizer = server.loaded.tokenizer
        n = 1
        while True:  # a prompt that leaves the window 8 tokens, so the cut decides the answer's length
            longer = "word " * (n + 1)
            rendered = tokenizer.apply_chat_template([{"role": "user", "content": longer}], tokenize=False,
                                                     add_generation_prompt=True)
            if len(tokenizer(rendered, add_special_tokens=False)["input_ids"]) > window - 8:
                break
            n += 1
        status, answer = ask(server, "word " * n, 65536)
        usage = answer["usage"]
        assert status == 200 and window - 8 - 4 <= usage["prompt_tokens"] <= window - 8, usage
        assert usage["prompt_tokens"] + usage["completion_tokens"] <= window, usage
        assert fit_new_tokens(65536, 1000, window) == 24 and fit_new_tokens(16, 10, None) == 16
        status, answer = ask(server, "word " * 1500, 16)
        assert status == 400 and "maximum context length is 1024 tokens" in answer["error"]["message"]


def test_stopping_the_engine_fails_its_running_jobs_and_a_process_exits_cleanly_with_one_running(tiny_checkpoint,
                                                                                                 monkeypatch):
    """At interpreter exit every engine is stopped: a job still decoding (a judge request its grader gave up on)
    fails with EngineStopped instead of a daemon thread inside torch aborting the exiting process (exit 134).
    The tiny model's end-of-sequence tokens are taken away so that its jobs decode until stopped."""
    import subprocess
    import sys

    import unified.models.continuous as continuous
    from unified.inference.engine import EngineStopped

    monkeypatch.setattr(continuous, "_eos_ids", lambda model, tokenizer: [])
    loaded = load_checkpoint(tiny_checkpoint, device="cpu")
    engine = Engine(loaded)
    future = engine.generate("hello", SamplingParams(max_new_tokens=100000))
    deadline = time.monotonic() + 60
    while not engine.running and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert not future.done()  # decoding now
    assert engine.stop(timeout_s=60) and not engine.running
    with pytest.raises(EngineStopped):
        future.result(timeout=5)
    assert engine.generate("hello", SamplingParams(max_new_tokens=2)).result(timeout=60).text is not None  # restarts

    program = ("import time, sys\nimport unified.models.continuous as c\nc._eos_ids = lambda model, tokenizer: []\n"
               "from unified.models import load_checkpoint\n"
               "from unified.inference.engine import engine_for\nfrom unified.models.generation import SamplingParams\n"
               f"loaded = load_checkpoint({str(tiny_checkpoint)!r}, device='cpu')\n"
               "engine_for(loaded).generate('hello', SamplingParams(max_new_tokens=100000))\n"
               "time.sleep(2)\nprint('exiting with a job running', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "exiting with a job running" in done.stdout, (done.returncode, done.stderr[-2000:])
