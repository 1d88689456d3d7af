"""The library's chat template: Qwen3.5-style tools, tool calls and ``<think>`` reasoning.

One template serves the embedded default model and the tiny test models, and renders the
same wire format a real Qwen3.5-35B-A3B checkpoint uses, so prompt construction and
tool-call parsing (``unified.agent``) are one code path for all of them. A checkpoint that
ships its own template keeps it; ``load_checkpoint`` only installs ours where a model has none
suitable (the embedded model, tiny models).

Rendered shape (``enable_thinking`` defaults to true)::

    <|im_start|>system
    {system}

    # Tools
    ...<tools><function><name>f</name>...<parameters>...</parameters></function></tools>...<|im_end|>
    <|im_start|>user
    {question}<|im_end|>
    <|im_start|>assistant
    <think>
    {reasoning}
    </think>

    <tool_call>
    <function=f>
    <parameter=x>
    1
    </parameter>
    </function>
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {result}
    </tool_response><|im_end|>
    <|im_start|>assistant
    <think>
"""

from __future__ import annotations

from importlib import resources

CHAT_SPECIAL_TOKENS = (
    "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>",
)
"""Tokens the template relies on (special tokens in the tiny test tokenizer)."""

TEMPLATE_NAME = "qwen35_tools.jinja"


def qwen35_chat_template() -> str:
    """The Jinja source of the template (shipped as package data)."""
    return resources.files("unified.models").joinpath("templates").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")


def install_chat_template(tokenizer) -> None:
    """Give ``tokenizer`` our template.

    ``<|im_start|>``/``<|im_end|>`` must already be single tokens (they are in ChatML
    vocabularies such as SmolLM2's and Qwen's). The reasoning and tool tags are *not* added:
    they tokenize as ordinary text, which leaves the vocabulary, and so the logits of an
    upcycled model, exactly those of its source model.
    """
    vocab = tokenizer.get_vocab()
    for required in ("<|im_start|>", "<|im_end|>"):
        if required not in vocab:
            raise ValueError(f"tokenizer has no {required!r} token: the chat template needs a ChatML vocabulary")
    tokenizer.chat_template = qwen35_chat_template()
