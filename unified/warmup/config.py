"""The warmup recipe: one typed dataclass per YAML section (``recipes/warmup/*.yaml``).

A recipe is loaded with :func:`load_warmup_config` (strict: unknown keys name the file and
line, see :mod:`unified.config`) and turned into TRL's ``GRPOConfig`` by
:func:`unified.warmup.trainer.build_grpo_config`. The defaults are the GSPO setting of the
Qwen-AgentWorld warmup: sequence-level importance ratio, no KL term, clip range
``[1 - 3e-4, 1 + 4e-4]``, rewards mixed 9:1 (rubric:rule), one sampled turn per trajectory.

``rewards`` is a list of entries (:mod:`unified.rewards.entries`): ``[{name: rubric, weight: 0.9},
{name: rule, weight: 0.1}]`` by default, a training-only shaping term one entry among them
(``{name: repetition, weight: 5.0, training_only: true}``). The older form (``rewards.rubric_weight``,
``rule_weight``, ``similarity_weight`` and a ``shaping`` section) still loads, converted, with one
deprecation line naming the file and the new spelling; so do its ``--set`` keys.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from unified.config import ConfigError, bounded, load_config
from unified.rewards.entries import (LEGACY_KEYS, RewardEntry, benchmark_entries, check_entries, default_rewards,
                                     entries_not_applied, legacy_entries)
from unified.rewards.functions import JudgeSettings, judge_worst_case_s

Precision = Literal["auto", "bf16", "fp32"]
GpuModel = Literal["h100", "h200", "a100"]
GenerationBackend = Literal["hf", "vllm_server", "vllm_colocate"]
DistributedBackend = Literal["none", "ddp", "deepspeed_zero3", "fsdp2"]
CPU_DISTRIBUTED: tuple[str, ...] = ("ddp", "deepspeed_zero3")
"""Backends that run as several CPU processes (``launch.cpu_processes``); the others say why not."""
JUDGE_SHARE_OF_COLLECTIVE_TIMEOUT = 0.5
"""A judge's worst case may take at most this share of ``train.collective_timeout_s`` (the rest of a
step, generation first, happens before the reward gather too)."""
SHARDED_DISTRIBUTED: tuple[str, ...] = ("deepspeed_zero3", "fsdp2")
"""Backends whose ranks hold a shard of the weights (the collapse guard's probe needs them whole)."""
CPU_DISTRIBUTED_WHY = {
    "none": "one process has nothing to distribute; ",
    "fsdp2": "accelerate (1.15) applies FSDP only on accelerator devices (AcceleratorState picks FSDP for "
             "MULTI_GPU/XPU/NPU/..., never MULTI_CPU), so on CPUs it would run as plain data parallel; ",
}


@dataclass
class ModelSection:
    """The SFT checkpoint to warm up and how it is loaded."""

    name_or_path: str = "embedded"
    """Any ``unified.models.load_checkpoint`` spec: ``embedded``, a HF dir, a ``.gguf``, a hub id."""
    attn_implementation: str | None = None
    """``None``: :func:`unified.kernels.select_kernels` decides (FlashAttention on CUDA, SDPA on CPU)."""
    experts_implementation: str | None = None
    """``None``: ``grouped_mm`` where it runs, else ``eager``."""
    precision: Precision = "auto"
    """``auto`` = bf16 on CUDA, fp32 on CPU; ``bf16`` = bf16 autocast over fp32 master weights, also on a
    CPU with native bf16 instructions (AVX512-BF16/AMX), where it halves the saved activations."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (memory for ~20-30% more compute)."""
    trainable_layers: int | None = None
    """Train only the last N decoder layers and the final norm; the embeddings (tied to the LM head in
    the embedded model) and the lower layers stay frozen, so the backward stops at layer L-N and
    gradients, optimizer state and saved activations exist for those N layers only. ``None``: all."""
    router_aux_loss_coef: float | None = None
    """MoE load-balancing loss weight; ``None`` keeps the checkpoint's own value, 0 turns it off."""
    trust_remote_code: bool = False


@dataclass
class DataSection:
    """World-model RL prompts from :func:`unified.lwm.rl_dataset` (one sampled turn per trajectory)."""

    train: list[str] = field(default_factory=lambda: ["data/lwm"])
    """Files or directories of AgentWorldBench-format JSONL (relative paths: from the working dir)."""
    heldout: list[str] = field(default_factory=list)
    """Separate held-out files; empty = split ``heldout_size`` samples off ``train``."""
    heldout_size: int = bounded(0, ge=0)
    """Samples kept out of training for the before/after reward measurement."""
    validation_size: int = bounded(0, ge=0)
    """Samples split off the training rows (after the held-out split) and never trained on: the collapse
    guard's probe decodes them (``monitor.probe_size``, ``monitor.keep_best``). 0 = none; the probe then
    reads training rows."""
    limit: int | None = bounded(None, ge=1)
    """Use at most this many training samples (after the held-out and validation splits)."""
    max_prompt_tokens: int | None = bounded(None, ge=1)
    """Drop samples whose rendered prompt is longer (the paper: 128k)."""
    seed: int = 0
    """Seed of the turn sampling and of the held-out split."""


@dataclass
class GSPOSection:
    """The policy-optimisation objective (see :mod:`unified.warmup` for the math)."""

    epsilon: float = bounded(3e-4, ge=0, le=1)
    """Lower clip: s_i is clipped below at 1 - epsilon."""
    epsilon_high: float = bounded(4e-4, ge=0)
    """Upper clip: s_i is clipped above at 1 + epsilon_high."""
    beta: float = bounded(0.0, ge=0)
    """KL coefficient; 0 = no reference model, as in GSPO."""
    num_generations: int = 8
    """Group size G: completions sampled per prompt."""
    steps_per_generation: int | None = bounded(None, ge=1)
    """TRL's ``steps_per_generation``: micro-steps (of ``per_device_train_batch_size`` completions a process)
    that one generation batch is split into. A multiple k of ``train.gradient_accumulation_steps`` makes
    one generation batch feed k optimizer updates, each on its own minibatch (the GSPO paper splits each
    rollout batch into four minibatches): from the second update on, the policy that is trained is no
    longer the one that sampled, so s_i != 1 and the clip acts. ``None``: TRL's default, equal to
    ``gradient_accumulation_steps``, one update per generation, s_i == 1 exactly and GSPO's gradient is
    GRPO's."""
    num_iterations: int = bounded(1, ge=1)
    """Passes over each generation batch (TRL's ``num_iterations``, GRPO's mu); >1 also makes s_i move
    away from 1, by re-using the same completions. Updates per generation = ``num_iterations`` x
    ``steps_per_generation`` / ``gradient_accumulation_steps``."""
    importance_sampling_level: Literal["sequence", "token"] = "sequence"
    """``sequence`` = GSPO; ``token`` = GRPO (kept for ablations)."""
    loss_type: str = "grpo"
    """TRL aggregation; ``grpo`` averages each sequence over its tokens, then over sequences."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Advantage normalisation; ``group`` = (r - mean_group) / std_group."""
    mask_truncated_completions: bool = False
    """Exclude completions that hit ``max_completion_length`` from the loss."""
    vllm_importance_sampling_mode: Literal["token_truncate", "token_mask", "sequence_truncate",
                                           "sequence_mask"] = "token_truncate"
    """vLLM rollouts only: TRL's correction of the rollout engine's log-probs against the trainer's,
    ``w = exp(logp_train - logp_vllm)`` per token (``token_*``) or ``exp(sum_t ...)`` per sequence
    (``sequence_*``), clipped to ``[clip_min, clip_max]`` (``*_truncate``) or zeroed outside it
    (``*_mask``); the loss of each token is multiplied by its w. ``token_truncate`` (truncated IS): a
    sequence-level weight is a product over the completion's tokens, ``exp(-T x KL)`` in expectation,
    ~0.02 at T = 4,096 tokens and a per-token KL of 1e-3, which silences long completions; the token
    weights stay near 1 whatever T. TRL's own default is ``sequence_mask``."""
    vllm_importance_sampling_clip_max: float | None = bounded(2.0, gt=0)
    """The cap C_max of the correction weight (TRL's default 3.0; truncated IS uses 2)."""
    vllm_importance_sampling_clip_min: float | None = bounded(None, ge=0)
    """The floor C_min (``None``: none for ``*_truncate``, 0 for ``*_mask``)."""


@dataclass
class MonitorSection:
    """Collapse watch (:mod:`unified.warmup.guard`): degenerate completions logged every step, and a guard.

    Every step logs the share of the rollouts that are repetition loops or truncated
    (:mod:`unified.warmup.degenerate`). With ``probe_size`` P > 0 the guard also decodes P prompts
    (of the validation split when ``data.validation_size`` > 0, else training rows) greedily before training and after every step (the decoding the held-out score uses,
    which sampled rollouts can hide) and logs ``probe/loop_share``, ``probe/reward`` and
    ``probe/kl_to_start`` (mean per-token KL(pi_start || pi_theta) on the start's greedy answers).
    The step is *collapsed* when ``probe/loop_share - start >= max_probe_loop_rise`` or the rollouts'
    loop share ``>= max_rollout_loop_share``; then ``on_collapse`` says what happens. ``keep_best``
    ends the run with the weights of the step whose probe reward was highest (early stopping on a
    validation split).
    """

    probe_size: int = bounded(0, ge=0)
    """Prompts decoded greedily before training and after every step; 0 = no probe."""
    probe_kl: bool = True
    """Also log ``probe/kl_to_start`` (one more forward pass over the probe's answers a step, and the
    start's ``(T, V)`` log-probs kept in memory)."""
    max_probe_loop_rise: float | None = bounded(None, ge=0, le=1)
    """Collapse when the probe's loop share rose by at least this much over the start; None = never."""
    max_rollout_loop_share: float | None = bounded(None, ge=0, le=1)
    """Collapse when at least this share of a step's rollouts are loops; None = never."""
    on_collapse: Literal["log", "stop", "rollback"] = "log"
    """``log``: only report; ``stop``: end training with the current weights; ``rollback``: restore the
    trainable weights of the last step that did not collapse (the start if none) and end training."""
    rollout_max_mean_logp_diff: float | None = bounded(0.1, gt=0)
    """vLLM rollouts: the step-1 parity gate (:mod:`unified.warmup.rollout_check`) stops the run when the
    mean per-token |logp_train - logp_vllm| of the first generation batch is above this (nats); bf16
    kernels and MoE routing ties give ~1e-2, a rollout engine on other weights ~1 and more. None = off."""
    rollout_min_mean_weight: float | None = bounded(0.5, ge=0)
    """... or when the mean importance-sampling weight the loss applies is below this. The weight is read
    *before* TRL's clip (``exp(logp_train - logp_vllm)``, per token or per sequence as the mode takes it),
    so that a mismatch shows under ``token_truncate`` too, whose clipped weights stay near 1. None = off."""
    rollout_max_logp_diff_rise: float | None = bounded(3.0, gt=1)
    """vLLM rollouts, every generation batch after the first: stop (``weights not synced``) when the mean
    per-token |logp_train - logp_vllm| exceeds ``max(this x batch 1's, batch 1's + 0.02)`` nats. Batch 1
    is measured right after the first sync, when both sides hold the same checkpoint; a sync that later
    fails leaves the engine on older weights, and the difference grows with every update. None = off."""
    rollout_probe_max_logp_diff: float | None = bounded(0.1, gt=0)
    """vLLM rollouts: after every weight sync, the rollout engine scores a fixed probe sequence (the first
    training prompt) and the trainer scores it too; a mean per-token |difference| above this many nats
    stops the run (``weights not synced``). None = off."""
    max_dropped_share: float | None = bounded(0.5, ge=0, le=1)
    """Stop (checkpoint first) when ``rewards/dropped_share`` (samples a judge-backed reward could not
    score: the judge failed or answered unparseably) is above this for ``patience_batches`` generation
    batches in a row. None = off."""
    max_zero_variance_share: float | None = bounded(1.0, ge=0, le=1)
    """Stop (checkpoint first) when ``rewards/zero_variance_share`` (groups whose scored samples all got the
    same total reward, or fewer than two were scored: advantage 0, no gradient) is at least this for
    ``patience_batches`` generation batches in a row. None = off."""
    patience_batches: int = bounded(2, ge=1)
    """Consecutive generation batches over ``max_dropped_share`` / ``max_zero_variance_share`` before the
    run stops."""
    keep_best: bool = False
    """At the end of training, restore the trainable weights of the step (the start included) with the
    highest ``probe/reward`` on the validation split, so that ``final/`` holds them (one in-memory copy
    of the trainable parameters). Needs ``probe_size`` > 0 and ``data.validation_size`` > 0: selecting
    on training rows or on the held-out rows would be selecting on what is trained or measured."""


@dataclass
class GenerationSection:
    """How rollouts are produced."""

    backend: GenerationBackend = "hf"
    """``hf`` (in-process ``generate``), ``vllm_server`` (``trl vllm-serve`` on another node) or
    ``vllm_colocate`` (vLLM inside the trainer processes)."""
    max_completion_length: int = bounded(512, ge=1)
    temperature: float = bounded(1.0, ge=0)
    top_p: float = bounded(1.0, gt=0, le=1)
    top_k: int = bounded(0, ge=0)
    repetition_penalty: float = bounded(1.0, gt=0)
    """Rollouts only (TRL's ``repetition_penalty``, CTRL's penalty): the logit ``z`` of every token
    already in the prompt or the completion so far becomes ``z / p`` if ``z > 0`` else ``z * p``;
    1.0 = off. The held-out scoring of ``--eval-before-after`` decodes without it."""
    thinking: bool = False
    """Passed to the chat template (its ``enable_thinking``); world-model answers are judged without
    the reasoning anyway."""
    cpu_threads: int | None = None
    """torch intra-op threads while ``hf`` generation runs on a CPU (training keeps torch's default).
    Decoding is thousands of small ops a token; on a busy machine each parallel region waits for
    a descheduled thread, and 1 thread decoded 40x faster than 2 on the 2-core CI machine.
    ``None``: torch's default."""
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = bounded(8000, ge=1, le=65535)
    vllm_server_timeout_s: float = bounded(600.0, gt=0)
    vllm_gpu_memory_utilization: float = bounded(0.3, gt=0, le=1)
    """Colocate mode only."""
    vllm_tensor_parallel_size: int = bounded(1, ge=1)
    """Colocate mode: TP inside the trainer; server mode: passed to ``trl vllm-serve``."""
    vllm_max_model_length: int | None = None
    """Context window of the vLLM engine (prompt + completion)."""

    RENAMED = {"enable_thinking": "thinking"}  # old key -> new (unified.config.from_dict)


@dataclass
class TrainSection:
    """Optimiser, batch and checkpoint schedule (HF ``TrainingArguments`` names)."""

    max_steps: int = bounded(100, ge=1)
    learning_rate: float = bounded(1e-6, gt=0)
    lr_scheduler_type: str = "constant"
    warmup_steps: int = bounded(0, ge=0)
    weight_decay: float = bounded(0.0, ge=0)
    max_grad_norm: float = bounded(1.0, gt=0)
    optim: str = "adamw_torch"
    """HF ``TrainingArguments.optim``: ``adamw_torch`` (8 bytes of state a parameter), ``adafactor``
    (factored second moment, no first moment), ``sgd``, ..."""
    per_device_train_batch_size: int = bounded(8, ge=1)
    """Completions per device per micro-step (must hold whole groups across the generation batch)."""
    gradient_accumulation_steps: int = bounded(1, ge=1)
    save_steps: int = bounded(50, ge=1)
    save_total_limit: int | None = bounded(3, ge=1)
    logging_steps: int = bounded(1, ge=1)
    seed: int = 0
    dataloader_num_workers: int = bounded(0, ge=0)
    collective_timeout_s: float = bounded(1800.0, gt=0)
    """How long a rank waits in a collective (NCCL/gloo) before the job fails (HF's ``ddp_timeout``).
    While one rank waits on its rubric judge the others wait in the reward gather, so the recipe check
    refuses a judge whose worst case (:func:`unified.rewards.functions.judge_worst_case_s`) is more than
    half of it."""


@dataclass
class LoggingSection:
    """wandb (offline by default, all of its directories under ``<output_dir>/wandb``) and JSONL metrics."""

    wandb: bool = True
    wandb_mode: Literal["offline", "online"] = "offline"
    wandb_project: str = "unified-warmup"
    run_name: str | None = None
    log_completions: bool = False
    """Also log a table of prompts/completions/rewards (TRL's ``log_completions``)."""


@dataclass
class LaunchSection:
    """How ``--dry-run`` and ``slurm/lwm_warmup.sh`` lay the job out on nodes."""

    nodes: int = bounded(1, ge=1)
    gpus_per_node: int = bounded(0, ge=0)
    distributed: DistributedBackend = "none"
    """Multi-GPU/-node training backend; its accelerate config is ``accelerate_config``."""
    accelerate_config: str | None = None
    """``None``: ``recipes/accelerate/<distributed>.yaml``."""
    main_process_port: int = bounded(29500, ge=1, le=65535)
    gpu: GpuModel = "h100"
    """The GPU model of the nodes, for the memory and time plan (``unified.warmup.plan``; ``--plan``)."""
    memory_max_share: float = bounded(0.9, gt=0, le=1)
    """The preflight refuses a layout whose planned trainer memory is above this share of the usable
    device memory (the plan's estimate has an error; docs/warmup_plan.md): 1.0 = up to all of it."""
    collective_timeout_margin: float = bounded(1.5, ge=1)
    """The preflight refuses a layout whose ``train.collective_timeout_s`` is under this multiple of the
    plan's worst-case generation batch (server-mode rollouts; docs/warmup_plan.md): 1.0 = no margin."""
    cpu_processes: int = bounded(1, ge=1)
    """Trainer processes on one node without GPUs (``gpus_per_node: 0``): above 1, ``accelerate launch``
    starts them as data-parallel ranks over gloo (``distributed: ddp``), as it starts one per GPU."""

    def trainer_processes(self) -> int:
        """Training processes of this layout (the first node serves vLLM when there are several)."""
        trainer_nodes = self.nodes - 1 if self.nodes > 1 else 1
        return trainer_nodes * (self.gpus_per_node if self.gpus_per_node else self.cpu_processes)

    def cpu_data_parallel(self) -> bool:
        """Several trainer processes on one CPU node."""
        return self.nodes == 1 and self.gpus_per_node == 0 and self.cpu_processes > 1


RoutingReplayMode = Literal["off", "record", "replay"]


@dataclass
class MoESection:
    """Mixture-of-experts routing between the rollout engine and the trainer (:mod:`unified.warmup.routing`)."""

    routing_replay: RoutingReplayMode = "off"
    """``off``: the trainer routes each token itself. ``record``: the rollout's per-token, per-layer top-k
    expert ids are kept with the batch and compared with the trainer's (``moe/router_agreement``) but not
    used. ``replay``: Rollout Routing Replay (R3, arXiv 2510.11370): the trainer's forward takes its
    routing *decision* from the rollout's ids while the gate weights and the router's gradient come from
    its live logits (:mod:`unified.models.routing_replay`). Costs layers x top_k x 1-2 bytes a token."""
    log_mismatch: bool = True
    """With ``record``/``replay`` and rollout log-probs (vLLM): one more no-grad forward a generation batch
    with the other routing, to log the rollout-vs-trainer mismatch KL with and without replay."""
    require_rollout_routes: bool = False
    """With ``record``/``replay`` and a vLLM backend: stop the run when the engine returns no routed experts
    for a generation batch (vLLM's ``enable_return_routed_experts``; :mod:`unified.warmup.vllm_routes`)
    instead of replaying the trainer's first forward's routes (R2, ``moe/routes_from_rollout = 0``)."""


@dataclass
class ParityProbeSection:
    """The step-0 parity probe (:mod:`unified.warmup.parity_probe`): before step 1, the same token
    sequences through the rollout engine and the trainer's forward."""

    sequences: int = bounded(0, ge=0)
    """Training prompts (each with a greedy continuation) probed; 0 = no probe."""
    completion_tokens: int = bounded(16, ge=1)
    """Tokens decoded after each prompt (the probe compares prompt and continuation log-probs)."""
    max_mean_abs_logp_diff: float | None = bounded(0.05, gt=0)
    """Refuse to start when the mean per-token |logp_engine - logp_trainer| (nats) is above this; None = report only."""
    max_nan: int = bounded(0, ge=0)
    """Refuse to start when more log-probs than this are NaN (either side)."""


@dataclass
class AgenticSection:
    """Agentic GSPO (:mod:`unified.warmup.agentic`): used when ``rewards`` holds a ``benchmark`` entry.

    Each step runs ``gspo.num_generations`` episodes of each of ``tasks_per_step`` training tasks of
    the benchmark (cycling through them), through the eval's agent loop, sampled with ``generation``'s
    temperature/top-p and at most ``generation.max_completion_length`` tokens a policy call."""

    tasks_per_step: int = bounded(2, ge=1)
    """Training tasks (GSPO groups) a step."""
    max_in_flight: int = bounded(4, ge=1)
    """Episodes generating or stepping at once (the eval's ``--max-in-flight``)."""
    eval_before_after: bool = True
    """Run the eval's own runner on the held-out tasks before and after training (greedy), into
    ``<output_dir>/eval_before`` and ``eval_after``; the report gives both scores with their SE."""
    save_final: bool = True
    """Save the trained weights to ``<output_dir>/final`` (a Hugging Face directory the eval loads)."""
    resample_rounds: int = bounded(2, ge=0)
    """Dynamic sampling (DAPO's, verl's group filtering): a group whose rewards are all equal (advantage 0)
    is dropped and the next training tasks are rolled out in its place, up to this many extra rounds a
    step; 0 = train on the groups drawn first. The step's ``zero_variance_share`` counts every group drawn."""


@dataclass
class WarmupConfig:
    """A whole warmup recipe."""

    output_dir: str = "runs/warmup"
    """Run directory: checkpoints, ``final/`` (the HF dir the eval loads), metrics, wandb."""
    resume: str = "auto"
    """``auto`` (continue from the last complete checkpoint if any), ``never``, or a checkpoint dir."""
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    rewards: list[RewardEntry] = field(default_factory=default_rewards)
    """The reward functions and their weights, training-only shaping terms among them
    (:mod:`unified.rewards.entries`); ``--set rewards.NAME.KEY=VALUE`` edits an entry by name."""
    gspo: GSPOSection = field(default_factory=GSPOSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    generation: GenerationSection = field(default_factory=GenerationSection)
    train: TrainSection = field(default_factory=TrainSection)
    logging: LoggingSection = field(default_factory=LoggingSection)
    launch: LaunchSection = field(default_factory=LaunchSection)
    moe: MoESection = field(default_factory=MoESection)
    parity_probe: ParityProbeSection = field(default_factory=ParityProbeSection)
    agentic: AgenticSection = field(default_factory=AgenticSection)
    """Agentic GSPO on a benchmark's environment (only with a ``benchmark`` reward entry)."""

    UPGRADE = staticmethod(lambda data: upgrade_rewards(data))  # unified.config: the older rewards form
    RENAMED_PATHS = LEGACY_KEYS  # its --set keys

    def validate(self) -> "WarmupConfig":
        """Cross-field checks that a single field's type cannot express."""
        try:
            check_entries(self.rewards)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.gspo.num_generations < 2:
            raise ConfigError("gspo.num_generations: GSPO needs at least 2 completions per prompt, "
                              f"got {self.gspo.num_generations}")
        if not (0 <= self.gspo.epsilon < 1 and self.gspo.epsilon_high >= 0):
            raise ConfigError(f"gspo.epsilon/epsilon_high: expected 0 <= epsilon < 1 and epsilon_high >= 0, "
                              f"got {self.gspo.epsilon}/{self.gspo.epsilon_high}")
        per_step = self.train.per_device_train_batch_size * self.train.gradient_accumulation_steps * \
            self.launch.trainer_processes()
        if per_step % self.gspo.num_generations:
            raise ConfigError(
                f"train.per_device_train_batch_size x gradient_accumulation_steps x trainer processes "
                f"({self.launch.trainer_processes()}) = {per_step} must be a multiple of gspo.num_generations = "
                f"{self.gspo.num_generations} (a generation batch holds whole groups)")
        spg = self.gspo.steps_per_generation
        if spg is not None and spg % self.train.gradient_accumulation_steps:
            raise ConfigError(
                f"gspo.steps_per_generation={spg} must be a multiple of train.gradient_accumulation_steps="
                f"{self.train.gradient_accumulation_steps} (each optimizer update takes whole micro-steps of "
                "one generation batch)")
        if self.gspo.vllm_importance_sampling_clip_min is not None and \
                self.gspo.vllm_importance_sampling_clip_max is not None and \
                self.gspo.vllm_importance_sampling_clip_min >= self.gspo.vllm_importance_sampling_clip_max:
            raise ConfigError("gspo.vllm_importance_sampling_clip_min must be below clip_max, got "
                              f"{self.gspo.vllm_importance_sampling_clip_min} >= "
                              f"{self.gspo.vllm_importance_sampling_clip_max}")
        if self.moe.require_rollout_routes and self.moe.routing_replay == "off":
            raise ConfigError("moe.require_rollout_routes: needs moe.routing_replay record or replay (it is off)")
        self._check_judge_against_collective_timeout()
        if self.resume not in ("auto", "never") and not Path(self.resume).is_dir():
            raise ConfigError(f"resume: expected auto, never or an existing checkpoint dir, got {self.resume!r}")
        if self.model.trainable_layers is not None and self.model.trainable_layers < 1:
            raise ConfigError(f"model.trainable_layers: expected >= 1 or null, got {self.model.trainable_layers}")
        if self.generation.cpu_threads is not None and self.generation.cpu_threads < 1:
            raise ConfigError(f"generation.cpu_threads: expected >= 1 or null, got {self.generation.cpu_threads}")
        if self.monitor.keep_best and (self.monitor.probe_size < 1 or self.data.validation_size < 1):
            raise ConfigError("monitor.keep_best: needs a probe of validation prompts: set monitor.probe_size > 0 "
                              f"and data.validation_size > 0 (got {self.monitor.probe_size} and "
                              f"{self.data.validation_size})")
        if self.monitor.probe_size > 0 and self.launch.trainer_processes() > 1 \
                and self.launch.distributed in SHARDED_DISTRIBUTED:
            # the resolved recipe (written to the output dir) records what ran
            print(f"unified.warmup: monitor.probe_size={self.monitor.probe_size} and monitor.keep_best="
                  f"{str(self.monitor.keep_best).lower()} are turned off: the probe decodes with the whole model on "
                  f"every rank, which launch.distributed={self.launch.distributed} shards (launch.distributed=ddp "
                  "keeps them)", file=sys.stderr, flush=True)
            self.monitor.probe_size, self.monitor.keep_best = 0, False
        if self.launch.nodes < 1:
            raise ConfigError(f"launch.nodes: expected >= 1, got {self.launch.nodes}")
        if self.launch.cpu_processes > 1 and not self.launch.cpu_data_parallel():
            raise ConfigError("launch.cpu_processes: several CPU processes need launch.nodes=1 and "
                              f"launch.gpus_per_node=0, got {self.launch.nodes} node(s) x "
                              f"{self.launch.gpus_per_node} GPU(s)")
        if self.launch.cpu_data_parallel() and self.launch.distributed not in CPU_DISTRIBUTED:
            raise ConfigError(f"launch.distributed={self.launch.distributed} with launch.cpu_processes="
                              f"{self.launch.cpu_processes}: {CPU_DISTRIBUTED_WHY.get(self.launch.distributed, '')}"
                              f"on CPU processes use {' or '.join(CPU_DISTRIBUTED)}")
        return self

    def judge_calls_per_generation(self) -> int:
        """Completions one rank scores at once: its slice of a generation batch."""
        return self.train.per_device_train_batch_size * (self.gspo.steps_per_generation
                                                         or self.train.gradient_accumulation_steps)

    def prompts_per_generation(self, processes: int) -> int:
        """Dataset prompts one generation batch takes on ``processes`` trainer processes: its completions
        (per-process batch x steps_per_generation x processes) over the group size."""
        completions = self.judge_calls_per_generation() * processes
        return completions // self.gspo.num_generations

    def _check_judge_against_collective_timeout(self) -> None:
        if self.launch.trainer_processes() < 2:  # one process: no collective to time out
            return
        for entry in self.rewards:
            if not isinstance(entry, JudgeSettings) or entry.weight == 0:
                continue
            worst = judge_worst_case_s(entry, self.judge_calls_per_generation())
            if worst > JUDGE_SHARE_OF_COLLECTIVE_TIMEOUT * self.train.collective_timeout_s:
                raise ConfigError(
                    f"rewards.{entry.name}: a hanging judge can hold a rank {worst:.0f} s ({self.judge_calls_per_generation()} "
                    f"calls a generation batch, {entry.judge_max_concurrency} at once, {entry.judge_max_retries + 1} attempts "
                    f"of judge_timeout_s={entry.judge_timeout_s:g} s plus backoff), more than half of "
                    f"train.collective_timeout_s={self.train.collective_timeout_s:g} s, after which the other ranks' "
                    "reward gather fails the job (the other half is for generation and the rest of the step): lower "
                    "judge_timeout_s / judge_max_retries or raise the timeout")

    def accelerate_config_path(self, repo_root: str | os.PathLike[str] | None = None) -> Path | None:
        """The accelerate config file for ``launch.distributed`` (None for a single process)."""
        if self.launch.accelerate_config:
            return Path(self.launch.accelerate_config)
        if self.launch.distributed == "none":
            return None
        root = Path(repo_root) if repo_root else Path(__file__).resolve().parents[2]
        suffix = "_cpu" if self.launch.cpu_data_parallel() else ""
        return root / "recipes" / "accelerate" / f"{self.launch.distributed}{suffix}.yaml"


def upgrade_rewards(data: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """A recipe mapping in the older rewards form (a ``rewards`` mapping with ``rubric_weight``,
    ``rule_weight``, ``similarity_weight``, and/or a ``shaping`` section) in today's form (one list,
    the shaping term an entry of it), and the new spelling in words; None for today's form."""
    rewards = data.get("rewards")
    if not isinstance(rewards, dict) and "shaping" not in data:
        return None
    shaping = data.get("shaping")
    if shaping is not None and not isinstance(shaping, dict):
        raise ValueError(f"shaping: expected a section (mapping), got {shaping!r}")
    if isinstance(rewards, list):  # today's list and an older shaping section
        entries = [*rewards, *legacy_entries(None, shaping)]
    elif rewards is None or isinstance(rewards, dict):  # no rewards section: the defaults, as before
        entries = legacy_entries(rewards or {}, shaping)
    else:
        return None  # the loader says what is wrong with it
    out = {k: v for k, v in data.items() if k != "shaping"}
    out["rewards"] = entries
    old = " and the shaping section" if "shaping" in data else ""
    flow = yaml.safe_dump(entries, default_flow_style=True, sort_keys=False, width=1 << 20).strip()
    return out, (f"rewards as rubric_weight/rule_weight/similarity_weight{old} is now one list of entries "
                 f"(recipes/README.md): rewards: {flow}")


def load_warmup_config(path: str | os.PathLike[str] | None = None,
                       overrides: list[str] | None = None) -> WarmupConfig:
    """Load and validate a warmup recipe (``overrides`` are ``--set key=value`` strings)."""
    cfg = load_config(WarmupConfig, path, overrides)
    try:
        return cfg.validate()
    except ConfigError as exc:
        if path is None:
            raise
        raise ConfigError(f"{path}: {exc}") from None


def describe(cfg: WarmupConfig) -> dict[str, Any]:
    """A short human summary of the objective, for logs and ``--dry-run``."""
    g = cfg.gspo
    environments = benchmark_entries(cfg.rewards)
    if environments:  # the agentic trainer's own loss (unified.warmup.agentic_loss): no KL, no vLLM IS correction
        return {"rollouts": "agent episodes (unified.warmup.agentic) of " + ", ".join(e.describe() for e in environments),
                "rewards_not_applied_to_episodes": entries_not_applied(cfg.rewards),
                "objective": "GSPO over the policy's tokens of each episode (unified.warmup.agentic_loss), ratio against "
                             "the trainer's log-probs at the step's start, the sampler's gap corrected by token-level "
                             "truncated IS",
                "clip_range": [1 - g.epsilon, 1 + g.epsilon_high], "group_size": g.num_generations,
                "updates_per_generation": g.num_iterations, "metrics": "output_dir/metrics.jsonl (no wandb)"}
    return {
        "rollouts": "single-turn world-model completions (data.train)",
        "objective": "GSPO" if g.importance_sampling_level == "sequence" else "GRPO (token-level ratio)",
        "clip_range": [1 - g.epsilon, 1 + g.epsilon_high],
        "kl_beta": g.beta,
        "group_size": g.num_generations,
        "updates_per_generation": updates_per_generation(cfg),
        "routing_replay": cfg.moe.routing_replay,
        "routes_from": ("the rollout engine (required)" if cfg.moe.require_rollout_routes else
                        "the rollout engine, else the trainer's first forward") if cfg.moe.routing_replay != "off" else None,
        "vllm_importance_sampling": {"mode": g.vllm_importance_sampling_mode,
                                     "clip": [g.vllm_importance_sampling_clip_min, g.vllm_importance_sampling_clip_max]},
    }


def is_agentic(cfg: WarmupConfig) -> bool:
    """True when ``rewards`` hold a ``benchmark`` entry of weight > 0: the rollouts are agent episodes of that
    benchmark's environment (:mod:`unified.warmup.agentic`), not single-turn world-model completions."""
    return bool(benchmark_entries(cfg.rewards))


def updates_per_generation(cfg: WarmupConfig) -> int:
    """Optimizer updates that one generation batch feeds: ``num_iterations x steps_per_generation /
    gradient_accumulation_steps`` (TRL generates every ``steps_per_generation x num_iterations``
    micro-steps and steps the optimizer every ``gradient_accumulation_steps``)."""
    spg = cfg.gspo.steps_per_generation or cfg.train.gradient_accumulation_steps
    return cfg.gspo.num_iterations * spg // cfg.train.gradient_accumulation_steps
