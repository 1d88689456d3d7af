"""The library's one dict -> dataclass loader (:func:`from_dict`) and its inverse (:func:`to_dict`),
and the numeric bounds a field declares (:func:`bounded`).

``from_dict`` turns recipes and stored records (``unified.types.Record.from_dict``) into typed
dataclasses, strictly: an unknown key, a value of the wrong type or out of bounds is a
:class:`~unified.config.errors.ConfigError` that names the file, the line and the field.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from unified.config.deprecations import apply_renames, apply_upgrade
from unified.config.errors import ConfigError, ConfigNameError
from unified.registry import UnknownNameError

C = TypeVar("C")


# --------------------------------------------------------------------------------------
# bounds


def bounded(default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None) -> Any:
    """A dataclass field with numeric bounds (``ge``: >=, ``gt``: >, ``le``: <=), checked whenever a
    recipe, an override or a flag sets it; a float must also be finite. ``None`` passes (optional)."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le)) if v is not None}
    return dataclasses.field(default=default, metadata={"bounds": bounds})


def check_bounds(value: Any, bounds: dict[str, float], where: str) -> None:
    """Raise ConfigError naming ``where`` when ``value`` breaks ``bounds`` (see :func:`bounded`)."""
    if not bounds or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    for name, ok, words in (("ge", lambda b: value >= b, ">="), ("gt", lambda b: value > b, ">"),
                            ("le", lambda b: value <= b, "<=")):
        if name in bounds and not ok(bounds[name]):
            raise ConfigError(f"{where}: expected a value {words} {bounds[name]:g}, got {value!r}")


# --------------------------------------------------------------------------------------
# dict -> dataclass


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str, source: str = "", lines: dict[tuple[str, ...], int] | None = None) -> Any:
    """Check/convert ``value`` to the annotated type ``tp``; raise ConfigError naming ``where``.

    ``source``/``lines`` are passed on to nested dataclasses (their errors name the file)."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option, where, source, lines)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{where}: expected {_describe(tp)}, got {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigNameError("value", str(value), [str(a) for a in args], where=where)
        return value
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item_tp = args[0] if args else Any
        items = [_coerce(v, item_tp, f"{where}[{i}]", source, lines) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        val_tp = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(v, val_tp, f"{where}.{k}", source, lines) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a section (mapping) for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, where=where, lines=lines, source=source)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ConfigNameError("value", str(value), [str(m.value) for m in tp], where=where) from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "yes", "no", "on", "off", "1", "0"}:
            return value.lower() in {"true", "yes", "on", "1"}
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:  # YAML 1.1 reads "3e-4" as a string; accept it as the number it means
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    if tp is Path:
        if not isinstance(value, (str, os.PathLike)):
            raise ConfigError(f"{where}: expected a path, got {value!r}")
        return Path(value)
    return value


def from_dict(cls: type[C], data: dict[str, Any], *, where: str = "", lines: dict[tuple[str, ...], int] | None = None,
              source: str = "") -> C:
    """Build dataclass ``cls`` from ``data``, strictly: unknown keys and bad types are errors.

    The one dict -> dataclass loader: recipes and adapter configs, and the stored records
    (``unified.types.Record.from_dict``). Nested dataclasses, lists and dicts of them, optional
    values, ``Literal`` and enum fields are revived by the annotations; scalars are checked and
    converted (``"3e-4"`` -> 3e-4, ``"true"`` -> True); bounds of :func:`bounded` fields are
    checked. Errors are :class:`ConfigError` (``ValueError``); an unknown key or value is a
    :class:`ConfigNameError` that says "did you mean".

    ``where`` is the dotted section path used in messages; ``source`` prefixes every message
    (a file, or ``file:line`` for a JSONL record) and, with ``lines`` (key path -> line, for a
    YAML file), the line of the offending key is added.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    if not isinstance(data, dict):
        raise ConfigError(f"{location(source, lines, ())}{where or cls.__name__}: expected a mapping "
                          f"(an object), got {type(data).__name__}")
    section = tuple(p for p in where.split(".") if p and not p.startswith("["))
    data = apply_upgrade(cls, data, where, location(source, lines, section))
    cls = _variant(cls, data, where, location(source, lines, section + ("name",)))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    data = apply_renames(cls, data, where, location(source, lines, section))
    for key, value in data.items():
        key_where = f"{where}.{key}" if where else str(key)
        loc = location(source, lines, section + (str(key),))
        if key not in fields:
            raise ConfigNameError("key", str(key), list(fields), where=f"{loc}{where or cls.__name__}") from None
        tp = hints[key]
        if dataclasses.is_dataclass(tp) and isinstance(value, dict):  # nested errors carry their own line
            kwargs[key] = from_dict(tp, value, where=key_where, lines=lines, source=source)
            continue
        try:
            kwargs[key] = _coerce(value, tp, key_where, source, lines)
            check_bounds(kwargs[key], fields[key].metadata.get("bounds", {}), key_where)
        except UnknownNameError as exc:
            if loc and _located(str(exc), loc, source):  # raised by a nested section, which named the file
                raise
            raise ConfigNameError(exc.kind, exc.name, exc.valid, where=f"{loc}{key_where}") from None
        except ConfigError as exc:
            if loc and not _located(str(exc), loc, source):
                raise ConfigError(f"{loc}{exc}") from None
            raise
    missing = [name for name, f in fields.items() if name not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{location(source, lines, section)}{where or cls.__name__}: missing required key(s): "
                          f"{', '.join(missing)}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as exc:  # a section's own checks (__post_init__); "FIELD: why" points at the field
        text, field_name = str(exc), str(exc).split(":", 1)[0]
        if field_name in fields and field_name in data:
            text = f"{where}.{text}" if where else text
            raise ConfigError(f"{location(source, lines, section + (field_name,))}{text}") from None
        raise ConfigError(f"{location(source, lines, section)}{text}") from None


VARIANT_ATTRIBUTE = "VARIANT"
"""A dataclass may declare ``VARIANT: ClassVar[Callable[[dict], type]]``: the dataclass (itself or a
subclass) that a raw mapping of this type is loaded into, chosen from its content (a list of reward
entries picks each entry's options by its ``name``); raises ``UnknownNameError`` or ``ValueError``."""


def _variant(cls: type, data: dict[str, Any], where: str, loc: str) -> type:
    choose = getattr(cls, VARIANT_ATTRIBUTE, None)
    if choose is None:
        return cls
    try:
        chosen = choose(data)
    except UnknownNameError as exc:
        raise ConfigNameError(exc.kind, exc.name, exc.valid, where=f"{loc}{where or cls.__name__}.name") from None
    except ValueError as exc:
        raise ConfigError(f"{loc}{where or cls.__name__}: {exc}") from None
    if not (isinstance(chosen, type) and issubclass(chosen, cls)):
        raise TypeError(f"{cls.__name__}.VARIANT gave {chosen!r}, not a subclass")
    return chosen


def _located(message: str, loc: str, source: str) -> bool:
    """The message already names where (this key's file line, another line of the file, a --set flag)."""
    return message.startswith(loc) or bool(source) and message.startswith(f"{source}:") or \
        message.startswith("--set ")


def location(source: str, lines: dict[tuple[str, ...], Any] | None, path: tuple[str, ...]) -> str:
    """The prefix of an error at key ``path``: ``"FILE:LINE: "``, ``"FILE: "``, the ``--set`` flag that set
    it (see :func:`unified.config.overrides.mark_overrides`), or ``""`` without a source."""
    line = (lines or {}).get(path)
    for n in range(len(path) - 1, 0, -1) if line is None and lines else ():  # inside what a --set flag set
        for key in (path[:n], path[:n - 1] + (path[n - 1].split("[")[0],)):
            if isinstance(lines.get(key), str):
                line = lines[key]
                break
        if line is not None:
            break
    if isinstance(line, str):  # a key set by --set (see mark_overrides): the flag is to blame, not the file
        return f"{line}: "
    if not source:
        return ""
    return f"{source}:{line}: " if line else f"{source}: "


# --------------------------------------------------------------------------------------
# dataclass -> dict / YAML


def to_dict(cfg: Any) -> Any:
    """A plain (YAML/JSON-safe) structure from a config dataclass."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {str(k): to_dict(v) for k, v in cfg.items()}
    if isinstance(cfg, Path):
        return str(cfg)
    if isinstance(cfg, enum.Enum):
        return cfg.value
    return cfg


def dump_yaml(cfg: Any) -> str:
    """``cfg`` as YAML, in field order (what ``--dry-run`` prints)."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True)
