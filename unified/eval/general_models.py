"""A ``--model`` spec -> one of lm-evaluation-harness's own model classes (``lm_eval.api.model.LM``).

The spec is parsed by :func:`unified.inference.parse_spec`.

- ``embedded``, a checkpoint dir, a ``.gguf`` or a hub id: the process's shared copy
  (:func:`unified.inference.shared_checkpoint`, the agent suites' policy uses the same) is loaded (dtype and the attention/experts kernels of :func:`unified.kernels.select_kernels`,
  exactly as the agent suites' ``hf`` backend does) and lm-eval's ``HFLM`` wraps the loaded
  model and tokenizer (``HFLM(pretrained=<PreTrainedModel>, tokenizer=<tokenizer>)``);
- ``openai:URL#MODEL``: lm-eval's ``local-completions`` (``URL/completions``; loglikelihood
  tasks need ``echo`` + ``logprobs`` there, as vLLM and ``unified.inference.server`` give)
  or ``local-chat-completions`` (``URL/chat/completions``; generation tasks only), chosen by
  ``general.api_model``;
- ``vllm:PATH`` (or ``--backend vllm``): lm-eval's ``vllm`` class (the ``gpu`` extra; imported
  only here, so CPU installs never need it).
"""

from __future__ import annotations

from typing import Any

from unified.config import ConfigError
from unified.inference import parse_spec, shared_checkpoint
from unified.inference.openai_compat import parse_endpoint_spec
from unified.models.checkpoint import CheckpointNotFoundError
from unified.models.embedded import ensure_embedded_checkpoint

THINK_END = "</think>"
"""End of the reasoning block in the library's chat template; lm-eval scores the text after it."""


def make_lm(model: str, cfg: Any, *, backend: str | None = None, loaded: Any = None) -> Any:
    """The lm-eval ``LM`` for ``model`` (see the module docstring); ``cfg`` is a GeneralConfig."""
    spec = parse_spec(model, backend=backend) if model != "gold" else None
    if spec is None:
        raise ValueError("--model gold replays agent-benchmark answers; the general suite needs a real model")
    if spec.backend == "openai":
        return api_lm(model, cfg)
    if spec.backend == "vllm":
        return vllm_lm(spec.checkpoint, cfg)
    return hf_lm(spec.checkpoint, cfg, loaded=loaded)


def hf_lm(model: str, cfg: Any, *, loaded: Any = None) -> Any:
    """lm-eval's HFLM around the checkpoint we load (our dtype and kernel choice)."""
    from lm_eval.models.huggingface import HFLM

    if loaded is None:
        loaded = shared_checkpoint(model)
    kwargs: dict[str, Any] = {"batch_size": cfg.batch_size, "max_batch_size": cfg.max_batch_size or 64,
                              "backend": "causal", "enable_thinking": cfg.thinking, "think_end_token": THINK_END}
    if cfg.max_length:
        kwargs["max_length"] = cfg.max_length
    return HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, **kwargs)


def check_options(model: str, cfg: Any, backend: str | None = None) -> None:
    """Option combinations lm-eval cannot run, as a ConfigError before any task starts."""
    if model == "gold":
        raise ConfigError("--model gold replays agent-benchmark answers; the general suite needs a real model")
    try:  # a path that is no checkpoint, a malformed endpoint: one clear line before any task is loaded
        spec = parse_spec(model, backend=backend)
    except (CheckpointNotFoundError, ValueError) as exc:
        raise ConfigError(f"--model: {exc}") from None
    if spec.backend != "openai":
        return
    if cfg.api_model == "local-chat-completions" and not cfg.apply_chat_template:
        raise ConfigError("general.api_model=local-chat-completions sends chat messages: it needs "
                          "general.apply_chat_template=true")
    if cfg.api_model == "local-completions" and cfg.apply_chat_template and not cfg.tokenizer:
        # lm-eval's remote tokenizer hands the chat history on unrendered (lm-eval 0.4.13): the
        # template must be rendered on this side, with the served checkpoint's own tokenizer
        raise ConfigError("general.apply_chat_template with local-completions needs the served model's tokenizer: "
                          "--set general.tokenizer=CHECKPOINT_DIR (or general.apply_chat_template=false, or "
                          "general.api_model=local-chat-completions for generation tasks)")


def api_lm(model: str, cfg: Any) -> Any:
    """lm-eval's OpenAI-compatible classes against ``openai:URL#MODEL``."""
    from lm_eval.api.registry import get_model

    endpoint = parse_endpoint_spec(model)
    chat = cfg.api_model == "local-chat-completions"
    check_options(model, cfg)
    kwargs: dict[str, Any] = {
        "base_url": endpoint.base_url + ("/chat/completions" if chat else "/completions"),
        "model": endpoint.model, "num_concurrent": cfg.num_concurrent, "seed": cfg.seed,
        "batch_size": 1 if chat else cfg.batch_size, "think_end_token": THINK_END if chat else None,
    }
    if not chat:
        kwargs.pop("think_end_token")
    if cfg.max_length:
        kwargs["max_length"] = cfg.max_length
    if endpoint.api_key:
        kwargs["header"] = {"Authorization": f"Bearer {endpoint.api_key}"}
    if cfg.tokenizer:
        kwargs.update(tokenizer=cfg.tokenizer, tokenizer_backend="huggingface")
    elif not chat:
        kwargs["tokenizer_backend"] = "auto"  # the server's /tokenize endpoints when it has them
    try:
        return get_model(cfg.api_model)(**kwargs)
    except OSError as exc:  # no remote tokenizer and the served name is no tokenizer either
        raise RuntimeError(
            f"{model}: lm-eval needs the model's tokenizer for {cfg.api_model}: the server has no /tokenize "
            f"endpoints and {endpoint.model!r} is not a tokenizer it can load ({exc}). Pass "
            "--set general.tokenizer=CHECKPOINT_DIR (or use general.api_model=local-chat-completions for "
            "generation tasks)") from exc


def vllm_lm(path: str, cfg: Any) -> Any:
    """lm-eval's vLLM class (GPU; the ``gpu`` extra)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError("vllm is not installed: install the gpu extra (pip install -e '.[gpu]') on a CUDA node, "
                           "or evaluate the checkpoint in-process (--model DIR) or behind a server (openai:URL#MODEL)")
    from lm_eval.api.registry import get_model

    if path == "embedded":
        path = str(ensure_embedded_checkpoint())
    kwargs: dict[str, Any] = {"pretrained": path, "batch_size": cfg.batch_size if cfg.batch_size != 1 else "auto",
                              "seed": cfg.seed, "enable_thinking": cfg.thinking, "think_end_token": THINK_END}
    if cfg.max_batch_size:
        kwargs["max_batch_size"] = cfg.max_batch_size
    if cfg.max_length:
        kwargs["max_length"] = cfg.max_length
    return get_model("vllm")(**kwargs)
