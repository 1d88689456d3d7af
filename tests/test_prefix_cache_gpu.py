"""Prefix caching on CUDA: the cached path must generate exactly what the uncached one does (fp32, greedy)."""

import pytest
import torch

from unified.models.generation import SamplingParams, batched_generate
from unified.models.prefix_cache import PrefixCache

SYSTEM = "You are an agent with tools. Predict the next observation of the environment, then act. " * 4


@pytest.mark.gpu
def test_cached_generation_matches_uncached_on_cuda(tiny_checkpoint):
    from unified.models import load_checkpoint

    loaded = load_checkpoint(tiny_checkpoint, device="cuda", dtype=torch.float32, experts_implementation="eager")
    tok, model = loaded.tokenizer, loaded.model
    assert model.device.type == "cuda"
    prompts = [tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                                       tokenize=False, add_generation_prompt=True)
               for q in ("list the files", "read the config", "what is the weather")]
    params = SamplingParams(max_new_tokens=12)
    cache = PrefixCache(max_bytes=64 << 20)
    plain = batched_generate(model, tok, prompts, params)
    first = batched_generate(model, tok, prompts, params, prefix_cache=cache)
    turn2 = [p + o.text + "<|im_end|>\n<|im_start|>user\nobservation: ok<|im_end|>\n<|im_start|>assistant\n"
             for p, o in zip(prompts, plain)]
    second = batched_generate(model, tok, turn2, params, prefix_cache=cache)
    assert [o.token_ids for o in first] == [o.token_ids for o in plain]
    assert [o.token_ids for o in second] == [o.token_ids for o in batched_generate(model, tok, turn2, params)]
