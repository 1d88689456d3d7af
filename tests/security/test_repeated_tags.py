"""Model output with many repeated tags parses in linear time, with the same results as before.

The lazy regexes these readers used (``<think>.*?</think>``, ``<parameter=...>(.*?)...``,
``<predicted_observation>(.*?)...``, ``<scores>(.*?)</scores>``, the prediction-block closer
search) were quadratic on a completion of many openers and no closer: 32,000 repeated tags took
from a minute to several (the agent loop stalled on one completion). Two checks:

- the new scans give what the old regexes gave, on many random texts built from tag fragments
  (the regexes are the oracle; they are fast on short texts);
- 32,000 repeated tags run in a child process under a generous time limit (minutes before,
  a fraction of a second now: the figures are in the change's report, not asserted here).
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from unified.chatformat.toolcalls import _named_tags, parse_completion
from unified.chatformat.reasoning import strip_reasoning
from unified.chatformat.scan import NextMatch, remove_tag_blocks, tag_blocks
from unified.chatformat.observation import parse_observation

ROOT = Path(__file__).resolve().parents[2]

_OLD_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|\Z)", re.DOTALL)
_OLD_PARAM = re.compile(r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
_FRAGMENTS = ["<think>", "</think>", "<parameter=", "</parameter>", "<function=", "</function>", ">", "\n",
              "a", "b c", "<", "<scores>", "</SCORES>", "<predicted_observation>", "</predicted_observation>",
              "x=1", " "]


def _random_texts(n: int = 600, seed: int = 7):
    rng = random.Random(seed)
    for _ in range(n):
        yield "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 14)))


def test_tag_blocks_match_the_lazy_regex():
    for text in _random_texts():
        for open_tag, close_tag, flags in (("<think>", "</think>", 0), ("<scores>", "</scores>", re.IGNORECASE)):
            pattern = re.compile(re.escape(open_tag) + "(.*?)" + re.escape(close_tag), re.DOTALL | flags)
            expected = [(m.start(), m.start(1), m.end(1), m.end()) for m in pattern.finditer(text)]
            got = [(b.start, b.body_start, b.body_end, b.end) for b in tag_blocks(text, open_tag, close_tag, flags)]
            assert got == expected, text
            assert remove_tag_blocks(text, open_tag, close_tag, flags) == pattern.sub("", text), text


def test_named_tags_match_the_parser_regexes():
    for text in _random_texts(1500, seed=11):
        old_fn = _OLD_FUNCTION.search(text)
        new_fn = next(_named_tags(text, "<function=", "</function>", stop_at_next=False), None)
        assert new_fn == (old_fn.groups() if old_fn else None), text
        old_params = [m.groups() for m in _OLD_PARAM.finditer(text)]
        assert list(_named_tags(text, "<parameter=", "</parameter>", stop_at_next=True)) == old_params, text


def test_next_match_answers_like_a_fresh_search():
    text = "ab" * 50 + "zz" + "ab" * 5
    finder = NextMatch("zz", text)
    for pos in range(0, len(text) + 1, 3):
        assert finder.find(pos) == text.find("zz", pos)


def test_parsing_keeps_its_results():
    text = ("<think>plan</think>\n<tool_call>\n<function=search>\n<parameter=q>\nhello\n</parameter>\n"
            "<parameter=n>\n3\n<parameter=x>\n[1]\n</function>\n</tool_call>")
    parsed = parse_completion(text, [])
    assert parsed.reasoning == "plan"
    assert parsed.tool_calls[0].name == "search"
    assert parsed.tool_calls[0].arguments == {"q": "hello", "n": 3, "x": [1]}
    assert strip_reasoning("r</think> a <think>b</think> c <think> d") == "a  c"
    assert parse_observation("<predicted_observation>1</predicted_observation><predicted_observation>2"
                             "</predicted_observation>") == "2"


_FUZZ = textwrap.dedent("""
    from unified.chatformat.toolcalls import parse_completion
    from unified.chatformat.reasoning import strip_reasoning
    from unified.predict.blocks import find_blocks
    from unified.rewards.rubric import parse_judge_answer
    from unified.chatformat.observation import parse_observation
    N = 32000
    assert strip_reasoning("a</think>" + "<think>" * N) == ""
    calls = parse_completion("<tool_call>\\n<function=a>\\n" + "<parameter=" * N, []).tool_calls
    assert len(calls) == 1 and calls[0].name == "a" and calls[0].arguments == {}
    calls = parse_completion("<tool_call>\\n" + "<function=" * N, []).tool_calls
    assert len(calls) == 1 and calls[0].parse_error
    assert parse_observation("<predicted_observation>" * N) == ""
    assert len(find_blocks("<prediction>" * N)) == N
    assert parse_judge_answer("<scores>" * N)[0] is None
    print("ok")
""")


def test_32000_repeated_tags_parse_in_linear_time():
    """Before: about 55 s (``<think>``) and 128 s (``<parameter=``) each; the limit is generous."""
    done = subprocess.run([sys.executable, "-c", _FUZZ], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_widesearch_json_fence_reader_matches_its_regex_and_is_linear():
    from evaluators.widesearch.metrics import _last_json_fence

    old = re.compile(r"```json\s*(\{.*?\})\s*```", re.S)
    rng = random.Random(5)
    pieces = ["```json", "```", "{", "}", " ", "\n", '"a": 1', "x", "``", "json"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        found = old.findall(text)
        assert _last_json_fence(text) == (found[-1] if found else None), text
    done = subprocess.run([sys.executable, "-c", "from evaluators.widesearch.metrics import _markdown_json\n"
                           "assert _markdown_json('```json{' * 32000) is None\nprint('ok')"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
