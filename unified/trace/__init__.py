"""Analysis of saved episodes: where next-state predictions appear, and whether they are right.

Public API (used by the notebooks; the per-step extraction and scoring live in
:mod:`unified.predict`, which the predict-then-act modules also run while an episode runs, so
``trace`` imports ``predict`` and never the reverse)::

    from unified.trace import trace_run, compare_runs
    run = trace_run("runs/predict")          # a `python -m unified.eval --out` directory
    run.stats()                              # prediction rate, accuracy, self-corrections per step
    run.stats("explicit"); run.stats("implicit")
    run.success_relation()                   # prediction accuracy vs task success
    run.episode_rows(); run.prediction_rows()   # flat dicts, e.g. for pandas
    compare_runs(trace_run(a), trace_run(b))    # benchmark deltas and prediction deltas

Pipeline: :mod:`~unified.trace.load` reads the run, :mod:`unified.predict.extract` finds
explicit blocks and implicit statements with their positions and aligns each with the
observation that followed, :mod:`unified.predict.score` scores it by rule (or
:mod:`~unified.trace.judge` with the rubric judge when an endpoint is given), and
:mod:`~unified.trace.stats` counts. :mod:`~unified.trace.plots` draws the notebooks' figures.
"""

from unified.trace.compare import compare_runs
from unified.predict.extract import (SELF_CORRECTION, Prediction, episode_key, episode_predictions,
                                     implicit_predictions, self_corrections, step_predictions)
from unified.trace.load import SavedRun, load_run
from unified.predict.score import RuleVerdict, facts, normalise, rule_match, score_prediction
from unified.trace.stats import EpisodeTrace, RunTrace, pearson, trace_episode, trace_run

__all__ = [
    "SELF_CORRECTION", "EpisodeTrace", "Prediction", "RuleVerdict", "RunTrace", "SavedRun", "compare_runs",
    "episode_key", "episode_predictions", "facts", "implicit_predictions", "load_run", "normalise", "pearson",
    "rule_match", "score_prediction", "self_corrections", "step_predictions", "trace_episode", "trace_run",
]
