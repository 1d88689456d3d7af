"""Finding benchmark adapters: entry points, suites, the facts a class declares.

The contract itself (Task, Environment, Adapter, ...) lives in :mod:`unified.benchmarks.contract`;
``docs/adapters.md`` shows a whole outside adapter package.

``load_adapter(name, **config)`` finds an adapter by name; an unknown name is an error that
lists the registered ones ("did you mean ...?"). A name registered by entry point whose
module is not there yet raises :class:`BenchmarkUnavailable` ("not yet available").

Suites are what the installed adapters declare (``Adapter.suites``): ``--suite NAME`` runs
every adapter registered in the ``unified.benchmarks`` entry-point group whose class declares
NAME, ordered by ``suite_position`` then name. ``all`` is the study's agent suites together
(:data:`STUDY_SUITES`: ``in_domain`` then ``ood``), outside adapters that declare one of them
included; a suite under a new name is run only when asked for by name. Nothing here names a
benchmark.

**One name per benchmark.** A ``--benchmarks`` item is a registered name or ``module:Class`` (a class no entry
point names yet); the latter is known everywhere by its class's ``name`` (:func:`benchmark_name`): its settings
(``benchmarks.NAME``), its plan and summary entry and its ``RUN/NAME/`` directory. Which code a name stands for
is not global state: :func:`adapter_paths` maps the names of the items one command line gave to their
``module:Class``, and the callers pass that mapping on (a run directory never decides what code runs).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Iterable

from unified.config import ConfigError, from_dict
from unified.benchmarks.contract import ENTRY_POINT_GROUP, Adapter, BenchmarkUnavailable
from unified.benchmarks.failures import import_failure
from unified.registry import UnknownNameError

STUDY_SUITES = ("in_domain", "ood")
"""The agent suites of the study (Qwen-AgentWorld report, Paradigm II), in its table's order."""
ALL_SUITE = "all"
"""``--suite all``: every adapter declaring one of :data:`STUDY_SUITES`."""


def registered_benchmarks() -> dict[str, importlib.metadata.EntryPoint]:
    """Entry points of the ``unified.benchmarks`` group, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def adapter_class(name: str) -> type:
    """The factory registered as ``name`` (normally the Adapter class), without constructing it.

    Raises UnknownNameError for a name nobody registered, BenchmarkUnavailable when its module
    (or a package it needs, or a name of the adapter SDK) is missing, naming the import
    (:func:`unified.benchmarks.failures.import_failure`), or its module raises on import."""
    eps = registered_benchmarks()
    if name not in eps:
        raise UnknownNameError("benchmark", name, list(eps))
    ep = eps[name]
    module_name = ep.value.split(":", 1)[0].strip()
    try:
        return ep.load()
    except ImportError as exc:  # a missing package, or a name of another adapter SDK version: named
        raise import_failure(exc, module_name) from None
    except AttributeError:
        raise BenchmarkUnavailable("not yet available", f"{ep.value!r} does not exist yet") from None
    except Exception as exc:  # an outside package that raises at import: the other benchmarks still run
        raise BenchmarkUnavailable(f"its adapter module {module_name!r} raised {type(exc).__name__} on import: "
                                   f"{exc}", "fix or reinstall the package that provides it") from None


def _class_at(path: str) -> type:
    """The object at ``package.module:Factory`` (an adapter no entry point names, yet)."""
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise import_failure(exc, module_name) from None
    except AttributeError as exc:
        raise BenchmarkUnavailable("not yet available", f"cannot import {path!r}: {exc}") from None


def benchmark_name(item: str) -> str:
    """The one name of a ``--benchmarks`` item: a registered name as is; ``module:Class`` its class's ``name``
    (``unit_converter:UnitConverterAdapter`` -> ``unit_converter``; the class's own name when it sets none).

    An item that does not import keeps its ``module:Class`` text (the run records it as skipped, saying why).
    A class whose ``name`` is an installed benchmark's is that benchmark when it is the same class, else a
    ConfigError (two benchmarks never share a name)."""
    if ":" not in item:
        return item
    try:
        cls = _class_at(item)
    except BenchmarkUnavailable:
        return item
    name = str(getattr(cls, "name", "") or "") or item.partition(":")[2]
    if name in registered_benchmarks():
        try:
            same = adapter_class(name) is cls
        except BenchmarkUnavailable:
            same = False
        if not same:
            raise ConfigError(f"--benchmarks {item}: its name {name!r} is the installed benchmark {name}'s; give "
                              f"the class another `name`")
    return name


def adapter_paths(items: Iterable[str]) -> dict[str, str]:
    """``{name: module:Class}`` of the ``module:Class`` items among ``items`` (comma-separated parts too) that
    import and are not an installed benchmark's class: where :func:`load_adapter` finds the benchmark a name
    stands for. Two items of one command with the same name are a ConfigError naming both."""
    paths: dict[str, str] = {}
    for item in items:
        for part in (p.strip() for p in str(item).split(",")):
            if ":" not in part:
                continue
            name = benchmark_name(part)
            if name == part or name in registered_benchmarks():
                continue
            if paths.setdefault(name, part) != part:
                raise ConfigError(f"--benchmarks {paths[name]} and {part} are both named {name!r}: one name is one "
                                  "benchmark; give one of the classes another `name`")
    return paths


def declared_suites() -> tuple[dict[str, list[str]], dict[str, str]]:
    """(suite -> benchmark names in suite order, name -> why its suites are unknown).

    Reads ``suites`` and ``suite_position`` off every registered adapter class; one whose module
    does not import cannot say which suites it joins and is listed in the second mapping."""
    members: dict[str, list[tuple[int, str]]] = {}
    broken: dict[str, str] = {}
    for name in registered_benchmarks():
        try:
            cls = adapter_class(name)
        except BenchmarkUnavailable as exc:
            broken[name] = str(exc)
            continue
        except Exception as exc:  # an outside package that fails to import: the others still run
            broken[name] = f"{type(exc).__name__}: {exc}"
            continue
        for suite in getattr(cls, "suites", ()) or ():
            members.setdefault(str(suite), []).append((int(getattr(cls, "suite_position", 100)), name))
    suites = {suite: [n for _, n in sorted(rows)] for suite, rows in members.items()}
    suites[ALL_SUITE] = list(dict.fromkeys(n for s in STUDY_SUITES for n in suites.get(s, [])))
    return suites, broken


def suite_members(suite: str) -> list[str]:
    """The benchmarks of ``suite`` (see :func:`declared_suites`); an unknown suite is an error
    listing the declared ones ("did you mean")."""
    suites, _ = declared_suites()
    if suite not in suites or (suite != ALL_SUITE and not suites[suite]):
        raise UnknownNameError("suite", suite, sorted(s for s, names in suites.items() if names or s == ALL_SUITE))
    return suites[suite]


def expand_benchmarks(suite: str | None = None, benchmarks: Iterable[str] | None = None) -> list[str]:
    """Benchmark names from ``--suite`` and/or ``--benchmarks`` (order kept, duplicates dropped)."""
    names: list[str] = []
    if suite:
        names += suite_members(suite)
    items = [part.strip() for item in benchmarks or [] for part in str(item).split(",") if part.strip()]
    adapter_paths(items)  # two classes under one name: refused
    names += [benchmark_name(item) for item in items]
    return list(dict.fromkeys(names))


def benchmark_facts(name: str, path: str | None = None) -> dict[str, Any]:
    """What a summary records about a benchmark from its class: ``suites`` and ``paper_reference``
    (empty when the class cannot be loaded). ``path``: the ``module:Class`` the user's command named it by
    (:func:`adapter_paths`); without it only an installed adapter is looked up."""
    try:
        cls = _class_at(path) if path else adapter_class(name) if ":" not in name else None
    except Exception:
        cls = None
    if cls is None:
        return {"suites": []}
    ref = getattr(cls, "paper_reference", None)
    facts: dict[str, Any] = {"suites": [str(s) for s in getattr(cls, "suites", ()) or ()]}
    if ref is not None:
        facts["paper_reference"] = {"label": ref.label, "sft": ref.sft, "lwm_rl": ref.lwm_rl, "source": ref.source}
    return facts


def world_model_domain(name: str) -> str | None:
    """The AgentWorldBench domain the adapter registered as ``name`` declares (``world_model_domain``),
    or None when it declares none or cannot be loaded here."""
    try:
        cls = adapter_class(name)
    except (BenchmarkUnavailable, UnknownNameError):
        return None
    domain = getattr(cls, "world_model_domain", None)
    return str(domain) if domain else None


def named_benchmark_config(benchmark_config: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``benchmark_config`` with each ``module:Class`` section under its benchmark's one name
    (:func:`benchmark_name`): ``--set benchmarks.unit_converter:UnitConverterAdapter.tolerance=0.05`` is
    ``benchmarks.unit_converter.tolerance``. Both spellings of one benchmark given is a ConfigError."""
    named: dict[str, dict[str, Any]] = {}
    spelled: dict[str, str] = {}
    for key, section in benchmark_config.items():
        name = benchmark_name(key)
        if name in named:
            raise ConfigError(f"benchmarks.{spelled[name]} and benchmarks.{key} are settings of one benchmark, "
                              f"{name}: give them once, as benchmarks.{name}")
        named[name], spelled[name] = section, key
    return named


def check_benchmark_config(benchmark_config: dict[str, dict[str, Any]], paths: dict[str, str] | None = None) -> None:
    """Parse every ``benchmarks.NAME`` section against its adapter's ``Config`` before anything runs:
    an unknown benchmark or key is a ConfigError/UnknownNameError with "did you mean". Sections of
    adapters that cannot be loaded here are left for the run to report as skipped. ``paths``: the
    command's ``module:Class`` benchmarks by name (:func:`adapter_paths`), whose settings their class
    parses when planning constructs it (a bad key is then the same usage error, before ``--out`` is touched)."""
    for name, section in benchmark_config.items():
        if ":" in name or name in (paths or {}):
            continue
        try:
            cls = adapter_class(name)
        except BenchmarkUnavailable:
            continue
        except UnknownNameError as exc:
            raise UnknownNameError(exc.kind, exc.name, exc.valid, where="benchmarks") from None
        config_cls = getattr(cls, "Config", None)
        if config_cls is None:
            continue
        if not isinstance(section, dict):
            raise ConfigError(f"benchmarks.{name}: expected a mapping of settings, got {section!r}")
        from_dict(config_cls, dict(section), where=f"benchmarks.{name}")


def load_adapter(name: str, **config: Any) -> Adapter:
    """The adapter registered as ``name`` (or at the ``module:Class`` path ``name``), constructed with ``config``.

    Raises UnknownNameError (listing valid names) for a name nobody registered, and
    BenchmarkUnavailable when the entry point's module is not installed/written yet.
    """
    if ":" in name:  # "package.module:Factory", an adapter that no entry point names (yet)
        adapter = _class_at(name)(**config)
        if not getattr(adapter, "name", ""):
            adapter.name = name.partition(":")[2]  # type: ignore[misc]
        return adapter
    factory = adapter_class(name)
    adapter = factory(**config)
    if not getattr(adapter, "name", ""):
        adapter.name = name  # type: ignore[misc]
    return adapter
