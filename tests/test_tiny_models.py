import pytest
import torch

from unified.models.tiny import tiny_moe_model


@pytest.mark.parametrize("arch,cls", [("qwen3_moe", "Qwen3MoeForCausalLM"), ("qwen3_5_moe", "Qwen3_5MoeForCausalLM")])
def test_tiny_moe_trains_a_step_with_router_loss(arch, cls, tiny_tokenizer):
    model = tiny_moe_model(arch, vocab_size=len(tiny_tokenizer))
    assert type(model).__name__ == cls
    model.config.output_router_logits = True
    ids = tiny_tokenizer(["the agent calls a tool", "ls -la /workspace"], return_tensors="pt", padding=True)
    out = model(**ids, labels=ids["input_ids"])
    assert out.logits.shape[:2] == ids["input_ids"].shape and out.logits.shape[-1] == len(tiny_tokenizer)
    assert out.aux_loss is not None and torch.isfinite(out.aux_loss) and out.aux_loss > 0
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out.loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p)]
    assert any(".gate." in n or "router" in n for n in changed), "router weights did not train"
    assert any("experts" in n for n in changed), "expert weights did not train"


def test_tiny_models_are_seeded():
    a, b = tiny_moe_model(seed=1), tiny_moe_model(seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = tiny_moe_model(seed=2)
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_tokenizer_round_trip(tiny_tokenizer):
    text = "<tool_call>\n<function=search>\n<parameter=q>\nmoe\n</parameter>\n</function>\n</tool_call>"
    assert tiny_tokenizer.decode(tiny_tokenizer(text, add_special_tokens=False)["input_ids"]) == text
