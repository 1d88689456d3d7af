"""The command-line side of recipes: the common ``--recipe``/``--set``/``--dry-run`` flags, an
argparse ``type`` that checks a field's bounds (:func:`flag_type`), an ``ArgumentParser`` with
one-line usage errors, and the plain-text side of ``--help`` (:func:`plain_text` for docstrings written in
reStructuredText, :class:`DefaultsHelpFormatter` for the defaults)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from typing import Any, Callable

from unified.config.errors import ConfigError
from unified.config.loader import check_bounds

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
    (not the whole usage block before the one useful line), that takes no abbreviation of a long flag
    (``--suit ood`` is refused, not read as ``--suite ood``) and says "did you mean" for an unknown one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        message = " ".join(str(message).split("\n"))
        if message.startswith("unrecognized arguments:"):
            message += unknown_flag_hint(self, message.split(":", 1)[1].split())
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def unknown_flag_hint(parser: argparse.ArgumentParser, words: list[str]) -> str:
    """``"; did you mean --suite?"`` for the first unknown ``--flag`` among ``words`` that is close to one of
    ``parser``'s (a prefix of it, or a near spelling), else ``""``."""
    import difflib

    known = [s for action in parser._actions for s in action.option_strings if s.startswith("--")]
    for word in words:
        flag = word.split("=", 1)[0]
        if not flag.startswith("--"):
            continue
        close = [k for k in known if k.startswith(flag)] or difflib.get_close_matches(flag, known, n=1)
        if close:
            return f"; did you mean {close[0]}? (flags are never abbreviated)"
    return ""


_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|obj|exc|ref|doc):`~?([^`]+)`")


def plain_text(text: str) -> str:
    """``text``, a docstring in reStructuredText, as a terminal should show it (argparse prints a
    description verbatim): inline literals and roles lose their markup (the module name stays), bold loses
    its stars, and a literal block's ``::`` becomes ``:``."""
    text = _ROLE.sub(lambda m: m.group(1), text)
    text = re.sub(r"``(.+?)``", r"\1", text, flags=re.S)
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text, flags=re.S)
    text = re.sub(r"^[ \t]*::[ \t]*\n", "", text, flags=re.M)
    return re.sub(r"(?<=\S)::$", ":", text, flags=re.M)


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``--help`` with the description kept as written and each option's default at the end of its line,
    ``(default: 8)``, unless its help already says what the default is, the default is unset (``None``) or the
    option is a switch."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is False or default == argparse.SUPPRESS \
                or not action.option_strings \
                or isinstance(action, (argparse._StoreTrueAction, argparse._HelpAction)):
            return text
        return f"{text} (default: %(default)s)".lstrip()
