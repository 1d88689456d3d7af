"""Rule verifiers: normalised exact match, JSON agreement, and their properties."""

from __future__ import annotations

import json
import random
import string

import pytest

from unified.rewards import RuleReward, exact_match, json_agreement, normalise_runtime, verify


def test_runtime_metadata_is_normalised_but_content_is_not():
    a = "-rw-r--r-- 1 agent agent 12 Nov 14 09:13 notes.txt\ncreated at 2024-01-02T10:11:12Z pid 4242 in /tmp/tmp8x_1"
    b = "-rw-r--r-- 1 agent agent 12 Jan  3 23:59 notes.txt\ncreated at 2025-06-30T00:00:01+02:00 pid 17 in /tmp/abc"
    assert exact_match(a, b).passed
    assert normalise_runtime("took 0.52s, id 3f2a9c0d-1111-2222-3333-444455556666") == "took <duration>, id <uuid>"
    assert not exact_match(a.replace("notes.txt", "other.txt"), b).passed
    assert not exact_match("total 3\n[exit code: 0]", "total 4\n[exit code: 0]").passed
    assert exact_match("x  y \r\n", "x y\n").passed


def test_json_agreement_checks_shape_not_values():
    ref = json.dumps({"status": "ok", "items": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], "total": 2})
    same_shape = json.dumps({"total": 9, "status": "fine", "items": [{"id": 7, "name": "x"}, {"id": 8, "name": "y"}]})
    assert json_agreement(same_shape, ref).passed
    missing = json.dumps({"status": "ok", "items": [{"id": 1}, {"id": 2, "name": "b"}], "total": 2})
    v = json_agreement(missing, ref)
    assert not v.passed and "$.items[0]" in v.message and "keys differ" in v.message
    assert "3 items" not in json_agreement(same_shape, ref).message
    shorter = json.dumps({"status": "ok", "items": [{"id": 1, "name": "a"}], "total": 2})
    assert "expected 2 items" in json_agreement(shorter, ref).message
    wrong_type = json.dumps({"status": 3, "items": [], "total": 2})
    assert not json_agreement(wrong_type, ref).passed
    assert json_agreement("{not json", ref).message == "prediction is not well-formed JSON"
    lines = '{"a": 1}\n{"b": [1, 2]}'
    assert json_agreement('{"a": 5}\n{"b": [0, 0]}', lines).passed
    assert not json_agreement('{"a": 5}', lines).passed


def test_verify_picks_the_check_from_the_reference():
    assert verify('{"k": 2}', '{"k": 1}').check == "json_agreement"
    assert verify("42", "42").check == "exact_match"  # a bare number is not a structured tool response
    assert verify("hello", "hello\n[exit code: 0]").passed is False


def _random_text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        obj = {rng.choice("abcdef"): rng.choice([1, "x", None, [1, 2], {"z": True}]) for _ in range(rng.randint(1, 4))}
        return json.dumps(obj)
    if kind < 0.4:
        return "\n".join(json.dumps({"i": i}) for i in range(rng.randint(1, 3)))
    alphabet = string.printable + "{}[]\":éß"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))


def test_properties_never_raise_identity_passes_binary_scale():
    rng = random.Random(99)
    rule = RuleReward()
    for _ in range(1500):
        ref, pred = _random_text(rng), _random_text(rng)
        verdict = verify(pred, ref)
        assert isinstance(verdict.passed, bool)
        assert verify(ref, ref).passed, ref  # the truth always passes
        assert normalise_runtime(normalise_runtime(ref)) == normalise_runtime(ref)  # idempotent
    completions = ["a", "b", [{"role": "assistant", "content": "a"}]]
    values = rule(None, completions, reference=["a", "a", "a"])
    assert values == [25.0, 0.0, 25.0]
    assert [b.source for b in rule.breakdowns(None, completions, reference=["a", "a", "a"])] == ["rule"] * 3


@pytest.mark.parametrize("deep", [10, 5000])
def test_deeply_nested_json_is_handled(deep):
    text = "[" * deep + "]" * deep
    assert isinstance(verify(text, text).passed, bool)
