"""Completions -> reasoning, visible answer and tool calls; tool calls -> text.

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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from unified.types import ToolCall, ToolSpec

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


@dataclass
class ParsedCompletion:
    """A completion taken apart."""

    reasoning: str | None
    """Text of the ``<think>`` block (None when the completion has none)."""
    content: str
    """The visible answer: no reasoning, no tool-call markup."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Every call, malformed ones included (with ``parse_error``)."""


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``[<think>]R</think>A`` -> (R, A). The generation prompt opens ``<think>``, so the
    completion usually starts inside it; text without ``</think>`` has no reasoning unless it
    starts with ``<think>`` (then it is all reasoning: the model never closed it)."""
    if "</think>" in text:
        reasoning, answer = text.split("</think>", 1)
        return reasoning.replace("<think>", "", 1).strip(), answer.strip()
    stripped = text.lstrip()
    if stripped.startswith("<think>"):
        body = stripped[len("<think>"):]
        if "<tool_call>" in body:  # thinking never closed but calls were made: keep the calls visible
            reasoning, rest = body.split("<tool_call>", 1)
            return reasoning.strip(), "<tool_call>" + rest
        return body.strip(), ""
    return None, text.strip()


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
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        lowered = text.strip()
        if lowered in ("True", "False"):  # Python-style booleans, common in small models
            return lowered == "True"
        if lowered == "None":
            return None
        return text


def _parse_xml_call(body: str, index: int, schemas: dict[str, dict[str, Any]]) -> ToolCall:
    match = _FUNCTION.search(body)
    if not match:
        return ToolCall(name="", id=f"call_{index}", raw=body, parse_error="no <function=NAME> inside <tool_call>")
    name = match.group(1).strip()
    props = schemas.get(name, {})
    args: dict[str, Any] = {}
    for pmatch in _PARAM.finditer(match.group(2)):
        key = pmatch.group(1).strip()
        args[key] = _convert_value(pmatch.group(2), props.get(key))
    error = None if name else "empty function name"
    if "</function>" not in body and error is None:
        error = "unterminated <function> block (the completion was cut off?)"
    return ToolCall(name=name, arguments=args, id=f"call_{index}", raw=body, parse_error=error)


def _parse_json_call(body: str, index: int) -> ToolCall:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall(name="", id=f"call_{index}", raw=body, parse_error=f"tool call is not valid JSON: {exc}")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ToolCall(name="", id=f"call_{index}", raw=body,
                        parse_error='tool call JSON must be {"name": ..., "arguments": {...}}')
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except json.JSONDecodeError:
            return ToolCall(name=data["name"], id=f"call_{index}", raw=body, parse_error="arguments are not valid JSON")
    if not isinstance(args, dict):
        return ToolCall(name=data["name"], id=f"call_{index}", raw=body, parse_error="arguments must be an object")
    return ToolCall(name=data["name"], arguments=args, id=f"call_{index}", raw=body)


def parse_tool_calls(text: str, tools: list[ToolSpec] | None = None) -> tuple[list[ToolCall], str]:
    """All calls in ``text`` (order kept) and the text with the call blocks removed."""
    schemas = _schema_types(tools)
    calls: list[ToolCall] = []
    for i, match in enumerate(_BLOCK.finditer(text)):
        body = match.group(1).strip()
        closed = match.group(0).endswith("</tool_call>")
        if body.startswith("{"):
            call = _parse_json_call(body, i)
        else:
            call = _parse_xml_call(body, i, schemas)
        if not closed and call.parse_error is None:
            call.parse_error = "unterminated <tool_call> block (the completion was cut off?)"
        call.raw = match.group(0)
        calls.append(call)
    visible = _BLOCK.sub("", text).strip()
    return calls, visible


def parse_completion(text: str, tools: list[ToolSpec] | None = None) -> ParsedCompletion:
    """Reasoning, visible content and tool calls of one raw completion."""
    reasoning, answer = split_reasoning(text)
    calls, visible = parse_tool_calls(answer, tools)
    return ParsedCompletion(reasoning=reasoning or None, content=visible, tool_calls=calls)


def calls_from_structured(raw_calls: list[dict[str, Any]]) -> list[ToolCall]:
    """Server-parsed calls (``{"id","name","arguments"}``, arguments dict or raw string) -> ToolCalls."""
    calls = []
    for i, raw in enumerate(raw_calls):
        args = raw.get("arguments", {})
        error = None
        if isinstance(args, str):
            try:
                args = json.loads(args or "{}")
            except json.JSONDecodeError:
                error, args = "arguments are not valid JSON", {}
        if not isinstance(args, dict):
            error, args = "arguments must be an object", {}
        calls.append(ToolCall(name=str(raw.get("name") or ""), arguments=args, id=str(raw.get("id") or f"call_{i}"),
                              raw=json.dumps(raw, default=str), parse_error=error or (None if raw.get("name") else
                                                                                      "empty function name")))
    return calls


def render_tool_call(call: ToolCall) -> str:
    """A ToolCall in the Qwen3.5 XML form (what the gold policy emits)."""
    lines = ["<tool_call>", f"<function={call.name}>"]
    for key, value in call.arguments.items():
        text = value if isinstance(value, str) else json.dumps(value)
        lines += [f"<parameter={key}>", text, "</parameter>"]
    lines += ["</function>", "</tool_call>"]
    return "\n".join(lines)
