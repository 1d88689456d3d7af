"""WideSearch adapter: table-shaped info-seeking tasks, search + page tools, official F1 metrics.

Data (first that is set): ``data`` in the config, ``$WIDESEARCH_DATA``, or
``$UNIFIED_FIXTURES_DIR/widesearch``. A directory holds ``widesearch.jsonl`` and
``widesearch_gold/<instance_id>.csv`` (the layout of the ``ByteDance-Seed/WideSearch`` dataset; a
hub id is downloaded with ``huggingface_hub`` on nodes with hub access) or our fixtures
``fixture_widesearch.jsonl`` + ``fixture_widesearch_gold/`` (+ ``fixture_corpus.jsonl``).
A task row: ``instance_id, query, evaluation`` (object or JSON string with ``unique_columns,
required, eval_pipeline``), ``language``.

Config keys (``--set benchmarks.widesearch.KEY=VALUE``): ``data``; ``search`` = ``bing``,
``corpus``, ``simulated`` or ``auto`` (default ``$WIDESEARCH_SEARCH`` or auto: a corpus file next
to the data, else bing with a key, else simulated when ``search_model`` is set); ``corpus``;
``search_model`` (``openai:URL#MODEL`` or a checkpoint spec: the world model that plays the web);
``judge`` (``openai:URL#MODEL``; the LLM used by the official evaluator for ``llm_judge`` columns
and key alignment; none: exact fallbacks, recorded); ``instances``.

Score of an episode: F1 by item of the final answer's table (the study's headline); details
hold F1 by row, precision/recall and success. Aggregate: per-instance mean over runs, then mean
over instances, of each metric (the official ``avg_n``), plus ``max_n``. Every result says which
search backend ran (``search_backend``: ``real``, ``local_corpus`` or ``simulated``).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from unified.eval.adapter import Adapter, BenchmarkUnavailable, Environment, Task
from unified.types import Episode, EpisodeResult, Observation, ToolCall, ToolSpec

from evaluators.widesearch.metrics import evaluate_table
from evaluators.widesearch.search import SearchBackend, SearchUnavailable, make_backend

__all__ = ["WideSearchAdapter", "aggregate_widesearch", "load_widesearch"]

METRICS = ["score", "precision_by_row", "recall_by_row", "f1_by_row", "precision_by_item", "recall_by_item",
           "f1_by_item"]

SEARCH = ToolSpec(name="search", description="Search the web; returns a numbered list of results (title, URL, snippet).",
                  parameters={"type": "object", "properties": {
                      "query": {"type": "string"}, "count": {"type": "integer", "description": "results (max 20)"}},
                      "required": ["query"]})
OPEN_PAGE = ToolSpec(name="open_page", description="Read the text of a web page, e.g. a URL from the search results.",
                     parameters={"type": "object", "properties": {
                         "url": {"type": "string"},
                         "goal": {"type": "string", "description": "what you are looking for on the page"}},
                         "required": ["url"]})
SYSTEM_PROMPT = """You are an expert in online search. Gather the information the user asks for with the search \
and open_page tools, checking several sources when needed, until the data is complete. Then answer with the \
complete table in Markdown inside a ```markdown code block, with exactly the columns the user asks for."""


def _source(data: str | None) -> Path:
    raw = data or os.environ.get("WIDESEARCH_DATA")
    if not raw and os.environ.get("UNIFIED_FIXTURES_DIR"):
        raw = str(Path(os.environ["UNIFIED_FIXTURES_DIR"]) / "widesearch")
    if not raw:
        raise BenchmarkUnavailable("no WideSearch data configured",
                                   "set $WIDESEARCH_DATA to a copy of ByteDance-Seed/WideSearch (widesearch.jsonl + "
                                   "widesearch_gold/); for the fixtures set UNIFIED_FIXTURES_DIR=tests/fixtures")
    path = Path(raw)
    if not path.exists() and "/" in raw and not raw.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(repo_id=raw, repo_type="dataset"))
        except Exception as exc:
            raise BenchmarkUnavailable(f"cannot download {raw}: {type(exc).__name__}", "use a local copy") from None
    if not path.exists():
        raise BenchmarkUnavailable(f"{path} does not exist", "check $WIDESEARCH_DATA")
    return path


def load_widesearch(path: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str]], Path | None]:
    """(tasks with gold tables, (id, problem) of unusable rows, corpus file or None)."""
    if path.is_dir():
        for stem in ("widesearch", "fixture_widesearch"):
            if (path / f"{stem}.jsonl").is_file():
                data, gold_dir = path / f"{stem}.jsonl", path / f"{stem}_gold"
                break
        else:
            raise BenchmarkUnavailable(f"no widesearch.jsonl in {path}", "point $WIDESEARCH_DATA at the dataset")
    else:
        data, gold_dir = path, path.parent / f"{path.stem}_gold"
    corpus = data.parent / "fixture_corpus.jsonl"
    tasks, broken = [], []
    for i, line in enumerate(data.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{data}:{i}"
        try:
            row = json.loads(line)
            evaluation = row["evaluation"]
            evaluation = json.loads(evaluation) if isinstance(evaluation, str) else evaluation
            for key in ("unique_columns", "required", "eval_pipeline"):
                if key not in evaluation:
                    raise ValueError(f"evaluation lacks {key!r}")
            iid, query = str(row["instance_id"]), str(row["query"])
        except (ValueError, KeyError, TypeError) as exc:
            broken.append((f"line{i}", f"{where}: {type(exc).__name__}: {exc}"))
            continue
        csv = gold_dir / f"{iid}.csv"
        if not csv.is_file():
            broken.append((iid, f"{where}: no gold table {csv}"))
            continue
        tasks.append({"instance_id": iid, "query": query, "evaluation": evaluation,
                      "language": row.get("language", ""), "gold_csv": str(csv)})
    return tasks, broken, corpus if corpus.is_file() else None


def gold_table(csv: str, evaluation: dict[str, Any]) -> pd.DataFrame:
    df = pd.read_csv(csv)
    df.columns = [c.strip().lower().replace(" ", "") for c in df.columns]
    return df[[c.strip().lower().replace(" ", "") for c in evaluation["required"]]]


def aggregate_widesearch(results: list[EpisodeResult]) -> dict[str, Any]:
    """Official aggregate: for each metric, per-instance mean (and max) over runs, then mean over instances."""
    scored = [r for r in results if r.skipped is None]
    by_task: dict[str, list[dict[str, float]]] = {}
    for r in scored:
        by_task.setdefault(r.task_id, []).append({m: float(r.details.get(m, 0.0)) for m in METRICS})
    summary: dict[str, Any] = {}
    for m in METRICS:
        if by_task:
            summary[m] = {"avg_n": 100 * statistics.fmean(statistics.fmean(t[m] for t in runs) for runs in by_task.values()),
                          "max_n": 100 * statistics.fmean(max(t[m] for t in runs) for runs in by_task.values())}
    labels = sorted({str(r.details.get("search_backend")) for r in scored if r.details.get("search_backend")})
    return {"score": summary.get("f1_by_item", {}).get("avg_n", 0.0), "metric": "F1 by item (%), avg over runs",
            "f1_by_row": summary.get("f1_by_row", {}).get("avg_n", 0.0),
            "success_rate": summary.get("score", {}).get("avg_n", 0.0), "metrics": summary,
            "n_instances": len(by_task), "skipped": len(results) - len(scored), "search_backends": labels,
            "simulated": "simulated" in labels}


class WideSearchEnvironment(Environment):
    def __init__(self, task: dict[str, Any], backend_factory) -> None:
        super().__init__()
        self.task, self.backend_factory = task, backend_factory
        self.backend: SearchBackend | None = None
        self.tools = [SEARCH, OPEN_PAGE]
        self.system_prompt = SYSTEM_PROMPT
        self.first_user_message = task["query"]

    def start(self) -> None:
        self.backend = self.backend_factory()
        self.metadata.update({"search_backend": self.backend.label, "search_backend_name": self.backend.name})

    def stop(self) -> None:
        if self.backend is not None:
            try:
                self.backend.close()
            except Exception:
                pass
            self.backend = None

    def step(self, tool_calls: list[ToolCall]) -> list[Observation]:
        return [self._one(c) for c in tool_calls]

    def _one(self, call: ToolCall) -> Observation:
        assert self.backend is not None
        meta = {"search_backend": self.backend.label}
        if call.parse_error:
            return Observation(call.id, f"Malformed tool call: {call.parse_error}", is_error=True, metadata=meta)
        args = call.arguments
        try:
            if call.name == "search" and isinstance(args.get("query"), str):
                count = max(1, min(int(args.get("count", 10) or 10), 20))
                return Observation(call.id, self.backend.search(args["query"], count), metadata=meta)
            if call.name == "open_page" and isinstance(args.get("url"), str):
                return Observation(call.id, self.backend.open_page(args["url"], str(args.get("goal", ""))),
                                   metadata=meta)
        except Exception as exc:  # network errors, endpoint errors: the agent sees them
            return Observation(call.id, f"Error: {type(exc).__name__}: {exc}", is_error=True, metadata=meta)
        return Observation(call.id, f"Unknown tool or bad arguments for {call.name!r}: use search(query) or "
                           "open_page(url).", is_error=True, metadata=meta)


class WideSearchAdapter(Adapter):
    """WideSearch (F1 by item headline, F1 by row too)."""

    name = "widesearch"
    runs_default = 1

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.data = config.get("data")
        self.search = str(config.get("search") or os.environ.get("WIDESEARCH_SEARCH") or "auto")
        self.corpus = config.get("corpus")
        self.search_model = config.get("search_model")
        self.judge_spec = config.get("judge")
        self.only = [s.strip() for s in str(config.get("instances") or "").split(",") if s.strip()]
        self._judge = None

    def _search_choice(self, corpus: Path | None) -> tuple[str, dict[str, Any]]:
        corpus_path = self.corpus or (str(corpus) if corpus else None)
        name = self.search
        if name == "auto":
            name = ("corpus" if corpus_path else "bing" if os.environ.get("BingSearch_APIKEY")
                    else "simulated" if self.search_model else "")
        if not name:
            raise SearchUnavailable("no search backend: set $BingSearch_APIKEY, or --set benchmarks.widesearch."
                                    "search=simulated with search_model=..., or give a corpus")
        return name, {"corpus": corpus_path, "model": self.search_model}

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        rows, broken, corpus = load_widesearch(_source(self.data))
        try:
            name, options = self._search_choice(corpus)
            if name == "corpus":
                make_backend(name, **options)  # validate the corpus now
            elif name == "bing":
                make_backend(name)
            skip = None
        except (SearchUnavailable, ValueError) as exc:
            name, options, skip = "", {}, str(exc)
        out = []
        for row in rows:
            if self.only and row["instance_id"] not in self.only:
                continue
            if split not in (None, "", "all") and split != row["language"]:
                continue
            out.append(Task(id=row["instance_id"], benchmark=self.name, split=row["language"],
                            payload={**row, "search": name, "search_options": options}, skip_reason=skip))
        out += [Task(id=iid, benchmark=self.name, split="unparseable", skip_reason=err) for iid, err in broken]
        return out[:limit] if limit else out

    def open(self, task: Task) -> Environment:
        payload = task.payload
        return WideSearchEnvironment(payload, lambda: make_backend(payload["search"], **payload["search_options"]))

    def _judge_fn(self):
        if not self.judge_spec:
            return None
        if self._judge is None:
            from unified.clients.openai_compat import OpenAICompatClient, parse_endpoint_spec

            client = OpenAICompatClient(parse_endpoint_spec(str(self.judge_spec)))
            self._judge = lambda prompt: client.chat([{"role": "user", "content": prompt}], temperature=0.0).text
        return self._judge

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        payload = task.payload
        answer = next((m.content for m in reversed(episode.messages) if m.role == "assistant" and m.content), "")
        result = evaluate_table(answer, gold_table(payload["gold_csv"], payload["evaluation"]), payload["evaluation"],
                                judge=self._judge_fn())
        details = result.to_dict()
        details.update({"search_backend": env.metadata.get("search_backend"),
                        "judge": self.judge_spec or "none (exact-match fallbacks)"})
        return EpisodeResult(self.name, task.id, episode.trial, result.f1_by_item, passed=result.score == 1.0,
                             details=details)

    def aggregate(self, results: list[EpisodeResult]) -> dict[str, Any]:
        return aggregate_widesearch(results)

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        return [[]]

    def gold_answer(self, task: Task) -> str | None:
        table = gold_table(task.payload["gold_csv"], task.payload["evaluation"])
        header = "| " + " | ".join(table.columns) + " |"
        lines = [header, "|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
        return "```markdown\n" + "\n".join(lines) + "\n```"
