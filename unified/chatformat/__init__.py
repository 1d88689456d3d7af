"""How model output text is read and written: one place for the chat-format rules.

A leaf package (floor 0: stdlib and :mod:`unified.types` only), so the inference backends, the
agent loop, the prompting modules, the rewards, the world-model data and the evaluators read model
output by the same rules without importing each other:

- :mod:`~unified.chatformat.reasoning`: the one ``<think>`` split/join and ``strip_reasoning``
  (the answer a judge or verifier sees);
- :mod:`~unified.chatformat.toolcalls`: ``<tool_call>`` blocks (Qwen3.5 XML and Hermes JSON)
  parsed into :class:`~unified.types.ToolCall` records (never raising), server-parsed calls
  checked, a ToolCall rendered back to text;
- :mod:`~unified.chatformat.untrusted`: the one JSON reader for model-written text (depth, digits,
  NaN, lone surrogates) and ``clean_text``;
- :mod:`~unified.chatformat.observation`: the ``<predicted_observation>`` a world model answers
  and the assistant text of a TRL completion;
- :mod:`~unified.chatformat.scan`: linear-time scans for tagged blocks (no quadratic lazy regexes
  on untrusted text).
"""

from unified.chatformat.observation import completion_text, parse_observation
from unified.chatformat.reasoning import THINK_CLOSE, THINK_OPEN, join_reasoning, split_reasoning, strip_reasoning
from unified.chatformat.scan import NextMatch, TagBlock, remove_tag_blocks, tag_blocks
from unified.chatformat.toolcalls import (
    ParsedCompletion,
    calls_from_structured,
    parse_completion,
    parse_tool_calls,
    render_tool_call,
)
from unified.chatformat.untrusted import (
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    UntrustedJSONError,
    check_untrusted_value,
    clean_text,
    load_untrusted_json,
)

__all__ = [
    "MAX_INT_DIGITS", "MAX_JSON_DEPTH", "THINK_CLOSE", "THINK_OPEN", "NextMatch", "ParsedCompletion", "TagBlock",
    "UntrustedJSONError", "calls_from_structured", "check_untrusted_value", "clean_text", "completion_text",
    "join_reasoning", "load_untrusted_json", "parse_completion", "parse_observation", "parse_tool_calls",
    "remove_tag_blocks", "render_tool_call", "split_reasoning", "strip_reasoning", "tag_blocks",
]
