"""Predict-then-act prompting modules (``--prompting act|predict_then_act|predict_then_act_reflect``).

Importing this package registers the modules in :data:`unified.agent.prompting.PROMPTING`;
the entry points of ``pyproject.toml`` (group ``unified.prompting``) let ``make_prompting`` find them
without the loop naming this package. The explicit prediction
block format lives in :mod:`unified.predict.blocks`; :mod:`unified.predict.extract` finds the
predictions of a step (explicit blocks, implicit statements) and aligns each with its
observation, :mod:`unified.predict.score` scores one by rule. :mod:`unified.trace` builds its
run-level analysis on these.
"""

from unified.predict.blocks import PREDICTION_TAG, PREDICTION_TAGS, PredictionBlock, find_blocks, strip_blocks
from unified.predict.modules import PredictThenAct, PredictThenActReflect

__all__ = ["PREDICTION_TAG", "PREDICTION_TAGS", "PredictionBlock", "PredictThenAct", "PredictThenActReflect",
           "find_blocks", "strip_blocks"]
