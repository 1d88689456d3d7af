"""The embedded default: SmolLM2-135M-Instruct upcycled to a 4-expert top-2 Mixtral-style MoE."""

import json

import pytest
import torch

from unified.models import load_checkpoint
from unified.models.embedded import (
    BUILD_RECORD,
    UpcycleSpec,
    embedded_checkpoint_dir,
    ensure_embedded_checkpoint,
    max_logit_diff,
    parity_input_ids,
    upcycle,
)

pytestmark = pytest.mark.slow


def test_upcycled_logits_match_dense_at_creation(dense_reference):
    dense, tokenizer = dense_reference
    ids = parity_input_ids(tokenizer)
    moe = upcycle(dense, UpcycleSpec())
    assert type(moe).__name__ == "MixtralForCausalLM"
    layer = moe.model.layers[0].mlp
    assert layer.experts.gate_up_proj.shape == (4, 2 * 1536, 576) and layer.gate.weight.shape == (4, 576)
    assert not torch.equal(layer.gate.weight, torch.zeros_like(layer.gate.weight))  # a real, fresh router
    diff = max_logit_diff(dense, moe, ids)
    assert diff < 1e-3, diff
    # the router really routes: two experts of four get non-zero weight per token
    moe.config.output_router_logits = True
    with torch.no_grad():
        router_logits = moe(input_ids=ids, output_router_logits=True).router_logits[0]
    assert router_logits.shape[-1] == 4 and router_logits.std() > 0
    # a different router seed changes routing but not the function
    other = upcycle(dense, UpcycleSpec(router_seed=1))
    assert not torch.equal(other.model.layers[0].mlp.gate.weight, layer.gate.weight)
    assert max_logit_diff(dense, other, ids) < 1e-3


def test_cached_checkpoint_reloads_with_identical_logits(embedded_dir, dense_reference):
    dense, tokenizer = dense_reference
    record = json.loads((embedded_dir / BUILD_RECORD).read_text())
    assert record["parity"]["max_abs_logit_diff"] < 1e-3
    assert record["upcycle"]["num_experts"] == 4 and record["upcycle"]["top_k"] == 2
    assert len(record["source"]["sha256"]) == 64
    loaded = load_checkpoint("embedded", device="cpu", experts_implementation="eager")
    assert loaded.kind == "embedded" and loaded.path == embedded_dir
    ids = parity_input_ids(loaded.tokenizer)
    fresh = upcycle(dense, UpcycleSpec())
    with torch.no_grad():
        assert torch.equal(fresh(input_ids=ids).logits, loaded.model(input_ids=ids).logits)
    again = load_checkpoint("embedded", device="cpu", experts_implementation="eager")
    with torch.no_grad():
        assert torch.equal(again.model(input_ids=ids).logits, loaded.model(input_ids=ids).logits)
    assert max_logit_diff(dense, loaded.model, ids) < 1e-3


def test_cache_is_reused_and_honours_the_environment(embedded_dir, embedded_cache):
    assert embedded_dir == embedded_checkpoint_dir() and str(embedded_dir).startswith(str(embedded_cache))
    stamp = (embedded_dir / BUILD_RECORD).stat().st_mtime_ns
    assert ensure_embedded_checkpoint() == embedded_dir
    assert (embedded_dir / BUILD_RECORD).stat().st_mtime_ns == stamp  # not rebuilt
    assert not list(embedded_dir.parent.glob("*.building-*"))  # no staging leftovers


def test_embedded_chat_template_and_tool_rendering(embedded_dir):
    loaded = load_checkpoint("embedded", device="cpu")
    tok = loaded.tokenizer
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "ls", "arguments": {"path": "/tmp"}}}]}],
        tools=[{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}],
        tokenize=False)
    assert "<function=ls>\n<parameter=path>\n/tmp\n</parameter>" in text
    assert tok.convert_tokens_to_ids("<|im_end|>") == loaded.model.generation_config.eos_token_id
