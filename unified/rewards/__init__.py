"""World-model rewards: the rubric judge, rule verifiers, their mix, in TRL's reward-function form.

See :mod:`unified.rewards.entries` for a recipe's list of rewards (registered names or dotted
paths, weights, training-only shaping terms) and :func:`build_rewards`,
:mod:`unified.rewards.functions` for the reward functions (named, stateless; mixed by TRL's
weighted sum) and the paper's math, :mod:`unified.rewards.rubric` for the judge prompt
and parser, :mod:`unified.rewards.verifiers` for the binary rule checks (after
:func:`unified.text.normalise_runtime`), :mod:`unified.rewards.similarity` for the graded rule
scores (LCS / token F1). The judge itself is :class:`unified.inference.judge.Judge` (a cached judge
over any chat model).
"""

from unified.rewards.entries import (
    REWARDS,
    CallableEntry,
    RepetitionEntry,
    RewardEntry,
    RubricEntry,
    RuleEntry,
    SimilarityEntry,
    build_rewards,
    check_entries,
    default_rewards,
    find_entry,
)
from unified.rewards.functions import (
    RULE_SCALE,
    JudgeSettings,
    RewardFunction,
    RubricReward,
    RuleReward,
    SimilarityReward,
    build_judge,
)
from unified.rewards.rubric import CRITERIA, JUDGE_SYSTEM, JudgeScores, judge_messages, parse_judge_answer
from unified.rewards.similarity import SIMILARITY_METRICS, lcs_f1, lcs_length, token_f1, tokens
from unified.rewards.verifiers import Verdict, exact_match, json_agreement, verify
from unified.text import normalise_runtime

__all__ = [
    "CRITERIA", "JUDGE_SYSTEM", "REWARDS", "RULE_SCALE", "SIMILARITY_METRICS", "CallableEntry", "JudgeScores",
    "JudgeSettings", "RepetitionEntry", "RewardEntry", "RewardFunction", "RubricEntry", "RubricReward", "RuleEntry",
    "RuleReward", "SimilarityEntry", "SimilarityReward", "Verdict", "build_judge", "build_rewards", "check_entries",
    "default_rewards", "exact_match", "find_entry", "judge_messages", "json_agreement", "lcs_f1", "lcs_length",
    "normalise_runtime", "parse_judge_answer", "token_f1", "tokens", "verify",
]
