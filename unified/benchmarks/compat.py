"""The adapter SDK's version, and what an adapter written for an earlier version still gets.

:data:`SDK_VERSION` is the version of the contract ``unified.benchmarks.__all__`` spells out; it
moves with the package version (``unified.__version__``: SDK ``0.2`` is unified ``0.2.x``). A name
that is renamed or removed keeps working for one minor version (the *shim window*): an adapter
written for SDK 0.1 runs on 0.2 with one deprecation line per old name, and the shim goes in
:data:`SHIMS_REMOVED_IN`. After that, a skip says what to change (:func:`removed_module_fix`).

The deprecation line is meant to be seen by whoever runs the eval, so it is not a plain
``DeprecationWarning`` (Python's default filters and this project's pytest settings hide those):
:func:`warn_deprecated` issues an :class:`SDKDeprecationWarning` (a ``FutureWarning``, shown by
default; ``-W error::FutureWarning`` turns every use into an error for an author porting an
adapter) once per process and note, and prints the line on stderr itself when a filter swallowed it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

SDK_VERSION = "0.2"
"""The adapter contract's version (major.minor of ``unified.__version__``)."""
SHIMS_REMOVED_IN = "0.3"
"""The SDK version in which the shims for SDK 0.1 names are removed (one minor version later)."""


class SDKDeprecationWarning(FutureWarning):
    """An adapter uses a name of an earlier adapter SDK; the message says what replaces it.

    A ``FutureWarning`` so that the default filters show it: the person running an eval is told,
    not only the adapter's author."""


_warned: set[str] = set()
"""The notes this process has given (each is given once)."""
_lock = threading.Lock()
_UNIFIED = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIPPED_FILES = (os.path.join(_UNIFIED, "contracts.py"), os.path.join(_UNIFIED, "eval", "aggregate.py"),
                  os.path.join(_UNIFIED, "eval", "adapter.py"), dataclasses.__file__)
"""The shims and ``dataclasses`` (``replace``): a note points past them, at the adapter's line."""


def _caller() -> tuple[str, int, str]:
    """(file, line, module) of the first frame outside this SDK package, its shims, ``dataclasses``
    and the import machinery: the adapter's line that used the old name."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        machinery = filename.startswith("<frozen") or ("importlib" in filename and "_bootstrap" in filename)
        if not machinery and not filename.startswith(here) and filename not in _SKIPPED_FILES:
            return filename, frame.f_lineno, str(frame.f_globals.get("__name__", ""))
        frame = frame.f_back
    return "<unknown>", 0, ""


def warn_deprecated(note: str, where: tuple[str, int] | None = None) -> None:
    """Give ``note`` once per process: an :class:`SDKDeprecationWarning` at the adapter's line (``where``,
    else the first caller outside the SDK), and, when a warnings filter swallowed it, the same line on
    stderr (``deprecated: FILE:LINE: note``)."""
    with _lock:  # adapters are called on worker threads; catch_warnings is process-wide state
        if note in _warned:
            return
        _warned.add(note)
        filename, lineno, module = (*where, "") if where else _caller()
        with warnings.catch_warnings(record=True) as caught:  # the filters decide; nothing is shown yet
            warnings.warn_explicit(note, SDKDeprecationWarning, filename, lineno, module, registry={})
        if caught:  # the filters let it through: hand it to whoever shows warnings now (pytest records it)
            warnings._showwarnmsg(caught[0])  # type: ignore[attr-defined]  # stdlib's dispatch, since 3.6
        else:
            print(f"deprecated: {filename}:{lineno}: {note}", file=sys.stderr)


@dataclass(frozen=True)
class MovedModule:
    """A module of an earlier SDK whose names now live elsewhere."""

    old: str
    """Its import path, e.g. ``unified.contracts``."""
    new: str
    """Where its names are now, e.g. ``unified.benchmarks``."""
    since: str
    """The SDK version that moved it."""

    def note(self) -> str:
        return (f"{self.old} moved to {self.new} in adapter SDK {self.since}; the shim is removed in SDK "
                f"{SHIMS_REMOVED_IN}: change `from {self.old} import ...` to `from {self.new} import ...` "
                "(the names are the same)")


MOVED_MODULES: dict[str, MovedModule] = {m.old: m for m in (
    MovedModule("unified.contracts", "unified.benchmarks", "0.2"),
    MovedModule("unified.eval.aggregate", "unified.benchmarks", "0.2"),
    MovedModule("unified.eval.adapter", "unified.benchmarks", "0.2"),
)}
"""Modules of SDK 0.1 (the contract ``docs/adapters.md`` documented before 0.2), by old path."""


def warn_moved_module(old: str) -> None:
    """Called by the shim module ``old`` when it is imported."""
    warn_deprecated(MOVED_MODULES[old].note())


def removed_module_fix(module: str) -> str | None:
    """What to change for an import of ``module`` (or a submodule of it) that is no longer there, or
    None when it is not a module an earlier SDK had."""
    for old, moved in MOVED_MODULES.items():
        if module == old or module.startswith(old + "."):
            return f"change `from {old} import ...` to `from {moved.new} import ...` (moved in SDK {moved.since})"
    return None


RENAMED_NAMES: dict[str, str] = {
    "AgentLimits.max_steps_per_user_turn": "AgentLimits.max_steps_per_turn",
    "AgentLimits.max_completion_tokens": "AgentLimits.max_episode_tokens",
    "StopReason.MAX_TOKENS": "StopReason.MAX_EPISODE_TOKENS",
    "StopReason.MAX_STEPS_PER_USER_TURN": "StopReason.MAX_STEPS_PER_TURN",
    "Adapter.work_dir": "the `run: RunContext` keyword of open/aggregate (run.work_dir)",
    "Adapter.runs_requested": "the `run: RunContext` keyword of open/aggregate (run.runs, run.trials(self))",
}
"""Names of SDK 0.1 inside a class, and today's (shimmed until :data:`SHIMS_REMOVED_IN`)."""


def renamed_note(old: str, new: str, since: str = "0.2") -> str:
    return (f"{old} is now {new} (adapter SDK {since}; the old name is removed in SDK {SHIMS_REMOVED_IN}): "
            f"rename it in the adapter")


def accept_renamed_fields(cls: type) -> type:
    """Let a dataclass be built and read with the old field names of its ``RENAMED`` table (old ->
    new), for the shim window: ``AgentLimits(max_steps_per_user_turn=3)``, ``limits.max_steps_per_user_turn``
    and ``dataclasses.replace(limits, max_steps_per_user_turn=3)`` work with a deprecation line. Any
    other unknown keyword is a TypeError naming it, the fields, and the closest field."""
    renamed: dict[str, str] = dict(getattr(cls, "RENAMED", {}))
    fields = [f.name for f in dataclasses.fields(cls)]
    generated = cls.__init__

    @functools.wraps(generated)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from_replace = sys._getframe(1).f_code.co_filename == dataclasses.__file__
        for key in [k for k in kwargs if k not in fields]:
            if key not in renamed:
                import difflib

                close = difflib.get_close_matches(key, fields + list(renamed), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"{cls.__name__} has no field {key!r} (its fields: {', '.join(fields)}){hint}")
            new = renamed[key]
            if new in kwargs and not from_replace:  # replace() passes every current field besides the change
                raise TypeError(f"{cls.__name__}: both {key!r} (its old name) and {new!r} are given; keep {new!r}")
            warn_deprecated(renamed_note(f"{cls.__name__}.{key}", f"{cls.__name__}.{new}"))
            kwargs[new] = kwargs.pop(key)
        generated(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    for old, new in renamed.items():
        setattr(cls, old, _renamed_property(cls.__name__, old, new))
    return cls


def _renamed_property(owner: str, old: str, new: str) -> property:
    def get(self: Any) -> Any:
        warn_deprecated(renamed_note(f"{owner}.{old}", f"{owner}.{new}"))
        return getattr(self, new)

    def set_(self: Any, value: Any) -> None:
        warn_deprecated(renamed_note(f"{owner}.{old}", f"{owner}.{new}"))
        setattr(self, new, value)

    return property(get, set_, doc=f"Deprecated: the old name of ``{new}``.")


def renamed_members_meta(base: type) -> type:
    """An enum metaclass (subclass of ``base``) under which ``Enum.OLD_NAME`` answers the member named
    in the class's ``_RENAMED_MEMBERS`` table (old name -> new name), with a deprecation line."""

    class RenamedMembers(base):  # type: ignore[misc, valid-type]
        def __getattr__(cls, name: str) -> Any:
            table = cls.__dict__.get("_RENAMED_MEMBERS_TABLE") or {}
            if name in table:
                warn_deprecated(renamed_note(f"{cls.__name__}.{name}", f"{cls.__name__}.{table[name]}"))
                return cls[table[name]]
            raise AttributeError(name)

    return RenamedMembers


def signature_takes(bound: Callable[..., Any], keyword: str) -> bool:
    """Whether ``bound`` accepts ``keyword`` (by name or ``**kwargs``); a callable without a readable
    signature is taken to (the current contract)."""
    import inspect

    try:
        params = inspect.signature(bound).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == keyword or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
