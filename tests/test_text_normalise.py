"""One runtime-noise normaliser (unified.text.normalise_runtime) for the rewards and the trace.

Before, ``unified.rewards.verifiers.normalise_runtime`` and ``unified.trace.score.normalise`` (now ``unified.predict.score``)
had their own rule lists and disagreed: the trace ran its hex rule before its UUID rule (two
different UUIDs stayed different), and knew no epoch seconds, memory addresses, ``µs``
durations, ``/var/tmp`` paths or clock times without seconds; the rewards knew no full weekday
and month names. Each pair below differs only in runtime metadata that one of the two missed.
"""

from __future__ import annotations

import pytest

from unified.rewards import exact_match, lcs_f1, normalise_runtime
from unified.text import normalise_runtime as shared
from unified.trace import rule_match
from unified.predict.score import normalise as trace_normalise

PAIRS = [
    # the trace's hex rule ate the UUID's last group first
    ("request 123e4567-e89b-12d3-a456-426614174000 accepted", "request 00000000-1111-2222-3333-444444444444 accepted"),
    ("started at 1714557600.25", "started at 1764557600.75"),  # epoch seconds
    ("segfault at 0x7ffd5e8c10 in worker", "segfault at 0x55d0aa12f0 in worker"),  # addresses
    ("elapsed: 3 µs", "elapsed: 870 µs"),  # micro-second durations
    ("wrote /var/tmp/build-1/out.log", "wrote /var/tmp/zz/out.log"),  # /var/tmp paths
    ("backup finished 9:13", "backup finished 23:59"),  # clock time without seconds
    # the rewards knew no full weekday and month names
    ("next run Monday January 12", "next run Friday March 3"),
]


@pytest.mark.parametrize("a, b", PAIRS)
def test_rewards_and_trace_agree_on_runtime_metadata(a, b):
    assert exact_match(a, b).passed
    assert trace_normalise(a) == trace_normalise(b)
    assert lcs_f1(a, b) == 1.0
    assert normalise_runtime is shared


def test_trace_fact_check_ignores_a_different_uuid_in_a_json_leaf():
    claim = '{"status": "ok", "id": "123e4567-e89b-12d3-a456-426614174000"}'
    obs = '{"status": "ok", "id": "9b2c1f00-aaaa-4bbb-8ccc-0123456789ab"}'
    verdict = rule_match(claim, obs)
    assert (verdict.method, verdict.score) == ("rule:json", 1.0)


def test_content_still_counts_and_fold_only_changes_case_and_blanks():
    assert not exact_match("total 3", "total 4").passed
    assert trace_normalise("Total 3") != trace_normalise("Total 4")
    text = "Line ONE  at 2024-01-02T10:11:12Z\r\n\tpid=4242 ok  \nsecond"
    assert shared(text) == "Line ONE at <timestamp>\npid <pid> ok\nsecond"
    assert shared(text, fold=True) == "line one at <timestamp> pid <pid> ok second"
    for value in [text, *[x for pair in PAIRS for x in pair]]:
        assert shared(shared(value)) == shared(value)
        assert shared(shared(value, fold=True), fold=True) == shared(value, fold=True)


def test_words_that_start_like_a_weekday_are_content():
    assert shared("Friends March 3") == "Friends March 3"
    assert shared("monthly jan 5") == "monthly jan 5"
