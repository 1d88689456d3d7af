"""Older spellings that still load: the hooks a dataclass declares for its old forms, and the one
deprecation line each old form prints (once per process and place).

- :data:`UPGRADE_ATTRIBUTE`: a section in an older shape (a whole mapping rewritten);
- :data:`RENAMED_ATTRIBUTE`: a key with an old name (optionally with its value converted);
- :data:`RENAMED_PATHS_ATTRIBUTE`: a dotted ``--set`` key with an old spelling.

:func:`unified.config.from_dict` applies the first two to every section it loads,
:func:`unified.config.load_config` all three to a recipe before its ``--set`` overrides.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from unified.config.errors import ConfigError, ConfigNameError
from unified.registry import UnknownNameError

UPGRADE_ATTRIBUTE = "UPGRADE"
"""A dataclass may declare ``UPGRADE: ClassVar[Callable[[dict], tuple[dict, str] | None]]``: given the
raw mapping of its section, ``(the mapping in today's form, today's spelling in words)`` when the mapping
is in an older form, else None. Old recipes and stored records still load, with one deprecation line
naming the file and the new spelling; :func:`unified.config.load_config` upgrades the file before ``--set`` applies."""

RENAMED_PATHS_ATTRIBUTE = "RENAMED_PATHS"
"""A root dataclass may declare ``RENAMED_PATHS: ClassVar[dict[str, str]]``: an old dotted ``--set``
key -> today's (``shaping.repetition_weight`` -> ``rewards.repetition.weight``), with one deprecation
line."""

RENAMED_ATTRIBUTE = "RENAMED"
"""A dataclass may declare ``RENAMED: ClassVar[dict[str, str | tuple[str, Callable]]]``: old key ->
new key (or (new key, a function of the old value)). Old recipes and stored records still load, with
one deprecation line per old key and place."""

_warned_notes: set[str] = set()
"""The deprecation notes this process has printed (each is printed once)."""


def _deprecated_once(note: str, detail: str = "") -> None:
    """Warn (DeprecationWarning and one stderr line, ``note`` then ``detail``) the first time this process
    meets ``note``. The warning points at the caller of the function that calls this one's caller
    (``from_dict``'s or ``load_config``'s caller)."""
    if note in _warned_notes:
        return
    _warned_notes.add(note)
    warnings.warn(note, DeprecationWarning, stacklevel=4)
    print(f"note: {note}{detail}", file=sys.stderr)


def apply_upgrade(cls: type, data: dict[str, Any], where: str, loc: str) -> dict[str, Any]:
    """``data`` (the raw mapping of section ``where`` of ``cls``, at file location ``loc``) in today's
    form by ``cls``'s :data:`UPGRADE_ATTRIBUTE` hook, with a deprecation line when it was older."""
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


def apply_renames(cls: type, data: dict[str, Any], where: str, loc: str) -> dict[str, Any]:
    """``data`` with the old keys of ``cls``'s :data:`RENAMED_ATTRIBUTE` under today's names (values
    converted where the rename says so), a deprecation line per old key; both spellings is an error."""
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
        _deprecated_once(f"deprecated: {loc}{old_path} is now {new_path}", " (the opposite value)" if convert else "")
    return out


def renamed_overrides(cls: type, overrides: list[str]) -> list[str]:
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
