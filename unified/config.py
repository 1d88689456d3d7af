"""Recipes: YAML files into typed dataclasses, ``--set key=value`` overrides, ``--dry-run``;
and the library's one dict -> dataclass loader (:func:`from_dict`), which also revives the
stored records of :mod:`unified.types` (``Record.from_dict`` calls it).

Every config section is a dataclass. Loading is strict: an unknown key is an error that
names the file, the line and the section, says "did you mean" and lists the valid keys; a value of the wrong type
is an error that names the field and the expected type; a number outside the bounds a field
declares (:func:`bounded`: ``max_steps >= 1``, ``learning_rate > 0``, no NaN) is an error that
names the field, the bound and the value. :func:`flag_type` turns the same bounds into an
argparse ``type`` for a CLI flag, so ``--limit -1`` is a usage error naming flag and value.
``--set a.b=value`` parses ``value`` as YAML (so ``--set train.lr=3e-4`` is a float and
``--set eval.suites=[ood]`` a list).

Typical CLI use::

    parser = argparse.ArgumentParser()
    add_recipe_arguments(parser)
    args = parser.parse_args()
    cfg = load_config(WarmupConfig, args.recipe, args.set)
    if args.dry_run:
        print(dump_yaml(cfg))
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import math
import os
import re
import sys
import types
import typing
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from unified.registry import UnknownNameError

C = TypeVar("C")


class ConfigError(ValueError):
    """A recipe, override or stored record that cannot be turned into its typed dataclass."""


class ConfigNameError(UnknownNameError, ConfigError):
    """An unknown key or value: says "did you mean", and is a :class:`ConfigError` (a ``ValueError``)."""


# --------------------------------------------------------------------------------------
# YAML with line numbers


def _line_index(text: str, source: str) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML mapping document to its 1-based line."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:  # the parser's message already carries line/column
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    index: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key_path = path + (str(key_node.value),)
                index[key_path] = key_node.start_mark.line + 1
                walk(value_node, key_path)

    if root is not None:
        walk(root, ())
    return index


class _Yaml12Loader(yaml.SafeLoader):
    """YAML with YAML 1.2's booleans: only true/false are booleans, so ``network: off`` or
    ``--set x.network=off`` stays the string ``off`` (YAML 1.1 reads on/off/yes/no as booleans and
    a string setting would then reject ``False``). A boolean setting still accepts on/off/yes/no."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                    list("tTfF"))


def load_yaml_text(text: str) -> Any:
    """``text`` parsed as YAML with YAML 1.2 booleans (see :class:`_Yaml12Loader`)."""
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """Read a YAML mapping and the line of every key (for error messages)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: recipe file not found")
    text = path.read_text(encoding="utf-8")
    lines = _line_index(text, str(path))
    data = load_yaml_text(text)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level of a recipe must be a mapping, got {type(data).__name__}")
    return data, lines


# --------------------------------------------------------------------------------------
# overrides


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides to a (nested) dict in place; values parse as YAML."""
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.lr=3e-4")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set {item!r}: empty key")
        try:
            value = load_yaml_text(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from None
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[: i + 1])} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return data


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


def _field_at(cls: type, key: str) -> dataclasses.Field:
    """The dataclass field of a dotted key (``sampling.temperature``) of ``cls``."""
    *sections, name = key.split(".")
    for section in sections:
        cls = typing.get_type_hints(cls)[section]
    return {f.name: f for f in dataclasses.fields(cls)}[name]


def flag_type(cls: type, key: str, kind: type = int) -> Callable[[str], Any]:
    """An argparse ``type`` for a flag that sets ``key`` of ``cls``: parses ``kind`` and checks the
    field's bounds, so a bad value is a usage error naming the flag and the value."""
    bounds = _field_at(cls, key).metadata.get("bounds", {})

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        try:
            check_bounds(value, bounds, key)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


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
        raise ConfigError(f"{_location(source, lines, ())}{where or cls.__name__}: expected a mapping "
                          f"(an object), got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    section = tuple(p for p in where.split(".") if p and not p.startswith("["))
    data = _apply_renames(cls, data, where, _location(source, lines, section))
    for key, value in data.items():
        key_where = f"{where}.{key}" if where else str(key)
        loc = _location(source, lines, section + (str(key),))
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
            if loc and str(exc).startswith(loc):  # raised by a nested section, which named the file
                raise
            raise ConfigNameError(exc.kind, exc.name, exc.valid, where=f"{loc}{key_where}") from None
        except ConfigError as exc:
            if loc and not str(exc).startswith(loc):
                raise ConfigError(f"{loc}{exc}") from None
            raise
    missing = [name for name, f in fields.items() if name not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{_location(source, lines, section)}{where or cls.__name__}: missing required key(s): "
                          f"{', '.join(missing)}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as exc:  # a section's own checks (__post_init__)
        raise ConfigError(f"{_location(source, lines, section)}{exc}") from None


RENAMED_ATTRIBUTE = "RENAMED"
"""A dataclass may declare ``RENAMED: ClassVar[dict[str, str | tuple[str, Callable]]]``: old key ->
new key (or (new key, a function of the old value)). Old recipes and stored records still load, with
one deprecation line per old key and place."""

_warned_renames: set[tuple[str, str]] = set()


def _apply_renames(cls: type, data: dict[str, Any], where: str, loc: str) -> dict[str, Any]:
    renamed = getattr(cls, RENAMED_ATTRIBUTE, None) or {}
    if not any(key in renamed for key in data):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in renamed:
            out[key] = value
            continue
        new, convert = (renamed[key], None) if isinstance(renamed[key], str) else renamed[key]
        if new in data:
            raise ConfigError(f"{loc}{where or cls.__name__}: both {key!r} (its old name) and {new!r} are set; "
                              f"keep {new!r}")
        out[new] = convert(value) if convert else value
        old_path, new_path = (f"{where}.{key}", f"{where}.{new}") if where else (key, new)
        if (loc + old_path, new_path) not in _warned_renames:
            _warned_renames.add((loc + old_path, new_path))
            note = f"deprecated: {loc}{old_path} is now {new_path}"
            warnings.warn(note, DeprecationWarning, stacklevel=3)
            print(f"note: {note}" + (" (the opposite value)" if convert else ""), file=sys.stderr)
    return out


def _location(source: str, lines: dict[tuple[str, ...], int] | None, path: tuple[str, ...]) -> str:
    if not source:
        return ""
    line = (lines or {}).get(path)
    return f"{source}:{line}: " if line else f"{source}: "


def load_config(cls: type[C], path: str | os.PathLike[str] | None = None, overrides: list[str] | None = None) -> C:
    """Load a recipe file (optional) into ``cls``, then apply ``--set`` overrides."""
    data: dict[str, Any] = {}
    lines: dict[tuple[str, ...], int] = {}
    source = ""
    if path is not None:
        data, lines = read_yaml(path)
        source = str(path)
    if overrides:
        apply_overrides(data, overrides)
    return from_dict(cls, data, lines=lines, source=source)


# --------------------------------------------------------------------------------------
# dataclass -> dict / YAML, CLI helpers


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
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True)


def add_recipe_arguments(parser: argparse.ArgumentParser, *, recipe_required: bool = False) -> None:
    """The common ``--recipe``, ``--set`` and ``--dry-run`` flags."""
    parser.add_argument("--recipe", "--config", dest="recipe", required=recipe_required,
                        help="YAML recipe file (see recipes/)")
    parser.add_argument("--set", dest="set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key, e.g. --set train.learning_rate=1e-6 (repeatable)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the resolved config and what would run, then exit")
