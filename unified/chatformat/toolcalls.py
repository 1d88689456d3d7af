"""Completions -> reasoning, visible answer and tool calls; tool calls -> text (:func:`render_tool_call`).

Two wire forms are parsed, wherever they appear in the completion (after the reasoning):

- Qwen3.5 XML (what :mod:`unified.models.templates` renders)::

      <tool_call>
      <function=NAME>
      <parameter=KEY>
      VALUE
      </parameter>
      </function>
      </tool_call>

  A parameter value is kept as text when the tool's schema says ``string`` (or the tool is
  unknown and the text is not JSON); otherwise it is read as JSON, falling back to the text.
- Hermes JSON: ``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>``.

Every ``<tool_call>`` block becomes one :class:`ToolCall`; a block that cannot be parsed
becomes a ToolCall with ``parse_error`` set (never dropped), which the agent loop turns into
an error observation. An unterminated final block (the model ran out of tokens) is parsed too
and flagged. Nothing here evaluates model text as code.

Model output is untrusted, and nothing it contains may escape as an exception (one malformed
completion would otherwise stop a whole eval, and its rerun, at the same episode).
Model JSON is read by :func:`unified.chatformat.untrusted.load_untrusted_json` (limits on
nesting, digits, NaN/Infinity, lone surrogates; named errors) and text cleaned by ``clean_text``.
:func:`parse_completion` never raises: whatever it meets becomes a
``parse_error`` on a call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from unified.chatformat.reasoning import split_reasoning
from unified.chatformat.scan import NextMatch
from unified.chatformat.untrusted import UntrustedJSONError, check_untrusted_value, clean_text, load_untrusted_json
from unified.types import ToolCall, ToolSpec

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_NAME_END = re.compile(r"[>\n]")


def _named_tags(text: str, prefix: str, close: str, stop_at_next: bool):
    """``(name, body)`` of every ``PREFIX NAME> body`` in ``text``, left to right: NAME has no ``>`` or
    newline; the body runs to the first ``close`` (consumed), or, with ``stop_at_next``, to the next
    ``PREFIX`` (not consumed), or to the end. The matches of the regex
    ``PREFIX([^>\\n]*)>(.*?)(?:CLOSE|(?=PREFIX)|\\Z)`` (DOTALL), found in linear time: that lazy regex
    is quadratic on a completion of many openers (32,000 ``<parameter=`` took minutes)."""
    opens, closes = NextMatch(prefix, text), NextMatch(close, text)
    name_ends = NextMatch(_NAME_END, text)
    pos = 0
    while (start := opens.find(pos)) >= 0:
        name_from = start + len(prefix)
        name_end = name_ends.find(name_from)
        if name_end < 0 or text[name_end] != ">":  # no name here: the regex tries the next opener
            pos = start + 1
            continue
        body_from = name_end + 1
        end = closes.find(body_from)
        stop = opens.find(body_from) if stop_at_next else -1
        if stop >= 0 and (end < 0 or stop < end):
            yield text[name_from:name_end], text[body_from:stop]
            pos = stop
        elif end >= 0:
            yield text[name_from:name_end], text[body_from:end]
            pos = end + len(close)
        else:
            yield text[name_from:name_end], text[body_from:]
            return


@dataclass
class ParsedCompletion:
    """A completion taken apart."""

    reasoning: str | None
    """Text of the ``<think>`` block (None when the completion has none)."""
    content: str
    """The visible answer: no reasoning, no tool-call markup."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Every call, malformed ones included (with ``parse_error``)."""


def _schema_types(tools: list[ToolSpec] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        out[tool.name] = dict((tool.parameters or {}).get("properties") or {})
    return out


def _convert_value(raw: str, schema: dict[str, Any] | None) -> Any:
    text = raw.strip("\n")
    declared = (schema or {}).get("type")
    if declared == "string" or (isinstance(declared, list) and declared == ["string"]):
        return text
    try:
        return load_untrusted_json(text)
    except UntrustedJSONError:
        lowered = text.strip()
        if lowered in ("True", "False"):  # Python-style booleans, common in small models
            return lowered == "True"
        if lowered == "None":
            return None
        return text


def _parse_xml_call(body: str, index: int, schemas: dict[str, dict[str, Any]]) -> ToolCall:
    function = next(_named_tags(body, "<function=", "</function>", stop_at_next=False), None)
    if function is None:
        return ToolCall(name="", id=f"call_{index}", raw=body, parse_error="no <function=NAME> inside <tool_call>")
    name = function[0].strip()
    props = schemas.get(name, {})
    args: dict[str, Any] = {}
    for key, value in _named_tags(function[1], "<parameter=", "</parameter>", stop_at_next=True):
        key = key.strip()
        args[key] = _convert_value(value, props.get(key))
    error = None if name else "empty function name"
    if "</function>" not in body and error is None:
        error = "unterminated <function> block (the completion was cut off?)"
    return ToolCall(name=name, arguments=args, id=f"call_{index}", raw=body, parse_error=error)


def _parse_json_call(body: str, index: int) -> ToolCall:
    try:
        data = load_untrusted_json(body)
    except UntrustedJSONError as exc:
        return ToolCall(name="", id=f"call_{index}", raw=body, parse_error=f"tool call is not valid JSON: {exc}")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ToolCall(name="", id=f"call_{index}", raw=body,
                        parse_error='tool call JSON must be {"name": ..., "arguments": {...}}')
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = load_untrusted_json(args or "{}")
        except UntrustedJSONError as exc:
            return ToolCall(name=data["name"], id=f"call_{index}", raw=body,
                            parse_error=f"arguments are not valid JSON: {exc}")
    if not isinstance(args, dict):
        return ToolCall(name=data["name"], id=f"call_{index}", raw=body, parse_error="arguments must be an object")
    return ToolCall(name=data["name"], arguments=args, id=f"call_{index}", raw=body)


def _blocks(text: str):
    """``(start, end, closed)`` of every ``<tool_call>`` block: from an opener to the first closer
    after it, or to the end of the text (what the regex ``<tool_call>(.*?)(?:</tool_call>|\\Z)``
    finds, with ``str.find``: linear and fast on giant completions)."""
    pos = 0
    while (start := text.find(_OPEN, pos)) >= 0:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            yield start, len(text), False
            return
        pos = end + len(_CLOSE)
        yield start, pos, True


def parse_tool_calls(text: str, tools: list[ToolSpec] | None = None) -> tuple[list[ToolCall], str]:
    """All calls in ``text`` (order kept) and the text with the call blocks removed."""
    schemas = _schema_types(tools)
    calls: list[ToolCall] = []
    outside: list[str] = []
    pos = 0
    for i, (start, end, closed) in enumerate(_blocks(text)):
        outside.append(text[pos:start])
        pos = end
        raw = text[start:end]
        body = raw[len(_OPEN):len(raw) - len(_CLOSE) if closed else len(raw)].strip()
        if body.startswith("{"):
            call = _parse_json_call(body, i)
        else:
            call = _parse_xml_call(body, i, schemas)
        if not closed and call.parse_error is None:
            call.parse_error = "unterminated <tool_call> block (the completion was cut off?)"
        call.raw = raw
        calls.append(call)
    outside.append(text[pos:])
    return calls, "".join(outside).strip()


def parse_completion(text: str, tools: list[ToolSpec] | None = None) -> ParsedCompletion:
    """Reasoning, visible content and tool calls of one raw completion. Never raises: text that
    defeats the parser becomes a call with ``parse_error`` (or plain content when it has no
    ``<tool_call>``)."""
    text = clean_text(text)
    try:
        reasoning, answer = split_reasoning(text)
        calls, visible = parse_tool_calls(answer, tools)
    except Exception as exc:  # defensive: the cases above are handled; anything new is still an observation
        error = f"the completion could not be parsed ({type(exc).__name__}: {str(exc)[:200]})"
        if "<tool_call>" not in text:
            return ParsedCompletion(reasoning=None, content=text.strip())
        return ParsedCompletion(reasoning=None, content="", tool_calls=[
            ToolCall(name="", id="call_0", raw=text, parse_error=error)])
    return ParsedCompletion(reasoning=reasoning or None, content=visible, tool_calls=calls)


def calls_from_structured(raw_calls: list[dict[str, Any]]) -> list[ToolCall]:
    """Server-parsed calls (``{"id","name","arguments"}``, arguments dict or raw string) -> ToolCalls."""
    calls = []
    for i, raw in enumerate(raw_calls if isinstance(raw_calls, list) else []):
        if not isinstance(raw, dict):
            calls.append(ToolCall(name="", id=f"call_{i}", raw=clean_text(repr(raw))[:2000],
                                  parse_error=f"a tool call must be an object, got {type(raw).__name__}"))
            continue
        args = raw.get("arguments", {})
        name = raw.get("name")
        error = None
        try:
            if isinstance(args, str):
                args = load_untrusted_json(args or "{}")
            else:
                check_untrusted_value(args)
        except UntrustedJSONError as exc:
            error, args = f"arguments are not valid JSON: {exc}", {}
        if error is None and not isinstance(args, dict):
            error, args = "arguments must be an object", {}
        if not isinstance(name, str):
            error = error or f"the function name must be a string, got {type(name).__name__}"
            name = ""
        try:
            raw_text = json.dumps(raw, default=str)
        except (ValueError, TypeError, RecursionError):
            raw_text = f"<unprintable tool call {i}>"
        calls.append(ToolCall(name=clean_text(name), arguments=args, id=clean_text(raw.get("id") or f"call_{i}"),
                              raw=raw_text, parse_error=error or (None if name else "empty function name")))
    return calls


def render_tool_call(call: ToolCall) -> str:
    """A ToolCall in the Qwen3.5 XML form (the first wire form above; what the gold replay emits and
    :func:`parse_tool_calls` reads back)."""
    lines = [_OPEN, f"<function={call.name}>"]
    for key, value in call.arguments.items():
        text = value if isinstance(value, str) else json.dumps(value)
        lines += [f"<parameter={key}>", text, "</parameter>"]
    lines += ["</function>", _CLOSE]
    return "\n".join(lines)
