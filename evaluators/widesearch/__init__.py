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
to the data, else bing with a key, else simulated when ``search_model`` is set; a ``--model gold``
run with none of them searches nothing, ``none``: its replay of the gold tables makes no search
calls, and the aggregate says so); ``corpus``;
``search_model`` (``openai:URL#MODEL`` or a checkpoint spec: the world model that plays the web);
``judge``: the LLM the official evaluator asks to align key values and column names and to grade
``llm_judge`` columns, resolved like the other benchmarks' judges (``openai:URL#MODEL`` or a local
checkpoint served on loopback; default ``$WIDESEARCH_JUDGE``, else ``embedded``; ``none`` turns
it off: exact fallbacks, which a ``--model gold`` check needs, see :class:`WideSearchConfig`); ``judge_max_tokens`` (default 1024); ``checkout`` (default
``$WIDESEARCH_ROOT``): a clone of github.com/ByteDance-Seed/WideSearch whose judge and agent
prompts are then used (:mod:`.official`); ``instances``.

Score of an episode: F1 by item of the final answer's table (the study's headline); details
hold F1 by row, precision/recall and success, the judge and where its prompts came from.
Aggregate (the official ``run_infer_and_eval_batching.py`` summary): for every metric, the
per-instance mean, max and min over the N runs, then the mean over instances (``avg_n``,
``max_n``, ``min_n``); headline ``score`` = F1 by item Avg@N, ``pass_at_n`` = success Max@N (an
instance counts when any run succeeds). Every result says which search backend ran
(``search_backend``: ``real``, ``local_corpus``, ``simulated`` or ``none``), and the aggregate lists what
separates the run from the published protocol (``comparable``, ``not_comparable_because``).
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from unified.benchmarks import bounded
from unified.benchmarks.contract import Adapter, BenchmarkUnavailable, Environment, PaperReference, RunContext, Task
from unified.benchmarks.helpers import config_list, judge_reason, limit_runnable
from unified.benchmarks import resolve_endpoint
from unified.types import Episode, EpisodeResult, Message, Observation, ToolCall, ToolSpec

from evaluators.widesearch.metrics import evaluate_table
from evaluators.widesearch.official import OfficialPrompts, load_official_prompts
from evaluators.widesearch.search import SearchBackend, SearchUnavailable, make_backend

__all__ = ["WideSearchAdapter", "aggregate_widesearch", "load_widesearch"]

OFFICIAL_JUDGES = ("gpt-4.1-2025-04-14",)
"""The model of the official evaluator's ``default_eval_config`` (``src/utils/config.py``)."""
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
    """The official summary over runs (see the module docstring), with the comparability labels."""
    scored = [r for r in results if r.skipped is None and r.error is None]
    by_task: dict[str, list[dict[str, float]]] = {}
    for r in scored:
        by_task.setdefault(r.task_id, []).append({m: float(r.details.get(m, 0.0)) for m in METRICS})
    summary: dict[str, Any] = {}
    for m in METRICS:
        if by_task:
            summary[m] = {stat: 100 * statistics.fmean(fn(t[m] for t in runs) for runs in by_task.values())
                          for stat, fn in (("avg_n", statistics.fmean), ("max_n", max), ("min_n", min))}
    labels = sorted({str(r.details.get("search_backend")) for r in scored if r.details.get("search_backend")})
    judges = sorted({str(r.details.get("judge")) for r in scored if r.details.get("judge")})
    prompt_sources = sorted({str(r.details.get("judge_prompts")) for r in scored if r.details.get("judge_prompts")})
    runs = sorted({len(v) for v in by_task.values()})
    reasons = []
    if "simulated" in labels:
        reasons.append("simulated search (a world model plays the web)")
    if "local_corpus" in labels:
        reasons.append("local corpus search instead of the live web")
    if "none" in labels:
        reasons.append("no search backend (a replay of the reference answers, which makes no search calls)")
    if any(j.startswith("none") for j in judges):
        reasons.append("no judge: key aliases not matched, llm_judge columns compared exactly")
    reasons += [r for j in judges if not j.startswith("none") and (r := judge_reason(j, OFFICIAL_JUDGES))]
    if any(p.startswith("own wording") for p in prompt_sources):
        reasons.append("judge prompts are not the official ones (no WideSearch checkout)")
    # skipped/errored instances and missing runs are added by the report (unified.eval.report)
    errored = [r for r in results if r.skipped is None and r.error is not None]
    get = lambda m, stat: summary.get(m, {}).get(stat, 0.0)  # noqa: E731
    return {"score": get("f1_by_item", "avg_n"), "metric": "F1 by item (%), Avg@N",
            "f1_by_row": get("f1_by_row", "avg_n"), "success_rate": get("score", "avg_n"),
            "pass_at_n": get("score", "max_n"), "f1_by_item_max_at_n": get("f1_by_item", "max_n"),
            "f1_by_item_min_at_n": get("f1_by_item", "min_n"), "metrics": summary, "runs": runs[0] if runs else 0,
            "n_instances": len(by_task), "skipped": len(results) - len(scored) - len(errored),
            "errored": len(errored), "search_backends": labels, "simulated": "simulated" in labels,
            "judges": judges, "judge_prompts": prompt_sources,
            "comparable": not reasons, "not_comparable_because": reasons}


class WideSearchEnvironment(Environment):
    def __init__(self, task: dict[str, Any], backend_factory, system_prompt: str = SYSTEM_PROMPT) -> None:
        super().__init__()
        self.task, self.backend_factory = task, backend_factory
        self.backend: SearchBackend | None = None
        self.tools = [SEARCH, OPEN_PAGE]
        self.system_prompt = system_prompt
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

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
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


@dataclass
class WideSearchConfig:
    """Settings of the WideSearch adapter (``--set benchmarks.widesearch.KEY=VALUE``; module docstring).

    A gold check (``--model gold``, the reference tables as answers) needs ``judge=none``: the official
    evaluator asks its judge about every cell of an ``llm_judge`` column and aligns keys with it,
    equal cells too, so a small or default (``embedded``) judge marks some gold cells wrong (the
    gold scored 83.3 with it in one such check). ``judge=none`` compares those columns exactly.
    """

    data: str | None = None
    """The dataset: a directory, a JSONL file or a hub id (None: ``$WIDESEARCH_DATA``, else the fixtures)."""
    search: Literal["auto", "bing", "corpus", "simulated"] | None = None
    """The search backend (None: ``$WIDESEARCH_SEARCH``, else ``auto``: a corpus next to the data, else
    bing with a key, else simulated when ``search_model`` is set)."""
    corpus: str | None = None
    """A local corpus file for ``search=corpus``."""
    search_model: str | None = None
    """The world model that plays the web for ``search=simulated`` (``openai:URL#MODEL`` or a checkpoint spec)."""
    judge: str | None = None
    """The official evaluator's LLM (None: ``$WIDESEARCH_JUDGE``, else ``embedded``; ``none``: exact fallbacks)."""
    judge_max_tokens: int = bounded(1024, ge=1)
    """Answer budget of the judge."""
    checkout: str | None = None
    """A clone of ByteDance-Seed/WideSearch whose prompts are used (None: ``$WIDESEARCH_ROOT``)."""
    instances: list[str] | str | None = None
    """Only these instance ids (a list or comma-separated; None: all)."""

    def __post_init__(self) -> None:
        self.instances = config_list(self.instances)


class WideSearchAdapter(Adapter):
    """WideSearch (F1 by item headline, F1 by row too)."""

    name = "widesearch"
    suites = ("in_domain",)
    suite_position = 4
    world_model_domain = "search"
    paper_reference = PaperReference("WideSearch, F1 by item", 33.38, 46.17)
    runs_default = 1
    Config = WideSearchConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.search = str(self.settings.search or os.environ.get("WIDESEARCH_SEARCH") or "auto")
        """The search backend asked for (the setting, else the environment's, else auto)."""
        self.judge_spec = str(self.settings.judge or os.environ.get("WIDESEARCH_JUDGE") or "embedded")
        self._judge = None
        self._judge_name = ""
        self._prompts: OfficialPrompts | None = None

    @property
    def prompts(self) -> OfficialPrompts:
        if self._prompts is None:
            self._prompts = load_official_prompts(self.settings.checkout)
        return self._prompts

    def _search_choice(self, corpus: Path | None) -> tuple[str, dict[str, Any]]:
        corpus_path = self.settings.corpus or (str(corpus) if corpus else None)
        name = self.search
        if name == "auto":
            name = ("corpus" if corpus_path else "bing" if os.environ.get("BingSearch_APIKEY")
                    else "simulated" if self.settings.search_model else "")
        if not name:
            raise SearchUnavailable("no search backend: set $BingSearch_APIKEY, or --set benchmarks.widesearch."
                                    "search=simulated with search_model=..., or give a corpus")
        return name, {"corpus": corpus_path, "model": self.settings.search_model}

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        rows, broken, corpus = load_widesearch(_source(self.settings.data))
        try:
            self.prompts
        except (OSError, ValueError) as exc:
            raise BenchmarkUnavailable(f"WideSearch checkout unusable: {exc}", "fix checkout/$WIDESEARCH_ROOT") from None
        try:
            name, options = self._search_choice(corpus)
            if name == "corpus":
                make_backend(name, **options)  # validate the corpus now
            elif name == "bing":
                make_backend(name)
            skip = None
        except (SearchUnavailable, ValueError) as exc:
            name, options, skip = "", {}, str(exc)
            if self.replay is not None and self.search == "auto":  # --model gold makes no search calls
                name, skip = "none", None
        out = []
        for row in rows:
            if self.settings.instances and row["instance_id"] not in self.settings.instances:
                continue
            if split not in (None, "", "all") and split != row["language"]:
                continue
            out.append(Task(id=row["instance_id"], benchmark=self.name, split=row["language"],
                            payload={**row, "search": name, "search_options": options}, skip_reason=skip))
        out += [Task(id=iid, benchmark=self.name, split="unparseable", skip_reason=err) for iid, err in broken]
        return limit_runnable(out, limit)

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        payload = task.payload
        system = self.prompts.system.get("zh" if payload.get("language") == "zh" else "en", SYSTEM_PROMPT)
        return WideSearchEnvironment(payload, lambda: make_backend(payload["search"], **payload["search_options"]),
                                     system_prompt=system)

    def _judge_fn(self):
        """The judge as ``prompt -> text`` (None when ``judge=none``), resolved once, like the other judges."""
        if self.judge_spec.lower() == "none":
            self._judge_name = "none (exact-match fallbacks)"
            return None
        if self._judge is None:
            endpoint = resolve_endpoint(self.judge_spec)
            client = endpoint.client
            self._judge_name = endpoint.describe()
            self._judge = lambda prompt: client.chat([{"role": "user", "content": prompt}], temperature=0.0,
                                                     max_tokens=self.settings.judge_max_tokens).text
        return self._judge

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        payload = task.payload
        answer = next((m.content for m in reversed(episode.messages) if m.role == "assistant" and m.content), "")
        judge = self._judge_fn()
        result = evaluate_table(answer, gold_table(payload["gold_csv"], payload["evaluation"]), payload["evaluation"],
                                judge=judge, prompts=self.prompts.judge)
        details = result.to_dict()
        details.update({"search_backend": env.metadata.get("search_backend"),
                        "judge": self.judge_spec if judge is not None else "none (exact-match fallbacks)",
                        "judge_endpoint": self._judge_name, "judge_prompts": self.prompts.describe()})
        return EpisodeResult(self.name, task.id, episode.trial, result.f1_by_item, passed=result.score == 1.0,
                             details=details)

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        return aggregate_widesearch(results)

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        return [[]]

    def gold_answer(self, task: Task) -> str | None:
        table = gold_table(task.payload["gold_csv"], task.payload["evaluation"])
        header = "| " + " | ".join(table.columns) + " |"
        lines = [header, "|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |"
                  for row in table.itertuples(index=False)]
        return "```markdown\n" + "\n".join(lines) + "\n```"
