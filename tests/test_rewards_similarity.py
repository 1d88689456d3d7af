"""Graded rule reward (unified.rewards.similarity): hand-computed pairs, LCS vs the DP table, GSPO variance."""

from __future__ import annotations

import random
import statistics

import pytest

from unified.rewards import (
    RULE_SCALE,
    SIMILARITY_METRICS,
    RuleEntry,
    RuleReward,
    SimilarityEntry,
    SimilarityReward,
    build_rewards,
    default_rewards,
    lcs_f1,
    lcs_length,
    token_f1,
    tokens,
)

# (prediction, reference, lcs_f1, token_f1), values worked out by hand from the token lists
HAND_PAIRS = [
    ("a b c d", "a c d e", 2 * 3 / 8, 2 * 3 / 8),            # LCS a c d; bag overlap {a, c, d}
    ("d c b a", "a b c d", 2 * 1 / 8, 1.0),                  # reversed: LCS 1, same bag
    ("hello   world\r\n", "hello world", 1.0, 1.0),          # whitespace collapsed
    ('{"result": 12.0}', '{"result": 193.0}', 2 * 8 / 18, 2 * 8 / 18),  # 9 tokens each, the number differs
    ("[exit code: 0]", "app.log\n[exit code: 0]", 2 * 6 / 15, 2 * 6 / 15),  # 6 of the reference's 9 tokens
    ("x x x", "x y", 2 * 1 / 5, 2 * 1 / 5),                  # repeats count once per matching occurrence
    ("", "", 1.0, 1.0),                                      # empty observation predicted as empty
    ("", "output", 0.0, 0.0),
    ("output", "", 0.0, 0.0),
    ("completely different", "nothing shared here", 0.0, 0.0),
]


@pytest.mark.parametrize("prediction, reference, lcs, bag", HAND_PAIRS)
def test_hand_computed_pairs(prediction, reference, lcs, bag):
    assert lcs_f1(prediction, reference) == pytest.approx(lcs)
    assert token_f1(prediction, reference) == pytest.approx(bag)


def test_tokens_split_words_and_punctuation_after_runtime_normalisation():
    assert tokens('{"a": 1}') == ["{", '"', "a", '"', ":", "1", "}"]
    assert tokens("done in 2.5s at 2024-05-01T10:00:00Z, pid 4242") == \
        ["done", "in", "<duration>", "at", "<timestamp>", ",", "pid", "<pid>"]


def test_runtime_metadata_neither_rewarded_nor_punished():
    ref = "created 2024-01-02T03:04:05Z id 123e4567-e89b-12d3-a456-426614174000 in /tmp/abc123/x"
    pred = "created 2025-12-31T23:59:59Z id 00000000-1111-2222-3333-444444444444 in /tmp/zzz/y"
    assert lcs_f1(pred, ref) == 1.0 and token_f1(pred, ref) == 1.0


def _lcs_table(a, b) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev_diag = 0
        for j, y in enumerate(b, 1):
            prev_diag, row[j] = row[j], prev_diag + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def test_bit_parallel_lcs_equals_the_dynamic_programming_table():
    rng = random.Random(5)
    for _ in range(400):
        alphabet = "abcdef"[:rng.randint(1, 6)]
        a = [rng.choice(alphabet) for _ in range(rng.randint(0, 70))]
        b = [rng.choice(alphabet) for _ in range(rng.randint(0, 70))]
        assert lcs_length(a, b) == _lcs_table(a, b) == lcs_length(b, a)


def test_bounds_and_ordering_on_random_text():
    rng = random.Random(7)
    words = ["ls", "cat", "{", "}", '"', "ok", "error", "0", "1", ":"]
    for _ in range(300):
        p = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        g = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        lcs, bag = lcs_f1(p, g), token_f1(p, g)
        assert 0.0 <= lcs <= bag <= 1.0
        assert lcs == lcs_f1(g, p) and bag == token_f1(g, p)  # symmetric
        assert lcs_f1(g, g) == 1.0


def test_reward_is_scaled_to_the_rule_range_and_parses_the_answer_block():
    fn = SimilarityReward()
    completions = [
        [{"role": "assistant", "content": "<think>guess</think><predicted_observation>a c d e"
                                          "</predicted_observation>"}],
        "a b c d",
        "zzz",
    ]
    values = fn(None, completions, reference=["a b c d"] * 3)
    assert values == pytest.approx([RULE_SCALE * 0.75, RULE_SCALE, 0.0])
    breakdowns = fn.breakdowns(None, completions, reference=["a b c d"] * 3)
    assert [b.components["lcs_f1"] for b in breakdowns] == pytest.approx([0.75, 1.0, 0.0])
    assert all(b.source == "similarity" and b.parsed for b in breakdowns)
    bag = SimilarityReward("token_f1")
    assert bag(None, ["d c b a"], reference=["a b c d"]) == [RULE_SCALE]


def test_graded_reward_gives_a_gspo_group_variance_where_the_binary_rule_gives_none():
    reference = '{"lockStatus": "locked", "remainingUnlockedDoors": 0}'
    group = ['{"lockStatus": "unlocked", "remainingDoors": 2}', '{"status": "ok"}', "Door locked.",
             '{"lockStatus": "locked"}']
    rule = RuleReward()(None, group, reference=[reference] * 4)
    graded = SimilarityReward()(None, group, reference=[reference] * 4)
    assert statistics.pstdev(rule) == 0.0  # every completion fails the shape check: zero advantage
    assert statistics.pstdev(graded) > 0.0
    # 15 reference tokens; LCS 12 of 15, 7 of 9, 1 of 3 ("locked"), 9 of 9: F = 2 LCS / (n + m)
    assert graded == pytest.approx([RULE_SCALE * f for f in (24 / 30, 14 / 24, 2 / 18, 18 / 24)])
    assert graded[0] > graded[3] > graded[1] > graded[2] > 0.0  # closer predictions score higher


def test_config_builds_and_weights_the_similarity_reward():
    assert SIMILARITY_METRICS.get("lcs_f1") is lcs_f1 and SIMILARITY_METRICS.get("token_f1") is token_f1
    funcs, weights = build_rewards([SimilarityEntry(name="similarity", weight=1.0)])
    assert [f.__name__ for f in funcs] == ["similarity"] and weights == [1.0]
    both = [RuleEntry(name="rule", weight=0.5), SimilarityEntry(name="similarity", weight=0.5, metric="token_f1")]
    funcs, weights = build_rewards(both)
    assert [f.__name__ for f in funcs] == ["rule", "similarity"]
    per_func = [f(None, ["a b", "b a"], reference=["a b", "a b"]) for f in funcs]
    mixed = [sum(w * values[i] for w, values in zip(weights, per_func)) for i in range(2)]  # TRL's weighted sum
    assert mixed == pytest.approx([25.0, 12.5])
    assert "similarity" not in [e.name for e in default_rewards()]  # the paper's mix is unchanged
    with pytest.raises(ValueError, match="lcs_f1"):
        SimilarityEntry(name="similarity", weight=1.0, metric="lcs")
