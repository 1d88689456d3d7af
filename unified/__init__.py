"""unified: world-model RL warmup (GSPO) and multi-turn agent evaluation of the same weights.

Paradigm II of the Qwen-AgentWorld report: next-state prediction ("what will the environment
answer to this action?") is trained as a single-turn RL task on an SFT checkpoint of a
mixture-of-experts model; the resulting weights are then evaluated, untouched, as a
multi-turn tool-calling agent. ``docs/architecture.md`` gives the layout, the data flow and the
dependency rules.

Submodules are imported lazily so that ``import unified`` stays cheap (no torch import).
"""

__version__ = "0.2.0"
"""The package version; its major.minor is the adapter SDK's (``unified.benchmarks.SDK_VERSION``)."""
