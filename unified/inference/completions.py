"""The legacy OpenAI ``/v1/completions`` endpoint and vLLM-style tokenizer endpoints of the local server.

What lm-evaluation-harness's ``local-completions`` class sends (and vLLM answers):

- loglikelihood requests: ``{"prompt": [[ids...], ...], "echo": true, "logprobs": 1,
  "max_tokens": 1, "temperature": 0}``. The answer's ``choices[i].logprobs`` holds, for every
  prompt token and the one generated token, ``tokens``, ``token_logprobs`` and ``top_logprobs``.
  One forward pass over the prompt ids x_1..x_n (shape (1, n) -> logits (1, n, V)) gives

      token_logprobs[0] = None,  token_logprobs[t] = log softmax(logits[t-1])[x_t]   (t = 1..n-1)

  and the generated token is the greedy argmax of ``logits[n-1]`` with its log-probability
  (appended at index n; lm-eval drops it with ``[ctxlen:-1]``). ``top_logprobs[t]`` is the
  top-``logprobs`` tokens at position t, so lm-eval's ``is_greedy`` (the scored token's
  log-probability equals the top one) holds exactly when the token is the argmax;
- generation requests: ``{"prompt": ..., "max_tokens": k, "stop": [...], "temperature": ...}``;
  the text is cut before the first stop string (OpenAI semantics). Not supported: log-probabilities
  of generated tokens (``logprobs`` is null), ``n`` > 1, ``echo`` with more than one new token;
  the last is a 400;
- ``GET /tokenizer_info``, ``POST /tokenize``, ``POST /detokenize`` (vLLM's names, at the server
  root), which lm-eval detects and uses as its tokenizer, so no tokenizer path is needed.
"""

from __future__ import annotations

from typing import Any

import torch

Prompt = str | list[int]


def normalise_prompts(prompt: Any) -> list[Prompt]:
    """``prompt`` of a completions request (str, [str], [int], [[int]]) -> a list of prompts."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or (isinstance(p, list) and p and all(
            isinstance(t, int) for t in p)) for p in prompt):
        return [p if isinstance(p, str) else list(p) for p in prompt]
    raise ValueError("prompt must be a string, a list of strings, a list of token ids or a list of lists of ids")


def prompt_ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    ids = prompt if isinstance(prompt, list) else tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("empty prompt")
    vocab = len(tokenizer)
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids out of the vocabulary (size {vocab}): {bad[:5]}")
    return list(ids)


@torch.no_grad()
def score_prompt(model: Any, tokenizer: Any, ids: list[int], top: int = 1, generate: bool = True) -> dict[str, Any]:
    """``logprobs`` of an echoed completion (see the module docstring) for prompt ``ids``."""
    top = max(1, int(top))
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0].float()  # (n, V)
    logp = torch.log_softmax(logits, dim=-1)  # (n, V)
    positions = list(range(len(ids)))
    tokens_all = list(ids)
    if generate:
        tokens_all.append(int(logp[-1].argmax()))
    token_logprobs: list[float | None] = [None]
    top_logprobs: list[dict[str, float] | None] = [None]
    for t in positions[1:] + ([len(ids)] if generate else []):
        row = logp[t - 1]
        token_logprobs.append(float(row[tokens_all[t]]))
        values, indices = row.topk(top)
        top_logprobs.append({tokenizer.convert_ids_to_tokens(int(i)): float(v) for v, i in zip(values, indices)})
    return {
        "tokens": tokenizer.convert_ids_to_tokens(tokens_all),
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": [],
        "text": tokenizer.decode(tokens_all),
        "generated_ids": tokens_all[len(ids):],
    }


def cut_at_stop(text: str, stop: Any) -> tuple[str, bool]:
    """``text`` before the first of the ``stop`` strings; True when one was found."""
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def tokenizer_info(tokenizer: Any, max_model_len: int | None = None) -> dict[str, Any]:
    """``GET /tokenizer_info`` (vLLM's fields that lm-eval reads)."""
    return {"eos_token": tokenizer.eos_token, "bos_token": tokenizer.bos_token, "pad_token": tokenizer.pad_token,
            "chat_template": tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None,
            "model_max_length": max_model_len or tokenizer.model_max_length,
            "tokenizer_class": type(tokenizer).__name__}
