"""What ``python -m unified.eval`` takes: :class:`EvalConfig` (a recipe under ``recipes/eval/`` holds
the same keys; ``--set KEY=VALUE`` reaches any of them). Its ``sampling`` and ``limits`` sections are
the library's own :class:`~unified.inference.base.SamplingConfig` and
:class:`~unified.benchmarks.contract.AgentLimits`, so a knob has one name from flag to record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from unified.benchmarks.contract import AgentLimits
from unified.config import bounded
from unified.eval.general import GeneralConfig
from unified.inference.base import SamplingConfig


@dataclass
class EvalConfig:
    """Everything ``python -m unified.eval`` takes (a recipe holds the same keys)."""

    suite: str | None = None
    """``ood``, ``in_domain``, ``all`` (the two), any suite an installed adapter declares, ``general``
    (lm-evaluation-harness; not part of ``all``), or several comma-separated (``general,ood``). Suites are
    what the adapters declare (:mod:`unified.benchmarks.discovery`)."""
    benchmarks: list[str] = field(default_factory=list)
    """Benchmark names (or ``module:Factory`` import paths) in addition to the suite."""
    model: str = "embedded"
    """``embedded``, a checkpoint dir, a .gguf, ``openai:URL#MODEL``, ``vllm:PATH`` or ``gold``."""
    backend: Literal["auto", "hf", "vllm", "openai"] | None = "auto"
    """The engine of a local checkpoint spec: ``hf`` (in-process), ``vllm`` (a vLLM server) or ``auto``
    (vLLM on a CPU machine where ``make vllm`` was run, else in-process: :mod:`unified.eval.engine`);
    ``openai`` for an endpoint. None (older run records) reads as ``auto``. A run directory records
    the engine actually used."""
    prompting: str = "act"
    prompting_options: dict[str, Any] = field(default_factory=dict)
    out: str = "runs/eval"
    split: str | None = None
    """Benchmark-specific split/category selection passed to ``tasks``."""
    limit: int | None = bounded(None, ge=1)
    """Tasks per benchmark."""
    task_ids: list[str] = field(default_factory=list)
    """Run only these task ids (and the tasks they depend on); ``limit`` then applies to them."""
    runs: int | None = bounded(None, ge=1)
    """Rollouts per task (default: each benchmark's protocol)."""
    max_in_flight: int = bounded(8, ge=1)
    """Episodes generated together (the batch size of the ``hf`` backend)."""
    scheduling: str = "auto"
    """``auto`` | ``continuous`` | ``rounds``: how the policy's engine batches the episodes' requests
    (:data:`unified.agent.loop.SCHEDULING`; auto = continuous batching where the backend has it)."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Decoding of every policy call (``--temperature``, ``--top-p``, ``--max-new-tokens``, ``--thinking``,
    ``--seed``)."""
    limits: AgentLimits = field(default_factory=AgentLimits)
    """Per-episode limits (``--max-turns``, ``--max-steps-per-turn``, ``--max-episode-tokens``,
    ``--max-seconds``); an adapter's protocol may tighten them (``Adapter.agent_limits``)."""
    benchmark_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-benchmark adapter config, e.g. ``{bfcl_v4: {categories: multi_turn}}``."""
    general: GeneralConfig = field(default_factory=GeneralConfig)
    """The ``general`` suite's lm-eval options (:class:`unified.eval.general.GeneralConfig`)."""
    shard: str | None = None
    """``I/N``: run only shard I of N of the (task, trial) pairs (:mod:`unified.eval.shards`)."""
