"""``moe.routing_replay`` in the warmup trainer (unified.warmup.routing): the rollout's routes travel with
the generation batch and decide the trainer's routing; metrics per step. Tiny random Qwen3-MoE, CPU."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from _warmup_support import build_tiny_trainer, completion_length_reward, fixture_rl_rows
from unified.config import ConfigError
from unified.models.routing_replay import NO_ROUTE, RouteLayout
from unified.warmup.callbacks import METRICS_FILE
from unified.warmup.config import load_warmup_config
from unified.models.routing_replay import mismatch_kl
from unified.warmup.routing import ROUTES_KEY

RECIPE_35B = Path(__file__).resolve().parents[1] / "recipes" / "warmup" / "qwen35_35b_a3b.yaml"


def read_metrics(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("mode", ["replay", "record"])
def test_a_run_logs_agreement_and_mismatch_with_and_without_replay(tmp_path, mode):
    """Two updates from one generation batch (the second off-policy), gradient checkpointing on (the
    backward recomputes the forward under the same routes)."""
    trainer = build_tiny_trainer(tmp_path, f"moe.routing_replay={mode}", "train.max_steps=2",
                                 "gspo.steps_per_generation=2", "model.gradient_checkpointing=true",
                                 "generation.max_completion_length=8", reward_funcs=[completion_length_reward])
    trainer.train()
    records = [r for r in read_metrics(tmp_path / METRICS_FILE) if "loss" in r]
    assert len(records) == 2
    first = records[0]
    assert 0.5 < first["moe/router_agreement"] <= 1.0
    assert first["moe/routes_from_rollout"] == 1.0
    assert first["moe/routes_bytes_per_token"] == RouteLayout.of(trainer.model).bytes_per_token == 2 * 2 * 1
    for key in ("moe/mismatch_kl_replay", "moe/mismatch_kl_live"):
        assert math.isfinite(first[key]) and 0 <= first[key] < 0.05, (key, first[key])
    assert all(r["grad_norm"] > 0 for r in records)
    assert "moe/router_agreement" in records[1]  # the second update's forward compared with the rollout's routes


def test_the_batch_carries_the_rollouts_routes_and_replay_follows_them(tmp_path):
    trainer = build_tiny_trainer(tmp_path, "moe.routing_replay=replay", "generation.max_completion_length=6")
    rows = fixture_rl_rows(2)
    output = trainer._generate_and_score_completions([rows[0], rows[0], rows[1], rows[1]])
    routes = output[ROUTES_KEY]
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    att = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    layout = RouteLayout.of(trainer.model)
    assert routes.shape == (*ids.shape, layout.layers, layout.top_k) and routes.dtype == torch.int8
    assert (routes[~att.bool()] == NO_ROUTE).all() and (routes[att.bool()] != NO_ROUTE).any()
    p = output["prompt_ids"].shape[1]
    assert torch.equal(routes[0, :p], routes[1, :p])  # a group shares its prompt's routes
    last = output["completion_mask"].sum(1) - 1
    assert all((routes[i, p + int(last[i])] == NO_ROUTE).all() for i in range(4))

    keep = output["completion_ids"].size(1)

    def logps(batch_routes):
        trainer.routing.use_batch({ROUTES_KEY: batch_routes} if batch_routes is not None else {})
        with torch.no_grad():
            out = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, keep)[0]
        trainer.routing.clear()
        return out, trainer.routing.take_agreement()

    live, _ = logps(None)
    same, agree_same = logps(routes)
    other = torch.where(routes >= 0, (routes.long() + 1) % layout.num_experts, routes.long()).to(routes.dtype)
    forced, agree_other = logps(other)
    mask = output["completion_mask"].bool()
    assert agree_same > 0.9 and agree_other < 0.1  # a later layer's live choice sees the forced earlier ones
    assert torch.allclose(same[mask], live[mask], atol=1e-4)
    assert (forced[mask] - live[mask]).abs().max() > 1e-3  # the forced (other) experts were used
    # record mode compares without forcing
    trainer.routing.replay.force = False
    observed, agree_observed = logps(other)
    assert agree_observed == 0.0 and torch.allclose(observed[mask], live[mask], atol=1e-6)


def test_mismatch_kl_is_the_k3_estimate_and_skips_nan():
    trainer = torch.tensor([[-1.0, -2.0, 0.0]])
    rollout = torch.tensor([[-1.0, -1.5, float("nan")]])
    d = torch.tensor(-0.5)
    assert mismatch_kl(trainer, rollout, torch.ones(1, 3)) == pytest.approx(float((d.exp() - 1 - d) / 2))
    assert mismatch_kl(trainer, trainer, torch.ones(1, 3)) == 0.0
    tiny = torch.tensor([[-1.0 + 3e-7, -2.0]])  # float32 rounding once made r - 1 - log r negative
    assert mismatch_kl(tiny, torch.tensor([[-1.0, -2.0]]), torch.ones(1, 2)) >= 0.0


def test_the_35b_dry_run_prints_routing_replay(capsys):
    from unified.warmup.__main__ import main

    main(["--recipe", str(RECIPE_35B), "--dry-run", "--set", "rewards.rubric.judge_endpoint=openai:http://judge:8001/v1#judge"])
    assert '"routing_replay": "replay"' in capsys.readouterr().out


def test_recipe_values_and_a_dense_model_is_refused(tmp_path):
    from unified.models.tiny import train_tiny_tokenizer
    from unified.warmup.trainer import build_trainer

    with pytest.raises(ConfigError, match="routing_replay"):
        load_warmup_config(None, ["moe.routing_replay=always"])
    cfg = load_warmup_config(RECIPE_35B)
    assert cfg.moe.routing_replay == "replay"
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = train_tiny_tokenizer()
    dense = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    cfg = load_warmup_config(None, [f"output_dir={tmp_path}", "logging.wandb=false", "moe.routing_replay=replay",
                                    "train.per_device_train_batch_size=4", "gspo.num_generations=2"])
    from _warmup_support import fixture_rl_dataset, token_f1

    with pytest.raises(ConfigError, match="no top-k MoE routers"):
        build_trainer(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=[token_f1], model=dense, tokenizer=tok)


def test_without_rollout_routes_the_old_policy_forward_records_them(tmp_path):
    """The vLLM paths (TRL returns no routed experts): the trainer's first forward over the generation batch
    (TRL's old log-probs) records the routes, padding excluded, and later forwards replay them (R2)."""
    trainer = build_tiny_trainer(tmp_path, "moe.routing_replay=replay", "generation.max_completion_length=6")
    rows = fixture_rl_rows(2)
    output = trainer._generate_and_score_completions([rows[0], rows[0], rows[1], rows[1]])
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    att = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    keep = output["completion_ids"].size(1)
    state = trainer.routing
    state.begin_generation()
    state.generate(lambda: ([[1]], None), [[1]], records=False)  # a vLLM rollout: ids and log-probs only
    assert state.source == "old_policy"
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, keep, 2)  # TRL's old log-probs
    recorded = {"prompt_ids": output["prompt_ids"], "completion_ids": output["completion_ids"]}
    state.end_generation(recorded)
    routes = recorded[ROUTES_KEY]
    assert routes.shape[:2] == ids.shape and (routes[~att.bool()] == NO_ROUTE).all()
    assert (routes[att.bool()] >= 0).all()  # every real position, the last completion token included
    state.use_batch(recorded)
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, keep)
    state.clear()
    assert state.take_agreement() == 1.0
