"""What went wrong in an adapter, said so its author knows what to change.

- :func:`check_tools`: an environment's ``tools`` are :class:`unified.types.ToolSpec` objects with a
  name, a description and a JSON-serialisable object schema, no name twice; else a
  :class:`ToolSpecError` naming the benchmark, the task and the tool (the agent loop calls it when an
  environment opens and after each user turn, so a plain dict never reaches the chat template).
- :func:`import_failure`: an ``ImportError`` from an adapter (at import, in ``tasks``, ``open`` ...)
  as a :class:`BenchmarkUnavailable` naming the missing import and what to do: ``pip install`` a
  missing package, or, for a name of another adapter SDK version, the name to use instead.
- :func:`check_details`: an ``EpisodeResult.details`` value JSON cannot hold (an object, a set, bytes ...) is
  recorded as its ``str()`` with a :class:`DetailsNotJSONWarning` naming the benchmark, the task, the key and
  the type (once per benchmark, key and type), never silently as ``<object at 0x...>``.
- :func:`classify_adapter_error`: any exception from an adapter call as an :class:`AdapterFailure`,
  a recorded ``skipped`` (the benchmark cannot run here: unavailable, an import missing) or
  ``error`` (the adapter is wrong), for a runner that contains every adapter call per benchmark.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
import threading
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Literal

from unified.benchmarks.compat import SDK_VERSION, removed_module_fix
from unified.benchmarks.contract import BenchmarkUnavailable
from unified.types import EpisodeResult, ToolSpec

SDK_DOCS = "docs/adapters.md"
OBJECT_TYPES = ("object", "dict")
"""A tool's parameters schema type: JSON schema's ``object``, or ``dict`` as BFCL's function docs write it."""


class ToolSpecError(TypeError):
    """An environment's tool that is not a well-formed :class:`unified.types.ToolSpec`."""


def _tool_label(index: int, tool: Any) -> str:
    name = getattr(tool, "name", None)
    if isinstance(tool, dict):
        name = tool.get("name") or (tool.get("function") or {}).get("name")
    return f"tool {index}" + (f" ({name!r})" if isinstance(name, str) and name else "")


def check_tools(tools: Any, where: str) -> None:
    """Raise :class:`ToolSpecError` (``where``: e.g. ``"refund_desk: task refund_A100"``) unless
    ``tools`` is a list of :class:`ToolSpec` with distinct non-empty names, text descriptions and an
    object schema (a dict, ``"type": "object"`` (or BFCL's ``"dict"``) when typed, JSON-serialisable) as ``parameters``."""
    how = ("build each tool as unified.types.ToolSpec(name=..., description=..., parameters={JSON schema}) "
           "or ToolSpec.from_function(fn)")
    if not isinstance(tools, (list, tuple)):
        raise ToolSpecError(f"{where}: environment.tools is a {type(tools).__name__}, not a list of ToolSpec; {how}")
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        label = f"{where}: {_tool_label(index, tool)}"
        if not isinstance(tool, ToolSpec):
            raise ToolSpecError(f"{label} is a {type(tool).__name__}, not a unified.types.ToolSpec; {how}")
        if not isinstance(tool.name, str) or not tool.name.strip() or any(c.isspace() for c in tool.name):
            raise ToolSpecError(f"{label}: name must be non-empty text without whitespace, got {tool.name!r}")
        if tool.name in seen:
            raise ToolSpecError(f"{label}: a second tool named {tool.name!r}; tool names must be distinct")
        seen.add(tool.name)
        if not isinstance(tool.description, str):
            raise ToolSpecError(f"{label}: description must be text, got {type(tool.description).__name__}")
        params = tool.parameters
        if not isinstance(params, dict):
            raise ToolSpecError(f"{label}: parameters must be a JSON-schema dict, got {type(params).__name__}")
        if params.get("type", "object") not in OBJECT_TYPES or not isinstance(params.get("properties", {}), dict):
            raise ToolSpecError(f"{label}: parameters must be an object schema ({{'type': 'object', "
                                f"'properties': {{...}}}}), got type {params.get('type')!r}")
        try:
            json.dumps(params)
        except (TypeError, ValueError) as exc:
            raise ToolSpecError(f"{label}: parameters are not JSON-serialisable: {exc}") from None


_CANNOT_IMPORT_NAME = re.compile(r"cannot import name '([^']+)' from '([^']+)'")


def _raised_at(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def import_failure(exc: ImportError, adapter_module: str = "") -> BenchmarkUnavailable:
    """``exc`` (raised importing, or inside a call of, the adapter whose module is ``adapter_module``)
    as the skip it is, naming the missing import and what to change."""
    at = _raised_at(exc)
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        missing = exc.name
        if adapter_module and (adapter_module == missing or adapter_module.startswith(missing + ".")):
            return BenchmarkUnavailable("not yet available", f"its adapter module {adapter_module!r} is not in "
                                                             "this installation")
        fix = removed_module_fix(missing)
        if fix:
            return BenchmarkUnavailable(f"its adapter imports {missing!r}, which adapter SDK {SDK_VERSION} no "
                                        f"longer has{at}", fix)
        if missing.split(".")[0] == "unified":
            return BenchmarkUnavailable(
                f"its adapter imports {missing!r}, which adapter SDK {SDK_VERSION} does not have{at}",
                f"import the adapter SDK from unified.benchmarks (its __all__, {SDK_DOCS}), or install the unified "
                "version the adapter was written for")
        return BenchmarkUnavailable(f"its adapter needs the missing package {missing!r}{at}",
                                    f"pip install {missing.split('.')[0]}")
    match = _CANNOT_IMPORT_NAME.search(str(exc))
    if match:
        name, module = match.groups()
        if module.split(".")[0] == "unified":
            return BenchmarkUnavailable(f"its adapter imports {name!r} from {module}, which adapter SDK "
                                        f"{SDK_VERSION} does not have{at}", _name_fix(name, module))
        return BenchmarkUnavailable(f"its adapter imports {name!r} from {module}, which the installed {module} "
                                    f"does not have{at}", f"install the version of {module.split('.')[0]} the "
                                                          "adapter was written for")
    return BenchmarkUnavailable(f"its adapter failed to import: {exc}{at}",
                                "install or fix the package it names")


def _name_fix(name: str, module: str) -> str:
    try:
        public = list(getattr(importlib.import_module(module), "__all__", []))
    except Exception:
        public = []
    close = difflib.get_close_matches(name, public, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"{hint}use a name of unified.benchmarks.__all__ (SDK {SDK_VERSION}, {SDK_DOCS}), or install the "
            "unified version the adapter was written for")


@dataclass(frozen=True)
class AdapterFailure:
    """One adapter call that raised, as the runner records it."""

    status: Literal["skipped", "error"]
    """``skipped``: the benchmark cannot run here (a missing import, data, service); ``error``: the
    adapter or its data is wrong."""
    reason: str
    """One line: what failed (naming the call, and the import or tool where that is the cause)."""
    how_to_fix: str = ""
    """What to install, set or change; empty when the reason says it."""
    traceback: str | None = None
    """The traceback of an ``error`` (None for a skip: the reason says it all)."""

    def line(self, benchmark: str) -> str:
        """The one line the runner prints."""
        fix = f" -> {self.how_to_fix}" if self.how_to_fix else ""
        return f"{benchmark}: {self.status}: {self.reason}{fix}"


def classify_adapter_error(exc: Exception, *, call: str, adapter_module: str = "") -> AdapterFailure:
    """``exc``, raised by the adapter call ``call`` (``"import"``, ``"tasks"``, ``"agent_limits"``,
    ``"open"``, ``"score"``, ``"aggregate"``), as a skip or an error:

    - :class:`BenchmarkUnavailable`: skipped, its reason and fix;
    - ``ImportError`` anywhere: skipped, naming the missing import (:func:`import_failure`);
    - anything else (a :class:`ToolSpecError`, a TypeError naming an unknown ``AgentLimits`` field,
      a bug): error, ``"<call>() raised <Type>: <message>"`` with the traceback.
    """
    if isinstance(exc, ImportError):
        exc = import_failure(exc, adapter_module)
    if isinstance(exc, BenchmarkUnavailable):
        return AdapterFailure("skipped", exc.reason if call == "import" else f"{call}(): {exc.reason}",
                              exc.how_to_fix)
    text = f"{type(exc).__name__}: {exc}"
    reason = f"its adapter module {adapter_module!r} raised {text} on import" if call == "import" \
        else f"{call}() raised {text}"
    return AdapterFailure("error", reason, traceback="".join(traceback.format_exception(exc)))


class DetailsNotJSONWarning(RuntimeWarning):
    """An adapter's ``EpisodeResult.details`` held a value JSON cannot hold; it was recorded as its ``str()``."""


_WARNED: set[tuple[str, str, str]] = set()
_WARNED_LOCK = threading.Lock()


def _json_safe(value: Any, path: str, bad: list[tuple[str, str]]) -> Any:
    """``value`` with what JSON cannot hold replaced by its ``str()``; each replaced path and type in ``bad``."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                bad.append((f"{path}[{key!r}]", f"key of type {type(key).__name__}"))
            out[key if isinstance(key, str) else str(key)] = _json_safe(item, f"{path}[{key!r}]", bad)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_safe(item, f"{path}[{i}]", bad) for i, item in enumerate(value)]
    bad.append((path, type(value).__name__))
    return str(value)


def check_details(result: EpisodeResult) -> EpisodeResult:
    """``result`` with JSON-safe ``details``: a value JSON cannot hold is recorded as its ``str()`` and warned
    about (:class:`DetailsNotJSONWarning`, once per benchmark, key path and type, naming the first task)."""
    if not isinstance(result.details, dict):
        bad: list[tuple[str, str]] = [("details", type(result.details).__name__)]
        result.details = {"value": str(result.details)}
    else:
        bad = []
        result.details = _json_safe(result.details, "details", bad)
    for path, kind in bad:
        key = (result.benchmark, path, kind)
        with _WARNED_LOCK:
            if key in _WARNED:
                continue
            _WARNED.add(key)
        warnings.warn(f"{result.benchmark}: task {result.task_id}: EpisodeResult.{path} is a {kind}, which JSON "
                      f"cannot hold: recorded as its str() (return str, int, float, bool, None, list or dict values; "
                      f"{SDK_DOCS})", DetailsNotJSONWarning, stacklevel=2)
    return result
