"""Model-written text and JSON, read safely (model output is untrusted).

:func:`load_untrusted_json` is the one JSON reader for model-written text: nesting deeper
than :data:`MAX_JSON_DEPTH`, integers longer than :data:`MAX_INT_DIGITS` digits (Python's own
int/str limit), ``NaN``/``Infinity`` and numbers that overflow to them, and lone UTF-16
surrogates (``"\\ud800"``, which no UTF-8 file can hold) are a :class:`UntrustedJSONError`
naming the problem, never ``RecursionError``/``ValueError`` from deep inside ``json``. Text
itself goes through :func:`clean_text` (lone surrogates -> U+FFFD, bytes decoded with
replacement). Used by the OpenAI-compatible client (server-parsed tool-call arguments) and by
the completion parser (:mod:`unified.chatformat.toolcalls`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays/objects accepted in model-written JSON (tool arguments). Deeper
values would overflow recursive code downstream (``copy.deepcopy``, ``dataclasses.asdict``,
chat templates)."""
MAX_INT_DIGITS = 4300
"""Longest integer literal accepted (Python's default ``sys.get_int_max_str_digits()``: a longer
int can be parsed by nothing downstream that prints it)."""


class UntrustedJSONError(ValueError):
    """Model-written JSON that is malformed or unsafe to pass on; the message says why."""


def clean_text(value: Any) -> str:
    """Any completion-like value as valid Unicode text: bytes decoded as UTF-8 with U+FFFD for
    invalid sequences, lone surrogates replaced by U+FFFD (pairs kept), None -> ``""``."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if not isinstance(value, str):
        value = str(value)
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _reject_constant(name: str) -> Any:
    raise UntrustedJSONError(f"{name} is not a JSON number")


def _checked_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise UntrustedJSONError(f"an integer with {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _checked_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UntrustedJSONError(f"the number {text[:40]} overflows to {value}")
    return value


def check_untrusted_value(value: Any) -> None:
    """Depth and text checks of a parsed value, iteratively (a deep value cannot overflow the stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise UntrustedJSONError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            children = item.items() if isinstance(item, dict) else ((None, v) for v in item)
            for key, child in children:
                if key is not None:
                    stack.append((key, depth))
                stack.append((child, depth + 1))
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise UntrustedJSONError("a string holds a lone UTF-16 surrogate (e.g. \\ud800), which is not "
                                         "valid Unicode") from None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _nesting_exceeds(text: str, limit: int) -> bool:
    """Whether JSON-like ``text`` opens more than ``limit`` arrays/objects at once outside its strings:
    a linear scan before parsing (strings dropped by an unambiguous regex, then the brackets counted),
    so the depth limit holds whatever the interpreter's recursion limit is (another library in the
    process may have raised it, and a deep parse on a worker thread's small stack is a crash, not a
    RecursionError)."""
    depth = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def load_untrusted_json(text: Any) -> Any:
    """``json.loads`` for model-written text; any problem is an :class:`UntrustedJSONError`."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise UntrustedJSONError(f"expected JSON text, got {type(text).__name__}")
    scanned = text if isinstance(text, str) else bytes(text).decode(json.detect_encoding(text), "replace")
    if _nesting_exceeds(scanned, MAX_JSON_DEPTH):
        raise UntrustedJSONError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text, parse_int=_checked_int, parse_float=_checked_float,
                           parse_constant=_reject_constant)
    except UntrustedJSONError:
        raise
    except RecursionError:
        raise UntrustedJSONError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise UntrustedJSONError(str(exc)) from None
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:
        raise UntrustedJSONError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
    check_untrusted_value(value)
    return value
