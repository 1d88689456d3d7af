"""Finding benchmark adapters (entry points, suites) and helpers adapters share.

The contract itself (Task, Environment, Adapter, ...) lives in :mod:`unified.contracts`;
``docs/adapters.md`` shows a whole outside adapter package.

``load_adapter(name, **config)`` finds an adapter by name; an unknown name is an error that
lists the registered ones ("did you mean ...?"). A name registered by entry point whose
module is not there yet raises :class:`BenchmarkUnavailable` ("not yet available").
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Iterable

from unified.contracts import ENTRY_POINT_GROUP, Adapter, BenchmarkUnavailable, Task
from unified.registry import UnknownNameError

SUITES: dict[str, list[str]] = {
    "ood": ["claw_eval", "qwenclawbench", "bfcl_v4"],
    "in_domain": ["terminal_bench_2", "swe_bench_verified", "swe_bench_pro", "widesearch"],
}
"""The suites of the study (Qwen-AgentWorld report, Paradigm II); ``all`` is their union."""
SUITES["all"] = SUITES["in_domain"] + SUITES["ood"]


def config_list(value: Any) -> list[str]:
    """``None``/empty -> []; ``"a, b"`` -> ["a", "b"]; a list -> its items as strings."""
    if not value:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def limit_runnable(tasks: list[Task], limit: int | None) -> list[Task]:
    """The first ``limit`` runnable tasks, with the skipped ones met on the way (reported as skips)."""
    if not limit:
        return tasks
    out, runnable = [], 0
    for task in tasks:
        if runnable >= limit:
            break
        out.append(task)
        runnable += task.skip_reason is None
    return out


def select_task_ids(tasks: list[Task], task_ids: Iterable[str]) -> list[Task]:
    """The tasks whose id is in ``task_ids``, plus every task they depend on (transitively), in the
    benchmark's own order, so a chosen BFCL memory question still gets its memory-writing
    conversations. Ids that name no task here are ignored (they may belong to another benchmark)."""
    by_id = {task.id: task for task in tasks}
    keep: set[str] = set()
    pending = [i for i in task_ids if i in by_id]
    while pending:
        task_id = pending.pop()
        if task_id not in keep:
            keep.add(task_id)
            pending += [d for d in by_id[task_id].depends_on if d in by_id]
    return [task for task in tasks if task.id in keep]


def require_execution_backend(name: str | None):
    """The ``unified.execution`` backend ``name`` (``None``: auto), or BenchmarkUnavailable saying why."""
    from unified.execution import BackendUnavailable, get_backend

    try:
        backend = get_backend(name)
        backend.require()
    except BackendUnavailable as exc:
        raise BenchmarkUnavailable(f"no execution backend: {exc.reason}", exc.how_to_fix) from None
    return backend


# --------------------------------------------------------------------------------------
# discovery


def registered_benchmarks() -> dict[str, importlib.metadata.EntryPoint]:
    """Entry points of the ``unified.benchmarks`` group, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def expand_benchmarks(suite: str | None = None, benchmarks: Iterable[str] | None = None) -> list[str]:
    """Benchmark names from ``--suite`` and/or ``--benchmarks`` (order kept, duplicates dropped)."""
    names: list[str] = []
    if suite:
        if suite not in SUITES:
            raise UnknownNameError("suite", suite, list(SUITES))
        names += SUITES[suite]
    for item in benchmarks or []:
        names += [part.strip() for part in str(item).split(",") if part.strip()]
    return list(dict.fromkeys(names))


def load_adapter(name: str, **config: Any) -> Adapter:
    """The adapter registered as ``name``, constructed with ``config``.

    Raises UnknownNameError (listing valid names) for a name nobody registered, and
    BenchmarkUnavailable when the entry point's module is not installed/written yet.
    """
    if ":" in name:  # "package.module:Factory", an adapter that no entry point names (yet)
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ModuleNotFoundError, AttributeError) as exc:
            raise BenchmarkUnavailable("not yet available", f"cannot import {name!r}: {exc}") from None
        adapter = factory(**config)
        if not getattr(adapter, "name", ""):
            adapter.name = attr  # type: ignore[misc]
        return adapter
    eps = registered_benchmarks()
    if name not in eps:
        known = sorted(set(eps) | set(SUITES["all"]))
        if name in SUITES["all"]:
            raise BenchmarkUnavailable(
                "not registered by any installed package",
                "run `make setup` (or `pip install -e .`) to refresh the entry points in pyproject.toml")
        raise UnknownNameError("benchmark", name, known)
    ep = eps[name]
    module_name = ep.value.split(":", 1)[0].strip()
    try:
        factory = ep.load()
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise BenchmarkUnavailable(
                "not yet available", f"its adapter module {module_name!r} is not in this installation") from None
        raise BenchmarkUnavailable(f"its adapter needs the missing package {missing!r}",
                                   f"pip install {missing.split('.')[0]}") from None
    except AttributeError:
        raise BenchmarkUnavailable("not yet available", f"{ep.value!r} does not exist yet") from None
    adapter = factory(**config)
    if not getattr(adapter, "name", ""):
        adapter.name = name  # type: ignore[misc]
    return adapter
