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
``--set eval.suites=[ood]`` a list). A list of named entries (mappings with a ``name``, such as
a warmup recipe's ``rewards``) is addressed by entry name or position: ``--set
rewards.similarity.weight=0.5`` sets that entry's key, ``--set rewards.0.weight=0.5`` the first
entry's, and a name the list does not hold adds an entry (``{name: NAME}`` and the item class's
``NEW_ENTRY`` keys, then ``KEY: VALUE``); ``--set rewards=[...]`` replaces the whole list.

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
        elif isinstance(node, yaml.SequenceNode) and path:  # item i of key k: path (..., "k[i]")
            for i, item in enumerate(node.value):
                item_path = path[:-1] + (f"{path[-1]}[{i}]",)
                index[item_path] = item.start_mark.line + 1
                walk(item, item_path)

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


def _split_override(item: str) -> tuple[list[str], str]:
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.lr=3e-4")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {item!r}: empty key")
    return parts, raw


def _named_entry(items: list[Any], part: str, item: str, where: str, create: bool) -> int | None:
    """The position of the entry of ``items`` (a list of named mappings) that ``part`` addresses: a
    position (``0``) or the value of an entry's ``name``; a new name is appended when ``create``."""
    if part.isdigit():
        if int(part) >= len(items):
            raise ConfigError(f"--set {item!r}: {where} has {len(items)} entries, no entry {part}")
        return int(part)
    if not all(isinstance(e, dict) and "name" in e for e in items):
        raise ConfigError(f"--set {item!r}: {where} is a list, not a list of named entries: address an item by "
                          f"position ({where}.0) or set the whole list ({where}=[...])")
    for i, entry in enumerate(items):
        if str(entry["name"]) == part:
            return i
    if not create:
        return None
    items.append({"name": part})
    return len(items) - 1


def _override_target(data: dict[str, Any], parts: list[str], item: str, create: bool
                     ) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The mapping that holds the last key of ``parts`` and the key path of that key in ``data`` (with
    ``"k[i]"`` for item i of list ``k``, as :func:`_line_index` writes it); (None, path) when a named
    entry is missing and not ``create``."""
    node: Any = data
    path: list[str] = []
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[:i])
        if isinstance(node, list):
            index = _named_entry(node, part, item, where, create)
            if index is None:
                return None, tuple(path)
            child = node[index]
            path[-1] = f"{path[-1]}[{index}]"
        else:
            child = node.get(part)
            if child is None:
                if not create:
                    return None, tuple(path)
                child = node[part] = {}
            path.append(part)
        if not isinstance(child, (dict, list)):
            raise ConfigError(f"--set {item!r}: {'.'.join(parts[: i + 1])} is a value, not a section")
        node = child
    if isinstance(node, list):
        where = ".".join(parts[:-1])
        raise ConfigError(f"--set {item!r}: {where} is a list of entries: set a key of one entry, by name or "
                          f"position (--set {where}.NAME.KEY=VALUE, --set {where}.0.KEY=VALUE), or the whole list "
                          f"(--set {where}=[...])")
    return node, (*path, parts[-1])


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides to a (nested) dict in place; values parse as YAML.

    In a list of named entries a key part is an entry's name or position (module docstring)."""
    for item in overrides or []:
        parts, raw = _split_override(item)
        try:
            value = load_yaml_text(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from None
        node, _ = _override_target(data, parts, item, create=True)
        assert node is not None
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
    section = tuple(p for p in where.split(".") if p and not p.startswith("["))
    data = _apply_upgrade(cls, data, where, _location(source, lines, section))
    cls = _variant(cls, data, where, _location(source, lines, section + ("name",)))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
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
        raise ConfigError(f"{_location(source, lines, section)}{where or cls.__name__}: missing required key(s): "
                          f"{', '.join(missing)}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as exc:  # a section's own checks (__post_init__); "FIELD: why" points at the field
        text, field_name = str(exc), str(exc).split(":", 1)[0]
        if field_name in fields and field_name in data:
            text = f"{where}.{text}" if where else text
            raise ConfigError(f"{_location(source, lines, section + (field_name,))}{text}") from None
        raise ConfigError(f"{_location(source, lines, section)}{text}") from None


UPGRADE_ATTRIBUTE = "UPGRADE"
"""A dataclass may declare ``UPGRADE: ClassVar[Callable[[dict], tuple[dict, str] | None]]``: given the
raw mapping of its section, ``(the mapping in today's form, today's spelling in words)`` when the mapping
is in an older form, else None. Old recipes and stored records still load, with one deprecation line
naming the file and the new spelling; :func:`load_config` upgrades the file before ``--set`` applies."""

VARIANT_ATTRIBUTE = "VARIANT"
"""A dataclass may declare ``VARIANT: ClassVar[Callable[[dict], type]]``: the dataclass (itself or a
subclass) that a raw mapping of this type is loaded into, chosen from its content (a list of reward
entries picks each entry's options by its ``name``); raises ``UnknownNameError`` or ``ValueError``."""

NEW_ENTRY_ATTRIBUTE = "NEW_ENTRY"
"""The item dataclass of a list of named entries may declare ``NEW_ENTRY: ClassVar[dict]``: the keys an
entry that ``--set LIST.NAME.KEY=VALUE`` adds starts with, besides its name (a reward: ``weight: 0``)."""

RENAMED_PATHS_ATTRIBUTE = "RENAMED_PATHS"
"""A root dataclass may declare ``RENAMED_PATHS: ClassVar[dict[str, str]]``: an old dotted ``--set``
key -> today's (``shaping.repetition_weight`` -> ``rewards.repetition.weight``), with one deprecation
line."""

RENAMED_ATTRIBUTE = "RENAMED"
"""A dataclass may declare ``RENAMED: ClassVar[dict[str, str | tuple[str, Callable]]]``: old key ->
new key (or (new key, a function of the old value)). Old recipes and stored records still load, with
one deprecation line per old key and place."""

_warned_renames: set[tuple[str, str]] = set()


def _deprecated_once(note: str) -> None:
    """Warn (DeprecationWarning and one stderr line) the first time this process meets ``note``."""
    if (note, "") in _warned_renames:
        return
    _warned_renames.add((note, ""))
    warnings.warn(note, DeprecationWarning, stacklevel=4)
    print(f"note: {note}", file=sys.stderr)


def _apply_upgrade(cls: type, data: dict[str, Any], where: str, loc: str) -> dict[str, Any]:
    upgrade = getattr(cls, UPGRADE_ATTRIBUTE, None)
    if upgrade is None or not isinstance(data, dict):
        return data
    try:
        upgraded = upgrade(data)
    except UnknownNameError as exc:
        raise ConfigNameError(exc.kind, exc.name, exc.valid, where=f"{loc}{exc.where or where or cls.__name__}"
                              ) from None
    except ValueError as exc:
        text = str(exc)
        raise ConfigError(text if loc and text.startswith(loc) else f"{loc}{text}") from None
    if upgraded is None:
        return data
    data, spelling = upgraded
    _deprecated_once(f"deprecated: {loc}{spelling}")
    return data


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


def _located(message: str, loc: str, source: str) -> bool:
    """The message already names where (this key's file line, another line of the file, a --set flag)."""
    return message.startswith(loc) or bool(source) and message.startswith(f"{source}:") or \
        message.startswith("--set ")


def _location(source: str, lines: dict[tuple[str, ...], Any] | None, path: tuple[str, ...]) -> str:
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


def mark_overrides(lines: dict[tuple[str, ...], Any], overrides: list[str] | None,
                   data: dict[str, Any] | None = None) -> dict[tuple[str, ...], Any]:
    """Point the key paths that ``--set`` overrides at the flag (``"--set KEY=VALUE"``) instead of a
    line of the recipe file, so that an error in an overridden value or a mistyped overridden key
    names the flag. ``data``: the overridden dict, to find the entries of named lists that a key
    addresses by name. Modifies and returns ``lines``."""
    for item in overrides or []:
        key = item.split("=", 1)[0]
        path = tuple(p for p in key.strip().split(".") if p)
        if not path:
            continue
        if data is not None:
            try:
                node, resolved = _override_target(data, list(path), item, create=False)
                path = resolved if node is not None else path
            except ConfigError:
                pass
            for i, part in enumerate(path[:-1]):  # an entry that --set added: its errors name the flag
                if part.endswith("]") and path[:i + 1] not in lines:
                    lines[path[:i + 1]] = f"--set {item}"
        items = (path[-1] + "[",)  # a whole list set: its items' lines are stale too
        for stale in [k for k in lines if k[:len(path)] == path or (
                len(k) >= len(path) and k[:len(path) - 1] == path[:-1] and k[len(path) - 1].startswith(items))]:
            del lines[stale]
        lines[path] = f"--set {item}"
    return lines


def load_config(cls: type[C], path: str | os.PathLike[str] | None = None, overrides: list[str] | None = None) -> C:
    """Load a recipe file (optional) into ``cls``, then apply ``--set`` overrides."""
    data: dict[str, Any] = {}
    lines: dict[tuple[str, ...], int] = {}
    source = ""
    if path is not None:
        data, lines = read_yaml(path)
        source = str(path)
    if overrides:  # the file in today's form first, so that --set keys address today's keys
        data = _apply_upgrade(cls, data, "", _location(source, lines, ()))
        overrides = _renamed_overrides(cls, overrides)
        _prepare_lists(cls, data, overrides)
        apply_overrides(data, overrides)
        mark_overrides(lines, overrides, data)
    return from_dict(cls, data, lines=lines, source=source)


def _renamed_overrides(cls: type, overrides: list[str]) -> list[str]:
    """``--set`` keys spelt as before a :data:`RENAMED_PATHS_ATTRIBUTE` rename, in today's spelling."""
    renamed = getattr(cls, RENAMED_PATHS_ATTRIBUTE, None) or {}
    out = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        new = renamed.get(key.strip())
        if new is None or not sep:
            out.append(item)
            continue
        out.append(f"{new}={raw}")
        _deprecated_once(f"deprecated: --set {key.strip()} is now --set {new}")
    return out


def _prepare_lists(cls: type, data: dict[str, Any], overrides: list[str]) -> None:
    """For each override that addresses into a list field of ``cls`` (``rewards.rule.weight``): put the
    field's default into ``data`` when the file does not set it (the override edits the default list),
    and add an entry named by the override that the list lacks, starting from the item class's
    :data:`NEW_ENTRY_ATTRIBUTE` (``{name: rule, weight: 0}``), so an option alone adds nothing that acts."""
    for item in overrides:
        parts = [p for p in item.split("=", 1)[0].strip().split(".") if p]
        tp, node = cls, data
        for i, part in enumerate(parts[:-1]):
            if not dataclasses.is_dataclass(tp) or not isinstance(node, dict):
                break
            hints = typing.get_type_hints(tp)
            fields = {f.name: f for f in dataclasses.fields(tp)}
            if part not in fields:
                break
            field_tp = hints[part]
            if typing.get_origin(field_tp) is list:
                if node.get(part) is None:
                    f = fields[part]
                    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                    node[part] = to_dict(default) if default is not dataclasses.MISSING else []
                items, name = node[part], parts[i + 1]
                template = getattr((typing.get_args(field_tp) or (None,))[0], NEW_ENTRY_ATTRIBUTE, None)
                if (template is not None and i + 2 < len(parts) and not name.isdigit() and isinstance(items, list)
                        and all(isinstance(e, dict) for e in items) and all(e.get("name") != name for e in items)):
                    items.append({"name": name, **template})
                break
            if not dataclasses.is_dataclass(field_tp):
                break
            tp, node = field_tp, node.setdefault(part, {})


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


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line and a pointer to ``--help``
    (not the whole usage block before the one useful line)."""

    def error(self, message: str):  # type: ignore[override]
        message = " ".join(str(message).split("\n"))
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
