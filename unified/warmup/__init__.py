r"""World-model RL warmup with GSPO, on TRL's ``GRPOTrainer`` (``python -m unified.warmup``).

The warmup of the Qwen-AgentWorld report (Paradigm II: next-state prediction as a single-turn,
no-tool RL task on an SFT checkpoint, the same weights then evaluated as a multi-turn agent):
each prompt is a trajectory prefix (system prompt, alternating actions and observations, the
current action), the policy predicts the environment's next observation, and the reward
compares that prediction with the real one (rubric judge + rule verifier, mixed 9:1; one
sampled turn per trajectory). The policy is optimised with GSPO.

GSPO (Zheng et al., 2025, "Group Sequence Policy Optimization", arXiv:2507.18071). For a
prompt x, sample a group of G completions y_1..y_G from the old policy, score them
r_1..r_G, and normalise within the group:

.. math::

    \hat A_i = \frac{r_i - \mathrm{mean}(r_{1..G})}{\mathrm{std}(r_{1..G})}

The importance ratio is taken over the whole sequence and length-normalised (a geometric
mean of the per-token ratios, so that long and short completions live on the same scale):

.. math::

    s_i(\theta) = \left(\frac{\pi_\theta(y_i \mid x)}{\pi_{\theta_{old}}(y_i \mid x)}\right)^{1/|y_i|}
               = \exp\Big(\frac{1}{|y_i|}\sum_{t=1}^{|y_i|}
                 \log\frac{\pi_\theta(y_{i,t} \mid x, y_{i,<t})}{\pi_{\theta_{old}}(y_{i,t} \mid x, y_{i,<t})}\Big)

and the objective (maximised; no KL term) clips the sequence ratio:

.. math::

    J(\theta) = \mathbb{E}_{x,\{y_i\}}\Big[\frac{1}{G}\sum_{i=1}^{G}
        \min\big(s_i(\theta)\hat A_i,\ \mathrm{clip}(s_i(\theta), 1-\varepsilon, 1+\varepsilon_{high})\hat A_i\big)\Big]

with the warmup's ε = 3e-4, ε_high = 4e-4 (sequence-level ratios sit much closer to 1 than
token-level ones, hence clip ranges two orders of magnitude below GRPO's 0.2).

Shapes, in TRL's implementation that we configure rather than rewrite
(``importance_sampling_level="sequence"``, ``loss_type="grpo"``, ``beta=0``):
per-token log-probs ``(B, T)`` over the completion tokens, a completion mask ``(B, T)``
(1 up to and including EOS, 0 on padding), advantages ``(B,)`` with B = prompts x G;
``log s_i = sum_t(mask * (logp - logp_old)) / sum_t(mask)`` is ``(B, 1)``, so padding never
enters the ratio; the loss is ``-mean_i min(s_i A_i, clip(s_i) A_i)`` (the per-token broadcast
of the sequence term, averaged over each sequence's own tokens, then over sequences). The MoE
router's load-balancing loss (Switch/Mixtral style, weight ``router_aux_loss_coef``) is added
to it and logged as ``aux_loss``.

Entry points: :func:`unified.warmup.trainer.run_warmup`, :func:`build_trainer`,
:func:`build_grpo_config`; recipes in ``recipes/warmup/``; ``slurm/lwm_warmup.sh`` for clusters.
"""

from unified.warmup.config import (
    DataSection,
    GenerationSection,
    GSPOSection,
    LaunchSection,
    LoggingSection,
    ModelSection,
    TrainSection,
    WarmupConfig,
    load_warmup_config,
)

__all__ = [
    "DataSection", "GSPOSection", "GenerationSection", "LaunchSection", "LoggingSection", "ModelSection",
    "TrainSection", "WarmupConfig", "build_grpo_config", "build_trainer", "load_warmup_config", "run_warmup",
]


def __getattr__(name: str):  # the trainer pulls in TRL/torch: import it only when asked
    if name in ("build_grpo_config", "build_trainer", "run_warmup"):
        from unified.warmup import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'unified.warmup' has no attribute {name!r}")
