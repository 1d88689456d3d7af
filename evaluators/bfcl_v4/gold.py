"""``--model gold`` for BFCL's Java cases: ground-truth values written as the Java source text a model writes.

BFCL offers Java functions with every parameter typed ``string`` ("This is Java long type parameter in
string representation", bfcl's language pre-processing) and its checker reads the model's string back
with ``java_type_converter(text, java_type, nested_type)`` before comparing it with the possible
answers: ``"42L"`` is the long 42, ``"42"`` stays the string ``"42"``; an ``ArrayList`` is
``new ArrayList<>(Arrays.asList(...))``, an ``Array`` ``new T[]{...}``, a ``HashMap``
``new HashMap<...>() {{ put("k", v); }}``. So a ground-truth value such as ``42`` for a ``long``
must be replayed as ``"42L"``.

:func:`java_argument` writes a few candidate texts for a value and keeps the first one that the
installed bfcl-eval's own converter (loaded at run time, not re-implemented here) reads back as
exactly that value; a value none of them round-trips is replayed as it is (and fails, as it should:
gold then shows the gap instead of hiding it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from evaluators.bfcl_v4.isolation import import_bfcl

NESTED = ("Array", "ArrayList")
"""Java types whose ``items.type`` bfcl passes to its converter as ``nested_type``."""
ARRAY_ELEMENT = {"integer": "int", "long": "long", "double": "double", "float": "float", "boolean": "boolean",
                 "char": "char", "byte": "byte", "short": "short", "String": "String"}
"""The element type written in ``new T[]{...}`` (bfcl's reader accepts any word there)."""


def _number(value: int | float, java_type: str | None) -> Iterator[str]:
    if java_type == "long" and isinstance(value, int):
        yield f"{value}L"
    if java_type == "float":
        yield f"{value}f"
    yield json.dumps(value)
    if isinstance(value, int):
        yield f"{value}L"
        yield f"{value}.0"


def _scalar(value: Any, java_type: str | None, quote_strings: bool) -> Iterator[str]:
    """Candidate texts of one scalar (a parameter or a collection element) of ``java_type``."""
    if isinstance(value, bool):
        yield "true" if value else "false"
    elif isinstance(value, (int, float)):
        yield from _number(value, java_type)
    elif isinstance(value, str):
        yield json.dumps(value) if quote_strings else value
    else:
        yield json.dumps(value)


def _first(values: list[Any], render: Callable[[Any], Iterator[str]]) -> list[str] | None:
    out = []
    for value in values:
        text = next(iter(render(value)), None)
        if text is None:
            return None
        out.append(text)
    return out


def _candidates(value: Any, java_type: str, nested_type: str | None) -> Iterator[str]:
    if isinstance(value, dict):
        if not value:
            yield "new HashMap<>()"
            return
        puts = " ".join(f"put({json.dumps(str(k))}, {next(_scalar(v, None, True))});" for k, v in value.items())
        yield f"new HashMap<String, Object>() {{{{ {puts} }}}}"
        return
    if isinstance(value, list):
        element = ARRAY_ELEMENT.get(nested_type or "", "Object")
        for quote in (True, False):
            parts = _first(value, lambda v: _scalar(v, nested_type, quote))
            if parts is None:
                continue
            if java_type == "ArrayList":
                yield f"new ArrayList<>(Arrays.asList({', '.join(parts)}))" if parts else "new ArrayList<>()"
            else:
                yield f"new {element}[]{{{', '.join(parts)}}}"
        return
    yield from _scalar(value, java_type, quote_strings=False)


def java_argument(value: Any, java_type: str, nested_type: str | None = None) -> Any:
    """The Java source text of ``value`` for a parameter of ``java_type`` that bfcl's converter reads
    back as ``value`` (module docstring); ``value`` unchanged when no candidate does."""
    convert = import_bfcl("bfcl_eval.eval_checker.ast_eval.type_convertor.java_type_converter").java_type_converter
    for text in _candidates(value, java_type, nested_type):
        try:
            back = convert(text, java_type, nested_type) if java_type in NESTED else convert(text, java_type)
        except (ValueError, TypeError, NotImplementedError, IndexError):
            continue
        if back == value and isinstance(back, bool) == isinstance(value, bool):
            return text
    return value


def java_arguments(function: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` of a call to the Java ``function`` (its bfcl doc, original types) as Java source texts."""
    properties = (function.get("parameters") or {}).get("properties") or {}
    out = {}
    for name, value in arguments.items():
        spec = properties.get(name) or {}
        java_type = spec.get("type")
        if not isinstance(java_type, str):
            out[name] = value
            continue
        nested = (spec.get("items") or {}).get("type") if java_type in NESTED else None
        out[name] = java_argument(value, java_type, nested)
    return out


def unpassable_reason(payload: dict[str, Any]) -> str | None:
    """Why no faithful answer can pass this task under bfcl's checker (None: the ground truth can),
    read from the task's own data: a Java ``Array``/``ArrayList`` of ``any`` elements is read back as
    strings only, so a possible answer holding a number or a boolean there is never met; a
    ``HashMap`` possible answer whose values are bare strings, not option lists, is compared
    character by character (only a one-character value would match). Gold fails exactly these
    (3 of bfcl-eval's 100 ``simple_java`` tasks: 36, 64, 65)."""
    docs = {f.get("name"): f for f in payload.get("checker_function") or []}
    for call in payload.get("ground_truth") or []:
        if not isinstance(call, dict) or len(call) != 1:
            continue
        (name, params), = call.items()
        properties = ((docs.get(name) or {}).get("parameters") or {}).get("properties") or {}
        for param, options in (params or {}).items():
            spec = properties.get(param) or {}
            for option in options if isinstance(options, list) else []:
                if (spec.get("type") in NESTED and (spec.get("items") or {}).get("type") == "any"
                        and isinstance(option, list) and any(not isinstance(x, str) for x in option)):
                    return f"{name}({param}): a list of `any` holding non-strings, which bfcl's Java reader never yields"
                if spec.get("type") == "HashMap" and isinstance(option, dict) and any(
                        not isinstance(v, list) for v in option.values()):
                    return (f"{name}({param}): HashMap values given as bare strings, compared character by character "
                            "by bfcl's checker")
    return None
