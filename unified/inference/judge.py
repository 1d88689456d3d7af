"""The one judge abstraction: a chat model answering single-shot requests, behind an on-disk cache.

Every judge the library writes its own prompt for (the warmup's rubric reward, the world-model
eval, re-scoring saved runs in :mod:`unified.trace`) is a :class:`Judge` built by
:func:`make_judge` from a model spec: a local checkpoint shares the process's one loaded copy
(:func:`unified.inference.shared_chat_model`), an ``openai:URL#MODEL`` endpoint gets one client
(concurrency, retries, timeouts). Benchmarks whose official scorer calls a judge with its own HTTP
client get an endpoint instead (:func:`unified.inference.endpoints.resolve_endpoint`): there the
benchmark's code is the judge, we only serve the model.

Answers are cached by ``sha256(judge name, messages)``: the name carries the model spec and the
decoding settings, so rerunning a judgement costs nothing and changing the judge never reuses
another judge's answers. Failures are never cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from unified.inference.base import ChatModel, SamplingConfig
from unified.inference.shared import shared_chat_model
from unified.inference.spec import ModelSpec, parse_spec
from unified.store import write_text_atomic


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
            answer = json.loads(self._path(key).read_text(encoding="utf-8"))["answer"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return answer if isinstance(answer, str) else None

    def put(self, key: str, answer: str, judge_name: str = "") -> None:
        record = {"answer": answer, "judge": judge_name, "time": time.time()}
        write_text_atomic(self._path(key), json.dumps(record, ensure_ascii=False))


class Judge:
    """Greedy single-shot answers of ``model``; only requests not in ``cache`` reach the model.

    ``complete(requests)`` takes chat requests (lists of ``{"role", "content"}``) and returns, per
    request and in order, ``(answer text or the Exception of a failed request, came_from_cache)``;
    it never raises for one bad request. Reasoning (``<think>...</think>``) is removed from answers.
    """

    def __init__(self, model: ChatModel, *, name: str, max_tokens: int = 256, temperature: float = 0.0,
                 thinking: bool = False, cache: JudgeCache | None = None) -> None:
        self.model, self.name, self.cache = model, name, cache
        self.max_tokens, self.temperature, self.thinking = int(max_tokens), float(temperature), bool(thinking)
        self.calls = 0
        """Requests that actually reached the model (for tests and throughput reports)."""

    @property
    def loaded(self) -> Any:
        """The in-process weights this judge runs on (None for an endpoint)."""
        return getattr(self.model, "loaded", None)

    def answer(self, requests: list[list[dict[str, str]]]) -> list[str | Exception]:
        """The model's answers, uncached."""
        return self.model.chat_many(requests, max_tokens=self.max_tokens, temperature=self.temperature,
                                    thinking=self.thinking)

    def complete(self, requests: list[list[dict[str, str]]]) -> list[tuple[str | Exception, bool]]:
        out: list[tuple[str | Exception, bool] | None] = [None] * len(requests)
        keys = [JudgeCache.key(self.name, m) for m in requests]
        todo: list[int] = []
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                out[i] = (hit, True)
            else:
                todo.append(i)
        if todo:
            self.calls += len(todo)
            try:
                answers = self.answer([requests[i] for i in todo])
            except Exception as exc:  # the whole call failed: every request reports it
                answers = [exc] * len(todo)
            for i, answer in zip(todo, answers):
                out[i] = (answer, False)
                if self.cache is not None and isinstance(answer, str):
                    self.cache.put(keys[i], answer, self.name)
        return out  # type: ignore[return-value]


def make_judge(spec: str | ModelSpec, *, max_tokens: int = 256, temperature: float = 0.0, cache_dir: str = "",
               batch_size: int = 8, max_concurrency: int = 8, timeout_s: float = 120.0,
               max_retries: int = 4, thinking: bool = False,
               request_fields: tuple[str, ...] | None = None) -> Judge:
    """A :class:`Judge` on the model ``spec`` (``embedded``, a checkpoint dir or ``.gguf``, a hub id,
    ``openai:URL#MODEL``), thinking off unless ``thinking``, with a cache under ``cache_dir`` (empty: none).

    ``batch_size`` applies to in-process models, ``max_concurrency``/``timeout_s``/``max_retries`` and
    ``request_fields`` (the sampling fields a request carries, :class:`unified.inference.openai_backend.OpenAIPolicy`;
    None: all) to endpoints."""
    parsed = parse_spec(spec)
    sampling = SamplingConfig(max_new_tokens=int(max_tokens), temperature=float(temperature), thinking=thinking)
    if parsed.is_endpoint:
        options: dict[str, Any] = {"max_concurrency": max_concurrency, "timeout_s": timeout_s,
                                   "max_retries": max_retries}
        if request_fields is not None:
            options["request_fields"] = tuple(request_fields)
    else:
        options = {"max_batch_size": batch_size}
    model = shared_chat_model(parsed, sampling=sampling, **options)
    thought = "template default" if request_fields is not None and "chat_template_kwargs" not in request_fields \
        and parsed.is_endpoint else ("on" if thinking else "off")
    name = f"{parsed.text}|max_tokens={int(max_tokens)}|T={float(temperature)}|thinking={thought}"
    return Judge(model, name=name, max_tokens=max_tokens, temperature=temperature, thinking=thinking,
                 cache=JudgeCache(cache_dir) if cache_dir else None)
