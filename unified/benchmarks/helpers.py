"""Helpers that benchmark adapters share: config lists, ``--limit`` over runnable tasks, task
selection with dependencies, the execution backend an adapter needs, and the comparability
reason of a judge that is not the benchmark's own, and a temporary directory for a library's
process-wide state."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from unified.benchmarks.contract import BenchmarkUnavailable, Task
from unified.execution import BackendUnavailable, get_backend


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
    try:
        backend = get_backend(name)
        backend.require()
    except BackendUnavailable as exc:
        raise BenchmarkUnavailable(f"no execution backend: {exc.reason}", exc.how_to_fix) from None
    return backend


def judge_reason(spec: str, official_models: Iterable[str], *, role: str = "judge") -> str | None:
    """The ``not_comparable_because`` line naming a judge (or another ``role``: "simulated user",
    "judge (multi_turn)") that is not one the benchmark's own evaluation used, or None when
    ``spec``'s model (``openai:URL#MODEL``: the part after ``#``, without a ``provider/`` prefix,
    case-insensitive) is one of ``official_models``.

    ``embedded`` and local checkpoints are never official; ``none`` (no judge) is the caller's to say.
    """
    def bare(name: str) -> str:
        return name.rsplit("/", 1)[-1].strip().lower()

    spec = str(spec)
    model = spec.rsplit("#", 1)[1] if spec.startswith("openai:") and "#" in spec else ""
    official = [str(m) for m in official_models]
    if model and bare(model) in {bare(m) for m in official}:
        return None
    what = "embedded (the embedded default model)" if spec == "embedded" else spec
    return f"{role}: {what}, not the benchmark's own ({' / '.join(official) or 'a hosted LLM'})"


def process_temp_dir(prefix: str) -> Path:
    """A fresh temporary directory for the rest of this process, removed when it exits (``atexit``):
    for state a library keeps process-wide (bfcl-eval's ``BFCL_PROJECT_ROOT``), so no run leaves
    a directory behind in ``/tmp``."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
