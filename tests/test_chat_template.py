"""The Qwen3.5-style template, rendered through a real tokenizer's apply_chat_template."""

import pytest

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]},
    },
}]


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def conversation():
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Lyon?"},
        {"role": "assistant", "content": "", "reasoning_content": "two cities, two calls",
         "tool_calls": [call("get_weather", city="Paris"), call("get_weather", city="Lyon", days=3)]},
        {"role": "tool", "content": "12C"},
        {"role": "tool", "content": "14C"},
        {"role": "assistant", "content": "<think>compare</think>Paris 12C, Lyon 14C."},
        {"role": "user", "content": "Thanks. And Nice?"},
        {"role": "assistant", "content": "", "reasoning_content": "one more call",
         "tool_calls": [call("get_weather", city="Nice")]},
        {"role": "tool", "content": "18C"},
    ]


def render(tok, messages, **kw):
    return tok.apply_chat_template(messages, tokenize=False, **kw)


def test_tools_render_as_xml_signatures(tiny_tokenizer):
    text = render(tiny_tokenizer, conversation()[:2], tools=TOOLS, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<function>\n<name>get_weather</name>\n<description>Current weather.</description>" in text
    assert "<parameter>\n<name>unit</name>\n<type>string</type>\n<enum>[\"c\", \"f\"]</enum>\n</parameter>" in text
    assert '<required>["city"]</required>' in text
    assert text.endswith("<|im_start|>user\nWeather in Paris and Lyon?<|im_end|>\n<|im_start|>assistant\n<think>\n")


def test_parallel_tool_calls_and_grouped_responses(tiny_tokenizer):
    text = render(tiny_tokenizer, conversation(), tools=TOOLS)
    assert ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n<parameter=days>\n3\n"
            "</parameter>\n</function>\n</tool_call><|im_end|>") in text
    assert "<|im_start|>user\n<tool_response>\n12C\n</tool_response>\n<tool_response>\n14C\n</tool_response><|im_end|>" \
        in text


def test_reasoning_kept_only_after_last_user_query(tiny_tokenizer):
    text = render(tiny_tokenizer, conversation(), tools=TOOLS)
    assert "two cities" not in text and "compare" not in text  # earlier turns: dropped
    assert "Paris 12C, Lyon 14C." in text
    assert "<|im_start|>assistant\n<think>\none more call\n</think>\n\n<tool_call>" in text  # current turn: kept


def test_generation_prompt_with_and_without_thinking(tiny_tokenizer):
    msgs = [{"role": "user", "content": "hi"}]
    assert render(tiny_tokenizer, msgs, add_generation_prompt=True).endswith("<|im_start|>assistant\n<think>\n")
    off = render(tiny_tokenizer, msgs, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not render(tiny_tokenizer, msgs).startswith("<|im_start|>system")  # no tools, no system: no system turn


def test_string_arguments_are_rejected(tiny_tokenizer):
    msgs = [{"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}]
    with pytest.raises(Exception, match="must be a mapping"):
        render(tiny_tokenizer, msgs)


def test_special_tokens_are_single_tokens(tiny_tokenizer):
    for token in ("<|im_start|>", "<|im_end|>", "<think>", "<tool_call>", "</tool_response>"):
        assert len(tiny_tokenizer(token, add_special_tokens=False)["input_ids"]) == 1, token
