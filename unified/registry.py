"""Small named registries (benchmarks, policies, prompting modules, rewards, ...).

An unknown name is an error that lists every valid name and, like lm-evaluation-harness,
suggests the closest ones ("did you mean ...?").
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not in a registry (or a key that is not in a config section)."""

    def __init__(self, kind: str, name: str, valid: list[str], where: str = "") -> None:
        self.kind, self.name, self.valid, self.where = kind, name, sorted(valid), where
        close = difflib.get_close_matches(name, self.valid, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        prefix = f"{where}: " if where else ""
        listing = ", ".join(self.valid) if self.valid else "(none registered)"
        self.message = f"{prefix}unknown {kind} {name!r}.{hint} Valid {kind}s: {listing}."
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class Registry(Generic[T]):
    """A mapping from names to objects, filled by the ``register`` decorator.

    >>> policies = Registry("policy")
    >>> @policies.register("hf")
    ... class HFPolicy: ...
    >>> policies.get("hf") is HFPolicy
    True

    ``register_lazy(name, "package.module:attr")`` names an entry without importing it: the module
    is imported on the first ``get(name)`` (heavy backends stay unimported until asked for).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}

    def register_lazy(self, name: str, target: str) -> None:
        """Register ``"package.module:attr"`` under ``name``, imported on first use."""
        if ":" not in target:
            raise ValueError(f"{self.kind} {name!r}: expected 'package.module:attr', got {target!r}")
        self._lazy[name] = target

    def register(self, name: str, obj: T | None = None, *, replace: bool = False) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name``; without ``obj``, return a decorator."""

        def add(item: T) -> T:
            if name in self._entries and not replace and self._entries[name] is not item:
                raise ValueError(f"{self.kind} {name!r} is already registered ({self._entries[name]!r})")
            self._entries[name] = item
            return item

        return add(obj) if obj is not None else add

    def get(self, name: str) -> T:
        if name not in self._entries and name in self._lazy:
            module_name, _, attr = self._lazy[name].partition(":")
            self._entries[name] = getattr(importlib.import_module(module_name), attr)
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return sorted({*self._entries, *self._lazy})

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
