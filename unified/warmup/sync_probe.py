"""The probe of the weight sync: one fixed token sequence scored by the rollout engine and by the trainer.

After every weight sync (TRL pushes the trainer's weights into vLLM before the first generation of each
optimizer step), both sides score the same sequence ``x_1..x_n`` (the first training prompt, rendered with
the chat template, at most :data:`PROBE_TOKENS` tokens) at temperature 1:

    logp_side(t) = log softmax(f_side(x_<t))[x_t],   t = 2..n

and :func:`unified.warmup.rollout_check.check_probe` compares them. Where the engine's scores come from:

- ``vllm_server``: ``VLLMClient.get_sequence_logprobs`` (the server's ``/v1/completions`` with
  ``prompt_logprobs``), asked by the main process and broadcast to the other ranks;
- ``vllm_colocate``: the in-process ``LLM.generate`` with ``prompt_logprobs=0`` on every rank;
- any other engine object that has ``sequence_logprobs(token_ids) -> list[float]`` (log-probs of
  tokens 2..n; the tests' rollout engines through TRL's ``rollout_func``).
"""

from __future__ import annotations

import torch

PROBE_TOKENS = 128
"""Longest probe sequence (tokens)."""


def probe_token_ids(trainer) -> list[int]:
    """The probe: the first training prompt rendered by the trainer's chat template, cut to PROBE_TOKENS."""
    prompt = trainer.train_dataset[0]["prompt"]
    processing = trainer.processing_class
    tokenizer = getattr(processing, "tokenizer", processing)
    if isinstance(prompt, list):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    else:
        text = str(prompt)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:PROBE_TOKENS]
    if len(ids) < 2:
        raise ValueError("the weight-sync probe needs a training prompt of at least 2 tokens")
    return ids


@torch.no_grad()
def trainer_logps(trainer, ids: list[int]) -> list[float]:
    """The trainer's log-probs of tokens 2..n of ``ids`` (every rank runs it: sharded weights gather)."""
    x = torch.tensor([ids], device=trainer.accelerator.device)
    with trainer.accelerator.autocast():
        logits = trainer.model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()


def engine_logps(trainer, ids: list[int]) -> list[float]:
    """The rollout engine's log-probs of tokens 2..n of ``ids`` (module docstring for the engines)."""
    engine = trainer.vllm_generation
    own = getattr(engine, "sequence_logprobs", None)
    if callable(own):
        return [float(v) for v in own(ids)]
    mode = getattr(engine, "mode", None)
    if mode == "server":
        from accelerate.utils import broadcast_object_list

        box: list = [None]
        if trainer.accelerator.is_main_process:
            scored = engine.vllm_client.get_sequence_logprobs([ids], [1], top_logprobs=1, temperature=1.0)
            box[0] = [float(position[0]) for position in scored["actual_logprobs"][0]]
        if trainer.accelerator.num_processes > 1:
            broadcast_object_list(box, from_process=0)
        return box[0]
    if mode == "colocate":
        from vllm import SamplingParams

        out = engine.llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0),
                                  use_tqdm=False)
        scored = out[0].prompt_logprobs
        return [float(scored[t][ids[t]].logprob) if scored[t] and ids[t] in scored[t] else float("-inf")
                for t in range(1, len(ids))]
    raise TypeError(f"cannot score the weight-sync probe with rollout engine {type(engine).__name__}")


__all__ = ["PROBE_TOKENS", "engine_logps", "probe_token_ids", "trainer_logps"]
