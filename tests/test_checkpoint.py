"""load_checkpoint on every kind of spec, with real files (no hub access here)."""

import json

import pytest
import torch

from unified.models import CheckpointNotFoundError, HubUnreachableError, load_checkpoint, resolve_spec


def test_local_directory_round_trip(tiny_checkpoint):
    loaded = load_checkpoint(tiny_checkpoint, device="cpu")
    assert loaded.kind == "local" and loaded.dtype == torch.float32
    assert loaded.kernels.attention == "sdpa"
    assert loaded.model.config._experts_implementation == loaded.kernels.experts
    ids = loaded.tokenizer("the agent calls a tool", return_tensors="pt")["input_ids"]
    again = load_checkpoint(tiny_checkpoint, device="cpu", experts_implementation="eager")
    with torch.no_grad():
        a, b = loaded.model(input_ids=ids).logits, again.model(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5)
    assert "<tool_call>" in loaded.tokenizer.chat_template


def test_explicit_kernel_and_dtype_choices(tiny_checkpoint):
    loaded = load_checkpoint(tiny_checkpoint, device="cpu", dtype=torch.bfloat16, experts_implementation="eager",
                             attn_implementation="eager")
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    assert loaded.kernels.experts == "eager" and loaded.kernels.attention == "eager"


def test_missing_paths_are_clear_errors(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="GGUF file not found"):
        resolve_spec(tmp_path / "model.gguf")
    with pytest.raises(CheckpointNotFoundError, match="no config.json"):
        resolve_spec(tmp_path)
    with pytest.raises(CheckpointNotFoundError, match="not a local directory"):
        resolve_spec("./runs/does-not-exist")
    assert resolve_spec("Qwen/Qwen3.5-35B-A3B") == ("hub", "Qwen/Qwen3.5-35B-A3B")
    assert resolve_spec("embedded") == ("embedded", "embedded")


def test_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnreachableError) as info:
        load_checkpoint("unified-test/definitely-not-cached-model", device="cpu")
    msg = str(info.value)
    assert "HF_HUB_OFFLINE is set" in msg and "--model DIR" in msg and "definitely-not-cached-model" in msg


def test_gguf_file_loads_a_saveable_dense_model(dense_reference, tmp_path):
    model, tokenizer = dense_reference
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not hasattr(model.config, "quantization_config")
    model.save_pretrained(tmp_path / "dense")  # a GGUF-loaded model refuses this; ours is a fresh copy
    tokenizer.save_pretrained(tmp_path / "dense")
    config = json.loads((tmp_path / "dense" / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    reloaded = load_checkpoint(tmp_path / "dense", device="cpu")
    ids = tokenizer("Hello there", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, reloaded.model(input_ids=ids).logits)
