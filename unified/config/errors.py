"""The errors of the config loader: both are ``ValueError``, so a CLI turns them into one line."""

from __future__ import annotations

from unified.registry import UnknownNameError

class ConfigError(ValueError):
    """A recipe, override or stored record that cannot be turned into its typed dataclass."""


class ConfigNameError(UnknownNameError, ConfigError):
    """An unknown key or value: says "did you mean", and is a :class:`ConfigError` (a ``ValueError``)."""

