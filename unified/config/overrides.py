"""``--set KEY=VALUE`` overrides on a recipe, and :func:`load_config`: a recipe file, then its
overrides, into a typed dataclass.

A value parses as YAML (``--set train.lr=3e-4`` is a float, ``--set eval.suites=[ood]`` a list). A
list of named entries (mappings with a ``name``, such as a warmup recipe's ``rewards``) is addressed
by entry name or position: ``--set rewards.similarity.weight=0.5`` sets that entry's key, ``--set
rewards.0.weight=0.5`` the first entry's, and a name the list does not hold adds an entry (``{name:
NAME}`` and the item class's :data:`NEW_ENTRY_ATTRIBUTE` keys, then ``KEY: VALUE``); ``--set
rewards=[...]`` replaces the whole list. An error in an overridden value names the flag, not the file.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any

import yaml

from unified.config.deprecations import apply_upgrade, renamed_overrides
from unified.config.errors import ConfigError
from unified.config.loader import C, from_dict, location, to_dict
from unified.config.yamlfile import load_yaml_text, read_yaml

NEW_ENTRY_ATTRIBUTE = "NEW_ENTRY"
"""The item dataclass of a list of named entries may declare ``NEW_ENTRY: ClassVar[dict]``: the keys an
entry that ``--set LIST.NAME.KEY=VALUE`` adds starts with, besides its name (a reward: ``weight: 0``)."""


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
    ``"k[i]"`` for item i of list ``k``, as :func:`unified.config.yamlfile.read_yaml` indexes lines); (None, path) when a named
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
        data = apply_upgrade(cls, data, "", location(source, lines, ()))
        overrides = renamed_overrides(cls, overrides)
        _prepare_lists(cls, data, overrides)
        apply_overrides(data, overrides)
        mark_overrides(lines, overrides, data)
    return from_dict(cls, data, lines=lines, source=source)


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
