"""A seeded generator of malformed tool calls: mutations of valid ones, in both wire forms.

Every mutation starts from a valid call (Hermes JSON ``<tool_call>{"name", "arguments"}`` or
Qwen3.5 XML ``<tool_call><function=NAME><parameter=KEY>``) and applies one to three of the
operators in :data:`OPERATORS`: deep nesting, huge numbers, NaN/Infinity, control characters,
broken or nested tags, invalid UTF-8 (lone surrogates, raw and ``\\u``-escaped), duplicate keys,
wrong types for ``name``/``arguments``, giant strings, truncation, byte flips and reasoning-block
damage. Deterministic for a seed, so a failure names a mutation that can be replayed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator

TOOL = "echo"
"""The tool the valid calls name (the fixture benchmark's tool)."""


def _valid_args(rng: random.Random) -> dict:
    choices = [
        {"text": str(rng.randint(0, 99))},
        {"text": "hello", "n": rng.randint(-5, 5)},
        {"text": "x", "nested": {"a": [1, 2, {"b": None}], "c": True}},
        {"text": "ünïcödé ✓ 😀", "f": 1.5},
    ]
    return dict(rng.choice(choices))


def valid_call(rng: random.Random) -> tuple[str, str]:
    """(wire form, text) of one well-formed call."""
    args = _valid_args(rng)
    if rng.random() < 0.5:
        return "json", "<tool_call>\n" + json.dumps({"name": TOOL, "arguments": args}) + "\n</tool_call>"
    lines = ["<tool_call>", f"<function={TOOL}>"]
    for key, value in args.items():
        lines += [f"<parameter={key}>", value if isinstance(value, str) else json.dumps(value), "</parameter>"]
    return "xml", "\n".join(lines + ["</function>", "</tool_call>"])


def _deep(rng: random.Random) -> str:
    depth = rng.choice([65, 100, 999, 1000, 5000, 50000] if rng.random() < 0.1 else [65, 100, 999, 1000, 5000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}"), ("[{\"k\":", "}]")])
    inner = rng.choice(["1", "null", '"x"', "[]"])
    return opener * depth + inner + closer * depth if rng.random() < 0.8 else opener * depth  # unbalanced too


def _huge_number(rng: random.Random) -> str:
    digits = rng.choice([4301, 5000, 20000])
    kind = rng.randrange(5)
    if kind == 0:
        return "7" * digits
    if kind == 1:
        return "-" + "9" * digits
    if kind == 2:
        return "1" * digits + ".5"
    if kind == 3:
        return "1e" + "9" * rng.choice([3, 6, 400])
    return "0." + "3" * digits + "e-" + "9" * 5


def _control(rng: random.Random) -> str:
    chars = [chr(c) for c in range(0, 32)] + ["\x7f", "\u2028", "\u2029", "\ufeff", "\u202e", "\ufffe"]
    return "".join(rng.choice(chars) for _ in range(rng.randint(1, 20)))


def _invalid_unicode(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:  # a lone surrogate written as a JSON escape
        return rng.choice(["\\ud800", "\\udfff", "\\udc80\\ud800", "\\ud83d"])
    if kind == 1:  # a lone surrogate in the text itself (what a surrogateescape decode yields)
        return rng.choice(["\ud800", "\udfff", "\udcff"])
    if kind == 2:  # invalid UTF-8 bytes, decoded the way a careless backend would
        return bytes(rng.randrange(128, 256) for _ in range(rng.randint(1, 8))).decode("utf-8", "surrogateescape")
    return "\x00" + rng.choice(["\\u0000", "\\uZZZZ", "\\u12", "\\"])


def _giant(rng: random.Random) -> str:
    return rng.choice("ab<{[\"\\") * rng.choice([5_000, 20_000, 50_000, 200_000] if rng.random() < 0.1 else [5_000, 20_000])


def _replace_value(text: str, value: str, rng: random.Random) -> str:
    """Put ``value`` where the first argument value is (JSON or XML form)."""
    if '"arguments": {' in text:
        head, tail = text.split('"arguments": {', 1)
        key_end = tail.find(":")
        if key_end >= 0:
            rest = tail[key_end + 1:]
            cut = rest.find(",") if "," in rest else rest.find("}")
            return head + '"arguments": {' + tail[:key_end + 1] + " " + value + rest[max(cut, 0):]
    if "<parameter=" in text:
        head, tail = text.split("<parameter=", 1)
        name_end = tail.find(">")
        close = tail.find("</parameter>")
        if name_end >= 0 and close > name_end:
            return head + "<parameter=" + tail[:name_end + 1] + "\n" + value + "\n" + tail[close:]
    return text + value


def op_nesting(text: str, rng: random.Random) -> str:
    return _replace_value(text, _deep(rng), rng)


def op_huge_number(text: str, rng: random.Random) -> str:
    return _replace_value(text, _huge_number(rng), rng)


def op_nan(text: str, rng: random.Random) -> str:
    return _replace_value(text, rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "[NaN, 1]"]), rng)


def op_control(text: str, rng: random.Random) -> str:
    i = rng.randrange(len(text) + 1)
    return text[:i] + _control(rng) + text[i:]


def op_invalid_unicode(text: str, rng: random.Random) -> str:
    value = _invalid_unicode(rng)
    if rng.random() < 0.5:
        return _replace_value(text, '"' + value + '"', rng)
    i = rng.randrange(len(text) + 1)
    return text[:i] + value + text[i:]


def op_broken_tags(text: str, rng: random.Random) -> str:
    kind = rng.randrange(9)
    if kind == 0:
        return text.replace("</tool_call>", "")
    if kind == 1:
        return text.replace("<tool_call>", "", 1)
    if kind == 2:
        return text.replace("<tool_call>", "<tool_call><tool_call>")
    if kind == 3:
        return text.replace(">", "", 1)
    if kind == 4:
        return text.replace("</function>", "").replace("</parameter>", "")
    if kind == 5:
        return text.replace(f"<function={TOOL}>", "<function=>").replace('"name": "echo"', '"name": ""')
    if kind == 6:
        return "<tool_call>" * rng.randint(2, 500) + text
    if kind == 7:
        return text.replace("<parameter=", "<parameter=\n<parameter=")
    return text + "</tool_call>" * rng.randint(1, 50) + "<function=" * rng.randint(1, 50)


def op_duplicate_keys(text: str, rng: random.Random) -> str:
    if '"arguments": {' in text:
        return text.replace('"arguments": {', '"arguments": {"text": 1, "text": [2], ', 1).replace(
            '{"name": "echo"', '{"name": "echo", "name": "other"', 1)
    return text.replace("</function>", "<parameter=text>\ndup\n</parameter>\n</function>", 1)


def op_wrong_types(text: str, rng: random.Random) -> str:
    bad_name = rng.choice(["1", "null", "[]", '{"x": 1}', "true", '"' + "n" * 5000 + '"'])
    bad_args = rng.choice(['"not json"', '"{\\"text\\": 1"', "[1, 2]", "3", "null", '"' + "[" * 5000 + '"',
                           '"{\\"text\\": ' + "9" * 5000 + '}"', "true"])
    body = rng.choice([
        '{"name": %s, "arguments": {"text": "1"}}' % bad_name,
        '{"name": "echo", "arguments": %s}' % bad_args,
        '{"name": "echo", "parameters": %s}' % bad_args,
        '[{"name": "echo"}]', '"echo"', "null", "{}", '{"arguments": {}}',
    ])
    return "<tool_call>" + body + "</tool_call>"


def op_giant(text: str, rng: random.Random) -> str:
    return _replace_value(text, json.dumps(_giant(rng)) if rng.random() < 0.5 else _giant(rng), rng)


def op_truncate(text: str, rng: random.Random) -> str:
    return text[:rng.randrange(len(text) + 1)]


def op_flip(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 8)):
        if not chars:
            break
        i = rng.randrange(len(chars))
        action = rng.randrange(3)
        if action == 0:
            del chars[i]
        elif action == 1:
            chars.insert(i, rng.choice('{}[]"\\:,<>/=\n'))
        else:
            chars[i] = chr(rng.randrange(0x110000) if rng.random() < 0.2 else rng.randrange(32, 127))
    return "".join(chars)


def op_reasoning(text: str, rng: random.Random) -> str:
    return rng.choice([
        "<think>" + text, text + "</think>", "</think></think>" + text, "<think>\n" + text + "\n</think>" + text,
        "<think>" * 100 + text, text.replace("<tool_call>", "</think><tool_call>"),
    ])


OPERATORS: dict[str, Callable[[str, random.Random], str]] = {
    "nesting": op_nesting, "huge_number": op_huge_number, "nan_infinity": op_nan, "control_chars": op_control,
    "invalid_unicode": op_invalid_unicode, "broken_tags": op_broken_tags, "duplicate_keys": op_duplicate_keys,
    "wrong_types": op_wrong_types, "giant_string": op_giant, "truncate": op_truncate, "flip": op_flip,
    "reasoning": op_reasoning,
}


def mutate(text: str, rng: random.Random) -> tuple[list[str], str]:
    """One to three operators applied to the completion ``text``: (their names, the result)."""
    applied = rng.sample(list(OPERATORS), rng.choice([1, 1, 1, 2, 3]))
    for name in applied:
        text = OPERATORS[name](text, rng)
    if rng.random() < 0.5:
        text = "I will call the tool.\n</think>\n\n" + text
    return applied, text


def mutations(n: int, seed: int = 0) -> Iterator[tuple[list[str], str]]:
    """``n`` mutated completions: (operators applied, completion text)."""
    rng = random.Random(seed)
    for _ in range(n):
        _, text = valid_call(rng)
        if rng.random() < 0.3:  # several calls in one completion
            text = text + "\n" + valid_call(rng)[1]
        yield mutate(text, rng)
