"""``--suite general``: did the warmup cost general ability? lm-evaluation-harness on the same weights.

The agent suites answer "did the agent scores rise"; this suite answers the other question a
researcher asks after a world-model warmup. It runs lm-evaluation-harness (the ``lm_eval``
package) with *its own* task definitions, prompts, filters, metrics and standard errors; nothing
here re-implements a task or a metric. Only the model object and the bookkeeping are ours:

- the model comes from the same ``--model`` spec the agent suites use, through lm-eval's own
  model classes (:mod:`unified.eval.general_models`): ``HFLM`` wrapping the checkpoint that
  :func:`unified.models.load_checkpoint` loads (our attention/experts kernel choice),
  ``local-completions`` / ``local-chat-completions`` for ``openai:URL#MODEL`` (our local server
  included), lm-eval's ``vllm`` class for ``vllm:PATH`` on a GPU;
- tasks run one at a time, so each has its own status, time and outputs, and a rerun skips the
  tasks already finished with the same settings (resume);
- data is read offline by default (``HF_HUB_OFFLINE=1``: the user's Hugging Face datasets/hub
  cache or local data files); a task whose data is absent is recorded as ``skipped`` with the
  dataset it needs and the command that downloads it, never a crash and never a 0.

Layout under ``--out DIR``::

    DIR/general/results.jsonl              one line per task attempt (TaskRecord), appended
    DIR/general/lm_eval/<task>/<model>/    lm-eval's own results_*.json and samples_<task>_*.jsonl

``summary.json`` gets a ``general`` section and ``summary.md`` / ``--compare`` a table with
lm-eval's standard errors (:mod:`unified.eval.general_report`). How the suite is planned, sharded,
merged and summarised like a benchmark (the ``lm_eval`` part of a run plan) is
:mod:`unified.eval.general_plan`; this module is lm-eval's options, records and run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from unified.config import ConfigError, from_dict
from unified.store import append_jsonl, read_jsonl, repair_tail
from unified.types import ROW_SCHEMA, row_fields

log = logging.getLogger(__name__)

GENERAL_SUITE = "general"
"""The suite name; ``--suite all`` does not include it (a different question), ``--suite general,ood`` does both."""

DEFAULT_TASKS = ["ifeval", "gsm8k", "mmlu", "arc_challenge", "hellaswag"]
"""Instruction following, grade-school math, broad knowledge, science reasoning, commonsense
(reasons in docs/general_suite.md)."""

API_MODELS = ("local-completions", "local-chat-completions")


def _split_list(value: list[str] | str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


@dataclass
class GeneralConfig:
    """``--set general.KEY=VALUE``: lm-eval's own options, by their lm-eval names.

    Unknown keys are errors (the recipe loader is strict).
    """

    tasks: list[str] | str = field(default_factory=lambda: list(DEFAULT_TASKS))
    """lm-eval task, group or tag names (comma-separated on the command line), e.g. ``gsm8k,mmlu``."""
    include_path: list[str] | str = field(default_factory=list)
    """Extra directories of lm-eval task YAMLs (lm-eval's ``--include_path``)."""
    num_fewshot: int | None = None
    """Few-shot examples (lm-eval's ``--num_fewshot``); None = each task's own default."""
    limit: int | float | None = None
    """Examples per task (lm-eval's ``--limit``; < 1 is a fraction). For quick checks only."""
    batch_size: int | str = 1
    """lm-eval's ``--batch_size`` (an int or ``auto``; requests per call for API models)."""
    max_batch_size: int | None = None
    apply_chat_template: bool = False
    """Render prompts with the checkpoint's chat template (lm-eval's ``--apply_chat_template``).
    Off by default, as in lm-eval: the prompts are then the tasks' own text, identical on the
    in-process, HTTP and vLLM paths and untouched by the template's thinking switch (see
    docs/general_suite.md for when to turn it on)."""
    fewshot_as_multiturn: bool = True
    """With the chat template, few-shot examples as turns (lm-eval's ``--fewshot_as_multiturn``)."""
    system_instruction: str | None = None
    gen_kwargs: str | None = None
    """Overrides of the tasks' generation settings, lm-eval syntax: ``max_gen_toks=256,temperature=0``."""
    thinking: bool = False
    """Open a ``<think>`` block in chat prompts (generation tasks only; the answer after ``</think>`` is scored)."""
    bootstrap_iters: int = 100000
    """lm-eval's bootstrap iterations for the standard errors of non-mean metrics (0 = none)."""
    seed: int = 1234
    """lm-eval's random/numpy/torch/few-shot seeds (its ``--seed``)."""
    max_length: int | None = None
    """Context length lm-eval truncates to (None: the model's, or 2048 for API models)."""
    offline: bool = True
    """Read datasets only from local caches/files (sets ``HF_HUB_OFFLINE=1`` and ``HF_DATASETS_OFFLINE=1``)."""
    api_model: str = "local-completions"
    """lm-eval's class for ``openai:`` specs: ``local-completions`` (needs ``/v1/completions``
    with ``echo`` + ``logprobs`` for loglikelihood tasks) or ``local-chat-completions``
    (``/v1/chat/completions``; generation tasks only)."""
    tokenizer: str | None = None
    """Tokenizer of an ``openai:`` model (dir or hub id); default: the server's own
    ``/tokenize`` endpoints when it has them (vLLM, our local server), else the model name."""
    num_concurrent: int = 1
    """Concurrent requests for API models (lm-eval's ``num_concurrent``)."""

    def __post_init__(self) -> None:
        self.tasks = _split_list(self.tasks)
        self.include_path = _split_list(self.include_path)
        if not self.tasks:
            raise ConfigError("general.tasks is empty: name at least one lm-eval task, e.g. --set general.tasks=gsm8k")
        if self.api_model not in API_MODELS:
            raise ConfigError(f"general.api_model: {self.api_model!r} is not one of {', '.join(API_MODELS)}")

    def settings(self) -> dict[str, Any]:
        """What changes a task's numbers (a recorded task is reused only under the same settings)."""
        keys = ("num_fewshot", "limit", "apply_chat_template", "fewshot_as_multiturn", "system_instruction",
                "gen_kwargs", "thinking", "seed", "max_length", "api_model", "bootstrap_iters")
        return {k: getattr(self, k) for k in keys}


def general_with_limit(cfg: GeneralConfig, limit: int | None) -> GeneralConfig:
    """``cfg`` with the run's ``--limit`` as lm-eval's ``limit`` (documents per task) when
    ``general.limit`` is not set itself; ``general.limit`` wins when both are given."""
    if limit is None or cfg.limit is not None:
        return cfg
    from dataclasses import replace

    return replace(cfg, limit=limit)


def split_suites(suite: str | None) -> tuple[list[str], bool]:
    """``--suite general,ood`` -> (``["ood"]``, True): the agent suites and whether ``general`` is asked."""
    names = [p.strip() for p in (suite or "").split(",") if p.strip()]
    return [n for n in names if n != GENERAL_SUITE], GENERAL_SUITE in names


# --------------------------------------------------------------------------------------------
# records


@dataclass
class Metric:
    """One lm-eval metric of one task (``"acc,none"`` -> name ``acc``, filter ``none``)."""

    name: str
    filter: str
    value: float | None
    stderr: float | None
    """lm-eval's standard error of the metric (analytic for means, bootstrap otherwise); None when N/A."""
    higher_is_better: bool | None = None


@dataclass
class TaskRecord:
    """One attempt at one lm-eval task (a line of ``general/results.jsonl``)."""

    task: str
    status: str
    """``ok`` | ``skipped`` (data or dependency absent) | ``error``."""
    model: str
    fingerprint: str
    """Hash of the model spec and :meth:`GeneralConfig.settings` (resume key with ``task``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    """Headline metrics of the task (a group's aggregate when the task is a group)."""
    subtasks: dict[str, list[Metric]] = field(default_factory=dict)
    """Per-subtask metrics of a group (mmlu's 57 subjects ...)."""
    n_samples: int | None = None
    """Documents evaluated (after ``limit``), summed over subtasks."""
    seconds: float = 0.0
    """Wall time of lm-eval's evaluation of this task (model load and dataset load excluded)."""
    reason: str = ""
    how_to_fix: str = ""
    outputs: list[str] = field(default_factory=list)
    """lm-eval's own output files, relative to the run directory."""
    finished_at: float = 0.0


class GeneralStore:
    """``DIR/general``: append-only task records (a killed write leaves at most one cut line)."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / GENERAL_SUITE
        self.path = self.dir / "results.jsonl"

    def records(self, *, repair: bool = True) -> list[TaskRecord]:
        """Every record, in order, read strictly (:func:`unified.config.from_dict`): a line that is not a
        task record is a ConfigError naming the file, the line and the field. ``repair``: cut a torn last
        line first (else it is only left unread, as ``--dry-run`` does)."""
        if repair:
            repair_tail(self.path)
        return [from_dict(TaskRecord, row_fields(row, f"{self.path}:{number}"), source=f"{self.path}:{number}")
                for number, row in enumerate(read_jsonl(self.path), 1)]

    def latest(self, fingerprint: str | None = None, *, repair: bool = True) -> dict[str, TaskRecord]:
        """The last record of each task (of ``fingerprint`` only, when given)."""
        return {r.task: r for r in self.records(repair=repair) if fingerprint is None or r.fingerprint == fingerprint}

    def append(self, record: TaskRecord) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path, {"schema": ROW_SCHEMA, **asdict(record)})

    def outputs_dir(self, task: str) -> Path:
        return self.dir / "lm_eval" / task.replace("/", "__")


def fingerprint(model: str, cfg: GeneralConfig) -> str:
    text = json.dumps({"model": model, **cfg.settings()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# lm-eval results -> records


def parse_metrics(block: dict[str, Any], higher: dict[str, bool] | None = None) -> list[Metric]:
    """lm-eval's per-task result dict (``{"acc,none": .5, "acc_stderr,none": .1, ...}``) -> Metrics."""
    out = []
    for key, value in block.items():
        if "," not in key or "_stderr," in key:
            continue
        name, _, filt = key.partition(",")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        stderr = block.get(f"{name}_stderr,{filt}")
        out.append(Metric(name=name, filter=filt, value=float(value),
                          stderr=float(stderr) if isinstance(stderr, (int, float)) else None,
                          higher_is_better=(higher or {}).get(name)))
    return out


def record_from_results(task: str, results: dict[str, Any], base: dict[str, Any]) -> TaskRecord:
    """The record of one finished lm-eval run over ``task`` (a task, group or tag)."""
    per_task = results.get("results", {})
    higher_all = results.get("higher_is_better", {})
    groups = results.get("groups", {})
    if task in groups or (task in per_task and len(per_task) > 1):
        block = groups.get(task) or per_task[task]
        metrics = parse_metrics(block, higher_all.get(task))
        subtasks = {name: parse_metrics(b, higher_all.get(name)) for name, b in per_task.items() if name != task}
    elif task in per_task:
        metrics, subtasks = parse_metrics(per_task[task], higher_all.get(task)), {}
    else:  # a tag: one row per member task, no aggregate of lm-eval's to report
        metrics = []
        subtasks = {name: parse_metrics(b, higher_all.get(name)) for name, b in per_task.items()}
    n_samples = sum(int((v or {}).get("effective", 0)) for v in results.get("n-samples", {}).values()) or None
    return TaskRecord(task=task, status="ok", metrics=metrics, subtasks=subtasks, n_samples=n_samples, **base)


# --------------------------------------------------------------------------------------------
# missing data -> a recorded skip


@dataclass
class DataSource:
    """What a task reads: a hub dataset (``dataset_path``/``dataset_name``) or local files."""

    dataset_path: str
    dataset_name: str | None = None
    data_files: Any = None

    def how_to_fix(self, configs: list[str | None] | None = None) -> str:
        """The command that puts this dataset where ``datasets`` reads it offline.

        ``datasets`` (5.x) in offline mode loads a hub dataset only from its own cache
        (``HF_DATASETS_CACHE``, prepared by an earlier ``load_dataset`` with network), not from
        files ``hf download`` put in the hub cache, so the fix is a ``load_dataset`` run.
        """
        if self.data_files is not None or self.dataset_path in ("json", "csv", "parquet", "text", "arrow"):
            return f"the task reads local files {self.data_files!r} (dataset_kwargs.data_files in its YAML): check the paths"
        from datasets import config as datasets_config

        names = configs if configs is not None else [self.dataset_name]
        path = self.dataset_path
        if len(names) == 1:
            load = f"datasets.load_dataset({path!r}{', ' + repr(names[0]) if names[0] else ''})"
        else:
            load = f"[datasets.load_dataset({path!r}, n) for n in datasets.get_dataset_config_names({path!r})]"
        return (f"on a machine with network and the same HF_HOME, run `python -c \"import datasets; {load}\"` "
                f"(it fills the datasets cache {datasets_config.HF_DATASETS_CACHE}), then rerun the same command")


def data_sources(task_manager: Any, name: str, _seen: set[str] | None = None) -> list[DataSource]:
    """The datasets behind an lm-eval task/group/tag name, read from lm-eval's own task index."""
    seen = _seen if _seen is not None else set()
    if name in seen:
        return []
    seen.add(name)
    entry = task_manager.task_index.get(name)
    if entry is None:
        return []
    cfg = entry.cfg or {}
    out: list[DataSource] = []
    if cfg.get("dataset_path"):
        kwargs = cfg.get("dataset_kwargs") or {}
        out.append(DataSource(str(cfg["dataset_path"]), cfg.get("dataset_name"), kwargs.get("data_files")))
    members = list(cfg["task"]) if isinstance(cfg.get("task"), list) else []
    if getattr(entry.kind, "name", "") == "TAG":  # a tag's entry lists its member tasks
        members += sorted(entry.tags)
    for member in members:
        if isinstance(member, dict) and member.get("dataset_path"):  # an inline task of a group
            kwargs = member.get("dataset_kwargs") or {}
            out.append(DataSource(str(member["dataset_path"]), member.get("dataset_name"), kwargs.get("data_files")))
        member_name = member if isinstance(member, str) else (member or {}).get("task") or (member or {}).get("group")
        if isinstance(member_name, str):
            out += data_sources(task_manager, member_name, seen)
    unique = {(s.dataset_path, s.dataset_name, json.dumps(s.data_files, default=str)): s for s in out}
    return list(unique.values())


_MISSING_DATA_TYPES = ("DatasetNotFoundError", "LocalEntryNotFoundError", "OfflineModeIsEnabled",
                       "EmptyDatasetError", "DataFilesNotFoundError")


def is_missing_data(exc: BaseException) -> bool:
    """True for the errors datasets/huggingface_hub/nltk raise when data is not on this machine."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, FileNotFoundError)) or type(exc).__name__ in _MISSING_DATA_TYPES:
            return True
        if isinstance(exc, LookupError) and "nltk" in str(exc).lower():  # ifeval's punkt_tab
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def missing_data_record(task: str, exc: BaseException, sources: list[DataSource], base: dict[str, Any]) -> TaskRecord:
    first_line = (str(exc).strip().splitlines() or [""])[0][:300]
    if isinstance(exc, LookupError) and "nltk" in str(exc).lower():
        return TaskRecord(task=task, status="skipped", reason=f"NLTK data absent: {first_line}",
                          how_to_fix="where the network is reachable, `python -m nltk.downloader punkt_tab` "
                                     "(or set NLTK_DATA to a directory that has it); then rerun", **base)
    by_path: dict[str, list[DataSource]] = {}
    for source in sources:
        by_path.setdefault(source.dataset_path, []).append(source)
    names = ", ".join(path + (f" ({group[0].dataset_name})" if len(group) == 1 and group[0].dataset_name
                              else f" ({len(group)} configs)" if len(group) > 1 else "")
                      for path, group in by_path.items())
    local = bool(sources) and all(s.data_files is not None for s in sources)
    what = "local data files not found" if local else f"dataset not on this machine: {names or 'see the error'}"
    reason = f"{what} [{type(exc).__name__}: {first_line}]"
    fix = "; ".join(group[0].how_to_fix([g.dataset_name for g in group]) for group in by_path.values())
    fix = fix or "download the task's dataset"
    return TaskRecord(task=task, status="skipped", reason=reason, how_to_fix=fix, **base)


class offline_datasets:
    """Context manager: datasets/hub read only local caches (env and the already-imported constants)."""

    _KEYS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> "offline_datasets":
        if not self.enabled:
            return self
        for key in self._KEYS:
            self.saved.append((os.environ, key, os.environ.get(key)))
            os.environ[key] = "1"
        import datasets.config
        import huggingface_hub.constants

        for module, attr in ((datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"),
                             (huggingface_hub.constants, "HF_HUB_OFFLINE")):
            if hasattr(module, attr):
                self.saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, True)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for target, key, value in reversed(self.saved):
            if target is os.environ:
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            else:
                setattr(target, key, value)
        self.saved.clear()


# --------------------------------------------------------------------------------------------
# the run


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=4)
def _task_manager(include_path: tuple[str, ...]) -> Any:
    """lm-eval's TaskManager (its index of ~10k task YAMLs takes seconds to build: once per process)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(include_path) or None)


def _unknown_tasks(task_manager: Any, names: list[str]) -> list[str]:
    return [n for n in names if n not in task_manager.task_index and not Path(n).is_file()]


def run_general(cfg: GeneralConfig, model: str, out: str | os.PathLike[str], *, backend: str | None = None,
                loaded: Any = None, lm: Any = None) -> dict[str, dict[str, Any]]:
    """Run (or resume) every task of ``cfg.tasks`` on ``model``; returns ``{task: summary entry}``.

    ``loaded`` reuses a :class:`unified.models.LoadedCheckpoint` already in memory (the agent
    suites' policy); ``lm`` is an lm-eval ``LM`` the caller built (then ``model`` only names it).
    """
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker

    from unified.eval.general_models import check_options
    from unified.registry import UnknownNameError

    check_options(model, cfg, backend)
    store = GeneralStore(out)
    fp = fingerprint(model, cfg)
    base = {"model": model, "fingerprint": fp, "settings": cfg.settings()}
    task_manager = _task_manager(tuple(cfg.include_path))
    unknown = _unknown_tasks(task_manager, cfg.tasks)
    if unknown:
        raise UnknownNameError("lm-eval task", unknown[0], task_manager.all_tasks)
    done = {t: r for t, r in store.latest(fp).items() if r.status == "ok"}
    todo = [t for t in cfg.tasks if t not in done]
    if done:
        _log(f"general: {len(done)} task(s) already recorded with these settings: {', '.join(sorted(done))}")
    holder: dict[str, Any] = {"lm": lm}
    for task in todo:
        with offline_datasets(cfg.offline):
            try:
                loaded_tasks = task_manager.load([task])
            except Exception as exc:  # data absent (recorded skip) or a task that cannot be built (recorded error)
                record = _load_failure(task, exc, task_manager, base)
                store.append(record)
                _log(f"general: {task}: {record.status}: {record.reason}" +
                     (f" -> {record.how_to_fix}" if record.how_to_fix else ""))
                continue
        if holder["lm"] is None:  # the first task with data; the model is not subject to `offline`
            from unified.eval.general_models import make_lm

            _log(f"general: loading {model} for lm-eval ...")
            holder["lm"] = make_lm(model, cfg, backend=backend, loaded=loaded)
        objects = ([loaded_tasks["groups"][task]] if task in loaded_tasks["groups"]
                   else list(loaded_tasks["tasks"].values()))
        tracker = EvaluationTracker(output_path=str(store.outputs_dir(task)))
        _log(f"general: {task}: running ({len(loaded_tasks['tasks'])} lm-eval task(s))")
        started = time.perf_counter()
        with offline_datasets(cfg.offline):
            try:
                results = simple_evaluate(
                    model=holder["lm"], model_args={"pretrained": model},  # names lm-eval's output folder
                    tasks=objects, num_fewshot=cfg.num_fewshot, limit=cfg.limit,
                    batch_size=cfg.batch_size, bootstrap_iters=cfg.bootstrap_iters, log_samples=True,
                    evaluation_tracker=tracker, system_instruction=cfg.system_instruction,
                    apply_chat_template=cfg.apply_chat_template, fewshot_as_multiturn=cfg.fewshot_as_multiturn,
                    gen_kwargs=cfg.gen_kwargs, task_manager=task_manager, random_seed=cfg.seed,
                    numpy_random_seed=cfg.seed, torch_random_seed=cfg.seed, fewshot_random_seed=cfg.seed)
            except Exception as exc:  # one failing task is recorded; the others run
                record = _run_failure(task, exc, task_manager, base, cfg)
                record.seconds = time.perf_counter() - started
                store.append(record)
                _log(f"general: {task}: {record.status}: {record.reason}")
                continue
        seconds = time.perf_counter() - started
        outputs = _save_outputs(tracker, results, store)
        record = record_from_results(task, results, {**base, "seconds": seconds, "outputs": outputs,
                                                    "finished_at": time.time()})
        store.append(record)
        _log(f"general: {task}: done in {seconds:.1f}s: " + ", ".join(
            f"{m.name}={m.value:.4f}" + (f"±{m.stderr:.4f}" if m.stderr is not None else "") for m in record.metrics[:4]))
    return general_entries(store, cfg, model)


def general_entries(store: GeneralStore, cfg: GeneralConfig, model: str) -> dict[str, dict[str, Any]]:
    """Summary entries of the asked tasks, from the records of this model and these settings."""
    latest = store.latest(fingerprint(model, cfg))
    entries = {}
    for task in cfg.tasks:
        record = latest.get(task)
        entries[task] = asdict(record) if record else {"task": task, "status": "not run"}
    return entries


def _load_failure(task: str, exc: BaseException, task_manager: Any, base: dict[str, Any]) -> TaskRecord:
    if is_missing_data(exc):
        return missing_data_record(task, exc, data_sources(task_manager, task), base)
    if isinstance(exc, ImportError):
        module = getattr(exc, "name", None) or str(exc)
        return TaskRecord(task=task, status="skipped", reason=f"a dependency of this lm-eval task is missing: {exc}",
                          how_to_fix=f"pip install {module} (make setup installs the default tasks' dependencies)",
                          **base)
    return TaskRecord(task=task, status="error", reason=f"cannot build the task: {type(exc).__name__}: {exc}",
                      how_to_fix=traceback.format_exc(limit=-3), **base)


def _run_failure(task: str, exc: BaseException, task_manager: Any, base: dict[str, Any],
                 cfg: GeneralConfig) -> TaskRecord:
    if is_missing_data(exc):
        return missing_data_record(task, exc, data_sources(task_manager, task), base)
    if isinstance(exc, NotImplementedError) and "oglikelihood" in str(exc):
        return TaskRecord(task=task, status="skipped", reason=f"the model class cannot score log-likelihoods: {exc}",
                          how_to_fix="use general.api_model=local-completions against a server with /v1/completions "
                                     "(echo + logprobs), e.g. vLLM or python -m unified.inference.server", **base)
    return TaskRecord(task=task, status="error", reason=f"{type(exc).__name__}: {exc}",
                      how_to_fix=traceback.format_exc(limit=-3), **base)


def _save_outputs(tracker: Any, results: dict[str, Any], store: GeneralStore) -> list[str]:
    """lm-eval's own results_*.json and samples_*.jsonl, through its EvaluationTracker (this attempt's only:
    their names carry the tracker's timestamp)."""
    samples = results.pop("samples", None) or {}
    tracker.save_results_aggregated(results=results, samples=samples)
    for name in results.get("configs", {}):
        if name in samples:
            tracker.save_results_samples(task_name=name, samples=samples[name])
    root, stamp = Path(tracker.output_path), getattr(tracker, "date_id", "")
    return sorted(str(p.relative_to(store.run_dir)) for p in root.rglob("*") if p.is_file() and stamp in p.name)
