"""Judge backends (an OpenAI-compatible endpoint, or a local HF model) and the on-disk answer cache.

A backend turns a list of chat requests into answer texts (or the Exception of a request that
failed). Its ``name`` identifies the judge and its decoding settings; the cache keys answers
by sha256(name, messages), so rerunning a judgement costs nothing and changing the judge
never reuses another judge's answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

from unified.inference.base import SamplingConfig
from unified.inference.hf import HFPolicy
from unified.inference.openai_compat import OpenAICompatClient, parse_endpoint_spec
from unified.store import write_text_atomic


class JudgeBackend(Protocol):
    name: str

    def complete(self, requests: list[list[dict[str, str]]]) -> list[str | Exception]:
        """One answer text (or the failure) per request, in order."""
        ...


class OpenAIJudgeBackend:
    """Any OpenAI-compatible server through :class:`unified.inference.openai_compat.OpenAICompatClient`
    (concurrent requests, retries with backoff, per-request timeouts)."""

    def __init__(self, endpoint: str, *, max_tokens: int = 256, temperature: float = 0.0,
                 max_concurrency: int = 8, timeout_s: float = 120.0, max_retries: int = 4,
                 disable_thinking: bool = True) -> None:
        self.config = parse_endpoint_spec(endpoint, max_concurrency=max_concurrency, timeout_s=timeout_s,
                                          max_retries=max_retries)
        self.client = OpenAICompatClient(self.config)
        self.sampling: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if disable_thinking:  # vLLM/SGLang/our server; turn off for endpoints that reject unknown fields
            self.sampling["chat_template_kwargs"] = {"enable_thinking": False}
        self.name = f"openai:{self.config.base_url}#{self.config.model}|max_tokens={max_tokens}|T={temperature}"

    def complete(self, requests: list[list[dict[str, str]]]) -> list[str | Exception]:
        results = self.client.chat_many([{"messages": m, **self.sampling} for m in requests])
        return [r if isinstance(r, Exception) else r.text for r in results]


class LocalHFJudgeBackend:
    """A local checkpoint (any :mod:`unified.inference.spec` checkpoint spec), greedy, batched, on the
    process's shared copy of the model (:func:`unified.inference.shared_checkpoint`: a judge on the
    policy's checkpoint loads nothing more) unless ``loaded`` is given."""

    def __init__(self, spec: str, *, max_tokens: int = 256, batch_size: int = 8, loaded=None) -> None:
        self.spec, self.max_tokens, self.batch_size = str(spec), max_tokens, batch_size
        self._loaded = loaded
        self._model: HFPolicy | None = None
        self.name = f"hf:{self.spec}|max_tokens={max_tokens}|greedy"

    @property
    def model(self) -> HFPolicy:
        if self._model is None:
            self._model = HFPolicy(self.spec, SamplingConfig(max_new_tokens=self.max_tokens, enable_thinking=False),
                                   loaded=self._loaded, max_batch_size=self.batch_size)
        return self._model

    @property
    def loaded(self):
        return self.model.loaded

    def complete(self, requests: list[list[dict[str, str]]]) -> list[str | Exception]:
        return self.model.chat_many(requests, max_tokens=self.max_tokens, temperature=0.0, thinking=False)


class JudgeCache:
    """Answers on disk, one small JSON file per (judge, messages) key, written atomically."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(judge_name: str, messages: list[dict[str, str]]) -> str:
        blob = json.dumps({"judge": judge_name, "messages": messages}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        try:
            return json.loads(self._path(key).read_text(encoding="utf-8"))["answer"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, answer: str, judge_name: str = "") -> None:
        record = {"answer": answer, "judge": judge_name, "time": time.time()}
        write_text_atomic(self._path(key), json.dumps(record, ensure_ascii=False))


class CachedJudge:
    """A backend behind a cache: only uncached requests reach the backend; failures are not cached."""

    def __init__(self, backend: JudgeBackend, cache: JudgeCache | None = None) -> None:
        self.backend, self.cache = backend, cache
        self.calls = 0
        """Requests that actually reached the backend (for tests and throughput reports)."""

    @property
    def name(self) -> str:
        return self.backend.name

    def complete(self, requests: list[list[dict[str, str]]]) -> list[tuple[str | Exception, bool]]:
        """(answer or failure, came_from_cache) per request."""
        out: list[tuple[str | Exception, bool] | None] = [None] * len(requests)
        todo: list[int] = []
        keys = [JudgeCache.key(self.backend.name, m) for m in requests]
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache else None
            if hit is not None:
                out[i] = (hit, True)
            else:
                todo.append(i)
        if todo:
            self.calls += len(todo)
            answers = self.backend.complete([requests[i] for i in todo])
            for i, answer in zip(todo, answers):
                out[i] = (answer, False)
                if self.cache is not None and isinstance(answer, str):
                    self.cache.put(keys[i], answer, self.backend.name)
        return out  # type: ignore[return-value]


def build_backend(endpoint: str = "", local_model: str = "", **options: Any) -> JudgeBackend:
    """An endpoint spec (``openai:URL#MODEL``) or a local checkpoint spec -> a backend."""
    if bool(endpoint) == bool(local_model):
        raise ValueError("judge: set exactly one of judge_endpoint (openai:URL#MODEL) or judge_model "
                         "(a load_checkpoint spec such as 'embedded' or a local HF directory)")
    if endpoint:
        return OpenAIJudgeBackend(endpoint, **options)
    keep = {k: v for k, v in options.items() if k in ("max_tokens", "batch_size", "loaded")}
    return LocalHFJudgeBackend(local_model, **keep)
