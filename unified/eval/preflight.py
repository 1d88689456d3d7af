"""Checks of an eval command that need nothing loaded, run before anything loads; and ``--list``.

:func:`check_names` parses the model spec (a local path must exist; ``--model embeded`` says
"did you mean 'embedded'") and the prompting module's name, so a typo is one line at once, not a
traceback after the benchmarks' data and the model have loaded. :func:`listing` is the text of
``python -m unified.eval --list``: the installed benchmarks with their suites and what each needs
(each adapter is asked for one task: "ready here", or its unavailability reason and fix), the
suites, and the prompting modules.
"""

from __future__ import annotations

from typing import Any

from unified.registry import UnknownNameError


class PreflightError(ValueError):
    """A setting of the command that cannot run (one line, naming the flag)."""


def check_names(cfg: Any) -> None:
    """Raise :class:`PreflightError` for a model spec or prompting name that cannot run."""
    from unified.agent.prompting import prompting_names
    from unified.inference.spec import parse_spec

    try:
        parse_spec(cfg.model, backend=None if cfg.backend in (None, "auto") else cfg.backend)
    except (ValueError, FileNotFoundError, UnknownNameError) as exc:  # SpecError, CheckpointNotFoundError
        raise PreflightError(f"--model {cfg.model}: {exc}") from None
    names = prompting_names()
    if cfg.prompting not in names:
        raise PreflightError(f"--prompting: {UnknownNameError('prompting module', cfg.prompting, names)}")


def _availability(name: str) -> str:
    """``ready here`` when the adapter lists a task, else what it needs (its
    :class:`~unified.benchmarks.contract.BenchmarkUnavailable` reason and fix)."""
    from unified.benchmarks.contract import BenchmarkUnavailable
    from unified.benchmarks.discovery import load_adapter

    try:
        tasks = load_adapter(name).tasks(None, 1)
    except BenchmarkUnavailable as exc:
        return f"needs: {exc.how_to_fix} ({exc.reason})"
    except Exception as exc:  # an adapter that fails to list: said, not raised (this is a listing)
        return f"fails to list its tasks here: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "ready here" if tasks else "ready here, but lists no task"


def listing() -> str:
    """The text of ``--list``."""
    from unified.agent.prompting import prompting_names
    from unified.benchmarks.discovery import ALL_SUITE, STUDY_SUITES, adapter_class, declared_suites, \
        registered_benchmarks
    from unified.eval.general import DEFAULT_TASKS, GENERAL_SUITE

    lines = ["benchmarks (python -m unified.eval --benchmarks NAME; settings: --set benchmarks.NAME.KEY=VALUE):"]
    for name in sorted(registered_benchmarks()):
        try:
            cls = adapter_class(name)
        except Exception as exc:  # an installed adapter that does not import here
            lines.append(f"  {name:18s} (does not load here: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
            continue
        suites = ",".join(getattr(cls, "suites", ()) or ()) or "-"
        runs = getattr(cls, "runs_default", 1)
        lines.append(f"  {name:18s} suites: {suites:9s} runs: {runs}  {_availability(name)}")
    suites, _ = declared_suites()
    lines.append("suites (--suite NAME, several comma-separated):")
    for suite in sorted(suites):
        if suite != ALL_SUITE:
            lines.append(f"  {suite:18s} {', '.join(suites[suite])}")
    lines.append(f"  {ALL_SUITE:18s} {' + '.join(STUDY_SUITES)}")
    lines.append(f"  {GENERAL_SUITE:18s} lm-evaluation-harness tasks (default {', '.join(DEFAULT_TASKS)}; "
                 "--set general.tasks=...)")
    lines.append("prompting modules (--prompting NAME):")
    lines.append("  " + ", ".join(prompting_names()))
    lines.append("world-model eval: python -m unified.eval lwm --help")
    return "\n".join(lines)
