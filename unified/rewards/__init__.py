"""World-model rewards: the rubric judge, rule verifiers, their mix, in TRL's reward-function form.

See :mod:`unified.rewards.functions` for the reward functions (named, weighted, stateless; mixed
by TRL's weighted sum) and the paper's math, :mod:`unified.rewards.rubric` for the judge prompt
and parser, :mod:`unified.rewards.verifiers` for the binary rule checks (after
:func:`unified.text.normalise_runtime`), :mod:`unified.rewards.similarity` for the graded rule
scores (LCS / token F1). The judge itself is :class:`unified.inference.judge.Judge` (a cached judge
over any chat model).
"""

from unified.rewards.functions import (
    RULE_SCALE,
    RewardConfig,
    RewardFunction,
    RubricReward,
    RuleReward,
    SimilarityReward,
    build_judge,
    build_reward_functions,
    reward_weights,
)
from unified.rewards.rubric import CRITERIA, JUDGE_SYSTEM, JudgeScores, judge_messages, parse_judge_answer
from unified.rewards.similarity import SIMILARITY_METRICS, lcs_f1, lcs_length, token_f1, tokens
from unified.rewards.verifiers import Verdict, exact_match, json_agreement, verify
from unified.text import normalise_runtime

__all__ = [
    "CRITERIA", "JUDGE_SYSTEM", "RULE_SCALE", "SIMILARITY_METRICS", "SimilarityReward",
    "lcs_f1", "lcs_length", "token_f1", "tokens", "JudgeScores",
    "RewardFunction", "RewardConfig", "RubricReward", "RuleReward", "Verdict", "build_judge", "build_reward_functions", "exact_match", "judge_messages",
    "json_agreement", "normalise_runtime", "parse_judge_answer", "reward_weights", "verify",
]
