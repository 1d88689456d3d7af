"""YAML recipe files: read with YAML 1.2 booleans and the line of every key (for error messages)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from unified.config.errors import ConfigError

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

