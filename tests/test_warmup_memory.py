"""Memory levers of the warmup (frozen lower layers, bf16 autocast on CPU, optimizer choice) and the
tensor accounting of ``measurements.memory_profile``."""

from __future__ import annotations

import pytest
import torch
from _warmup_support import build_tiny_trainer, completion_length_reward, tiny_policy

from unified.config import ConfigError
from unified.warmup import trainer as trainer_mod
from unified.warmup.config import load_warmup_config
from measurements.memory_profile import SavedTensorCounter, kv_cache_bytes, tensor_bytes
from unified.warmup.trainer import build_grpo_config, decoder_layers, freeze_lower_layers


def test_trainable_layers_train_only_the_top_layers(tmp_path):
    trainer = build_tiny_trainer(tmp_path, "model.trainable_layers=1", "train.max_steps=1",
                                 reward_funcs=[completion_length_reward])
    model = trainer.model
    layers = decoder_layers(model)
    top = {id(p) for p in layers[-1].parameters()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert all(p.requires_grad == (id(p) in top or "norm" in n and "layers" not in n)
               for n, p in model.named_parameters())
    trainer.train()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed, "the top layer did not move"
    assert all(id(dict(model.named_parameters())[n]) in top or ("norm" in n and "layers" not in n) for n in changed)
    state = trainer.optimizer.optimizer.state if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer.state
    assert {id(p) for p in state} <= top | {id(p) for n, p in model.named_parameters() if p.requires_grad}
    assert len(state) == sum(1 for p in model.parameters() if p.requires_grad)


def test_trainable_layers_beyond_the_depth_train_every_layer():
    model, _ = tiny_policy()
    depth = len(decoder_layers(model))
    counts = freeze_lower_layers(model, depth + 5)
    assert all(p.requires_grad for p in decoder_layers(model).parameters())
    assert not model.get_input_embeddings().weight.requires_grad
    assert counts["trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    with pytest.raises(ValueError, match=">= 1"):
        freeze_lower_layers(model, 0)
    with pytest.raises(ConfigError, match="trainable_layers"):
        load_warmup_config(None, ["model.trainable_layers=0"])


def test_bf16_on_cpu_follows_the_cpu(tmp_path, monkeypatch):
    cfg = load_warmup_config(None, [f"output_dir={tmp_path}", "model.precision=bf16"])
    monkeypatch.setattr(trainer_mod, "cpu_has_bf16", lambda: False)
    with pytest.raises(ValueError, match="AVX512-BF16"):
        build_grpo_config(cfg, device=torch.device("cpu"))
    monkeypatch.setattr(trainer_mod, "cpu_has_bf16", lambda: True)
    assert build_grpo_config(cfg, device=torch.device("cpu")).bf16 is True
    auto = load_warmup_config(None, [f"output_dir={tmp_path}"])
    assert build_grpo_config(auto, device=torch.device("cpu")).bf16 is False  # auto stays fp32 on a CPU


def test_optimizer_choice_reaches_trl(tmp_path):
    cfg = load_warmup_config(None, [f"output_dir={tmp_path}", "train.optim=adafactor"])
    assert build_grpo_config(cfg, device=torch.device("cpu")).optim == "adafactor"


def test_tensor_accounting_counts_storages_once():
    a = torch.zeros(10, 10)
    assert tensor_bytes([a, a.view(100), a[0], None]) == 400
    weight = torch.nn.Parameter(torch.ones(8, 8))
    counter = SavedTensorCounter({weight.untyped_storage().data_ptr()})
    x = torch.ones(4, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        y = torch.tanh(x @ weight)  # saves x (the weight is excluded) and tanh's output
    y.sum().backward()
    assert counter.total == 2 * 4 * 8 * 4


def test_kv_cache_size_from_the_config():
    model, _ = tiny_policy()
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    expected = 2 * c.num_hidden_layers * 3 * c.num_key_value_heads * 10 * head_dim * 4
    assert kv_cache_bytes(c, rows=3, tokens=10, dtype=torch.float32) == expected


def test_generation_runs_on_the_configured_cpu_threads(tmp_path, monkeypatch):
    """generation.cpu_threads applies while the trainer generates, and the training keeps its threads."""
    from trl import GRPOTrainer

    seen: list[int] = []
    original = GRPOTrainer._generate_single_turn

    def spy(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", spy)
    threads = torch.get_num_threads()
    trainer = build_tiny_trainer(tmp_path, "generation.cpu_threads=1", "train.max_steps=1",
                                 reward_funcs=[completion_length_reward])
    trainer.train()
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == threads
    with pytest.raises(ConfigError, match="cpu_threads"):
        load_warmup_config(None, ["generation.cpu_threads=0"])
