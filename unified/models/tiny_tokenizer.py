"""The tiny byte-level BPE tokenizer of the tiny test models (:mod:`unified.models.tiny`,
:mod:`unified.models.tiny_qwen35`), trained locally on a fixed corpus (no download)."""

from __future__ import annotations

from unified.models.chat_template import CHAT_SPECIAL_TOKENS, qwen35_chat_template

_CORPUS = [
    "The agent calls a tool and the environment answers with an observation.",
    "ls -la /workspace\ntotal 8\ndrwxr-xr-x 2 root root 4096 Jan  1 00:00 .",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "<tool_call>\n<function=search>\n<parameter=query>\nworld models\n</parameter>\n</function>\n</tool_call>",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5",
    "Error: file not found. Traceback (most recent call last): ValueError 0123456789",
    "Predict the next observation of the environment given the history and the action.",
    "user assistant system tool think reasoning answer observation prediction reward",
]


def train_tiny_tokenizer(vocab_size: int = 512):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained locally (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", *CHAT_SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=[t for t in CHAT_SPECIAL_TOKENS if t != "<|im_end|>"],
    )
    fast.chat_template = qwen35_chat_template()
    return fast
