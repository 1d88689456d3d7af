"""GSPO on TRL: a recipe -> ``GRPOConfig`` + ``GRPOTrainer`` configured as GSPO, and the run loop.

Nothing of the optimisation is re-implemented here: TRL computes the sequence-level ratio,
the clipped objective, the advantages, the MoE router loss and the metrics. This module

- maps a :class:`~unified.warmup.config.WarmupConfig` onto ``GRPOConfig``
  (:func:`build_grpo_config`): ``importance_sampling_level="sequence"``, ``loss_type="grpo"``,
  ``beta=0``, ``epsilon=3e-4``, ``epsilon_high=4e-4`` by default; bf16 autocast on CUDA over
  fp32 master weights, plain fp32 on CPU; gradient checkpointing; vLLM server/colocate;
- loads the policy through :func:`unified.models.load_checkpoint` with the attention and
  experts kernels of :func:`unified.kernels.select_kernels` (:func:`load_policy`);
- extends the trainer (:class:`GSPOTrainer`) with the memory high-water mark in every log
  record and bf16 autocast around in-process generation, and checks that the MoE router loss
  is really on;
- runs, checkpoints, resumes from the last complete checkpoint after a crash, and writes the
  final weights as a Hugging Face directory ``<output_dir>/final`` that ``load_checkpoint``
  (hence ``python -m unified.eval --model DIR``) reads unchanged, with its model card
  (:mod:`unified.warmup.model_card`) (:func:`run_warmup`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from unified.config import ConfigError, dump_yaml, to_dict
from unified.kernels import select_kernels
from unified.models import is_moe_config, load_checkpoint, vision_language
from unified.models.chat_template import install_chat_template
from unified.models.checkpoint import load_tokenizer, resolve_spec
from unified.models.embedded import ensure_embedded_checkpoint
from unified.models.linear_attention import (apply_linear_attention, gated_deltanet_modules, linear_attention_in_use,
                                             modeling_module_for)
from unified.models.routing_replay import moe_routers
from unified.store import write_json_atomic
from unified.warmup.callbacks import METRICS_FILE, JsonlMetricsCallback, peak_memory_gib
from unified.warmup.config import WarmupConfig, describe
from unified.warmup.data import load_rewards, load_splits
from unified.warmup.degenerate import DegenerateMonitor
from unified.warmup.failfast import FailFastMonitor
from unified.warmup.gspo_trainer import gspo_trainer_class
from unified.warmup.guard import CollapseGuard
from unified.warmup.launch import vllm_rollouts_blocker
from unified.warmup.model_card import reward_names, write_model_card
from unified.warmup.parity_probe import probe_trainer
from unified.warmup.preempt import Preempted, PreemptionCallback
from unified.warmup.rollout_client import keyed_rollout_client, rollout_server_key
from unified.warmup.routing import RoutingState
from unified.warmup.vllm_routes import attach_engine_routes, colocated_llm_returns_routes

log = logging.getLogger(__name__)

FINAL_DIR = "final"
RESOLVED_RECIPE = "recipe.resolved.yaml"
RUN_RECORD = "run.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


# --------------------------------------------------------------------------------------
# devices, precision, wandb


def training_device() -> torch.device:
    """This process's device: ``cuda:LOCAL_RANK`` when CUDA is there, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def cpu_has_bf16() -> bool:
    """Whether this CPU has native bf16 matrix instructions (AVX512-BF16 or AMX-BF16)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:  # not Linux
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def use_bf16(cfg: WarmupConfig, device: torch.device | None = None) -> bool:
    """bf16 autocast over fp32 master weights: on CUDA for ``auto``/``bf16``; on a CPU only for ``bf16``.

    ``auto`` stays fp32 on a CPU (without native bf16 instructions autocast is slower than fp32);
    ``bf16`` on a CPU without AVX512-BF16/AMX is refused.
    """
    device = device or training_device()
    if cfg.model.precision == "fp32":
        return False
    if cfg.model.precision == "bf16" and device.type != "cuda":
        if not cpu_has_bf16():
            raise ValueError("model.precision=bf16 needs a CUDA device or a CPU with AVX512-BF16/AMX; "
                             "use auto or fp32 here")
        return True
    return device.type == "cuda"


def configure_wandb(cfg: WarmupConfig) -> dict[str, str]:
    """Point every wandb directory into ``<output_dir>/wandb``, offline unless the recipe says online.

    The run id is stored in ``<output_dir>/wandb/run_id`` so a resumed run continues the same
    wandb run. Returns the environment variables it set.
    """
    root = Path(cfg.output_dir).resolve() / "wandb"
    root.mkdir(parents=True, exist_ok=True)
    id_file = root / "run_id"
    if not id_file.exists():
        id_file.write_text(uuid.uuid4().hex[:12])
    env = {
        "WANDB_MODE": cfg.logging.wandb_mode,
        "WANDB_DIR": str(root),
        "WANDB_CACHE_DIR": str(root / "cache"),
        "WANDB_CONFIG_DIR": str(root / "config"),
        "WANDB_DATA_DIR": str(root / "data"),
        "WANDB_ARTIFACT_DIR": str(root / "artifacts"),
        "WANDB_PROJECT": cfg.logging.wandb_project,
        "WANDB_RUN_ID": id_file.read_text().strip(),
        "WANDB_RESUME": "allow",
        "WANDB_SILENT": "true",
    }
    for key in ("cache", "config", "data", "artifacts"):
        (root / key).mkdir(exist_ok=True)
    os.environ.update(env)
    return env


# --------------------------------------------------------------------------------------
# GRPOConfig


def build_grpo_config(cfg: WarmupConfig, *, device: torch.device | None = None, reward_weights: Sequence[float] | None
                      = None):
    """The TRL ``GRPOConfig`` of a recipe: GSPO objective, schedule, generation backend, logging."""
    from trl import GRPOConfig

    g, gen, t = cfg.gspo, cfg.generation, cfg.train
    bf16 = use_bf16(cfg, device)
    report_to = ["wandb"] if cfg.logging.wandb else []
    vllm = gen.backend != "hf"
    kwargs: dict[str, Any] = dict(
        output_dir=str(cfg.output_dir),
        run_name=cfg.logging.run_name or Path(cfg.output_dir).name,
        # schedule
        max_steps=t.max_steps, learning_rate=t.learning_rate, optim=t.optim, lr_scheduler_type=t.lr_scheduler_type,
        warmup_steps=t.warmup_steps, weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, seed=t.seed, data_seed=cfg.data.seed,
        dataloader_num_workers=t.dataloader_num_workers, ddp_timeout=int(t.collective_timeout_s),
        save_strategy="steps", save_steps=t.save_steps, save_total_limit=t.save_total_limit, save_only_model=False,
        logging_steps=t.logging_steps, report_to=report_to, log_completions=cfg.logging.log_completions,
        # precision, memory
        bf16=bf16, fp16=False, use_cpu=(device or training_device()).type == "cpu",
        activation_checkpointing=cfg.model.gradient_checkpointing,
        activation_checkpointing_kwargs={"use_reentrant": False} if cfg.model.gradient_checkpointing else None,
        router_aux_loss_coef=cfg.model.router_aux_loss_coef, disable_dropout=True,
        # the GSPO objective
        importance_sampling_level=g.importance_sampling_level, loss_type=g.loss_type, beta=g.beta,
        epsilon=g.epsilon, epsilon_high=g.epsilon_high, num_generations=g.num_generations,
        num_iterations=g.num_iterations, steps_per_generation=g.steps_per_generation, scale_rewards=g.scale_rewards,
        mask_truncated_completions=g.mask_truncated_completions,
        reward_weights=list(reward_weights) if reward_weights is not None else None,
        # rollouts
        max_completion_length=gen.max_completion_length, temperature=gen.temperature, top_p=gen.top_p,
        top_k=gen.top_k, repetition_penalty=gen.repetition_penalty, chat_template_kwargs={"enable_thinking": gen.thinking},
        use_vllm=vllm,
        # the rollout-vs-trainer correction (read by TRL with vLLM rollouts only; set here whatever the
        # backend, so the resolved GRPOConfig shows it): recipes/warmup/*.yaml say why token_truncate
        vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=g.vllm_importance_sampling_mode,
        vllm_importance_sampling_clip_max=g.vllm_importance_sampling_clip_max,
        vllm_importance_sampling_clip_min=g.vllm_importance_sampling_clip_min,
        remove_unused_columns=False,
    )
    if vllm:
        kwargs.update(
            vllm_mode="server" if gen.backend == "vllm_server" else "colocate",
            vllm_server_host=gen.vllm_server_host, vllm_server_port=gen.vllm_server_port,
            vllm_server_timeout=gen.vllm_server_timeout_s,
            vllm_gpu_memory_utilization=gen.vllm_gpu_memory_utilization,
            vllm_tensor_parallel_size=gen.vllm_tensor_parallel_size,
            vllm_max_model_length=gen.vllm_max_model_length,
        )
    return GRPOConfig(**kwargs)


# --------------------------------------------------------------------------------------
# the policy


@dataclass
class TrainablePolicy:
    """The model to train: an instance (single process) or a path TRL loads itself (distributed)."""

    model: Any
    """A ``PreTrainedModel``, or a local dir / hub id string (loaded by TRL with ``init_kwargs``)."""
    tokenizer: Any
    kernels: dict[str, str]
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    """``GRPOConfig.model_init_kwargs`` when ``model`` is a string."""


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def load_policy(cfg: WarmupConfig, device: torch.device | None = None) -> TrainablePolicy:
    """The SFT checkpoint for training: fp32 master weights, kernels for the compute dtype.

    On CUDA the forward runs under bf16 autocast, so kernels are chosen for bf16 (FlashAttention,
    grouped_mm); the weights stay fp32 so that updates of size ``learning_rate`` (1e-6) are not
    rounded away (DeepSpeed/FSDP2 keep the same fp32 master copy). In a single process the model
    comes from :func:`unified.models.load_checkpoint` (any spec). With several processes
    (``accelerate launch``) TRL loads it from the path itself, so that DeepSpeed ZeRO-3 can
    partition it while loading and FSDP2 can load it on rank 0 only.
    """
    device = device or training_device()
    compute_dtype = torch.bfloat16 if use_bf16(cfg, device) else torch.float32
    kernels = select_kernels(device, compute_dtype, attention=cfg.model.attn_implementation,
                             experts=cfg.model.experts_implementation)
    facts = kernels.facts()
    kind, target = resolve_spec(cfg.model.name_or_path)
    if world_size() > 1 and kind in ("local", "hub", "embedded"):
        if kind == "embedded":
            target = str(ensure_embedded_checkpoint())
        tokenizer = load_tokenizer(target)
        if getattr(tokenizer, "chat_template", None) is None:
            install_chat_template(tokenizer)
        from transformers import AutoConfig

        # TRL instantiates the model itself: set the Gated DeltaNet ops of its modeling module beforehand
        model_type = AutoConfig.from_pretrained(target, trust_remote_code=cfg.model.trust_remote_code).model_type
        apply_linear_attention(kernels.linear_attention, [modeling_module_for(model_type)])
        init = {"dtype": torch.float32, "attn_implementation": kernels.attention,
                "experts_implementation": kernels.experts, "trust_remote_code": cfg.model.trust_remote_code}
        return TrainablePolicy(model=target, tokenizer=tokenizer, kernels=facts, init_kwargs=init)
    loaded = load_checkpoint(cfg.model.name_or_path, device=device, dtype=torch.float32,
                             attn_implementation=kernels.attention, experts_implementation=kernels.experts,
                             trust_remote_code=cfg.model.trust_remote_code)
    loaded.model.train()
    facts["linear_attention_layers"] = str(sum(gated_deltanet_modules(loaded.model).values()))
    return TrainablePolicy(model=loaded.model, tokenizer=loaded.tokenizer, kernels=facts)


def build_trainer(cfg: WarmupConfig, *, train_dataset, reward_funcs: Sequence[Callable],
                  reward_weights: Sequence[float] | None = None, model=None, tokenizer=None,
                  callbacks: Sequence[Any] = (), device: torch.device | None = None,
                  model_init_kwargs: dict[str, Any] | None = None):
    """A ready-to-train :class:`GSPOTrainer` (loads the policy unless ``model``/``tokenizer`` are given)."""
    device = device or training_device()
    _check_generation_batch_fits(cfg, train_dataset)
    if cfg.logging.wandb:
        configure_wandb(cfg)
    init_kwargs: dict[str, Any] = dict(model_init_kwargs or {})
    if model is None:
        policy = load_policy(cfg, device)
        model, tokenizer, init_kwargs = policy.model, policy.tokenizer, policy.init_kwargs
    if tokenizer is None:
        raise ValueError("build_trainer: a model was given without its tokenizer")
    tokenizer.padding_side = "left"
    args = build_grpo_config(cfg, device=device, reward_weights=reward_weights)
    if isinstance(model, str):
        args.model_init_kwargs = init_kwargs
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    m = cfg.monitor
    failfast = FailFastMonitor(max_dropped_share=m.max_dropped_share, max_zero_variance_share=m.max_zero_variance_share,
                               patience=m.patience_batches)
    routes_from_engine = cfg.moe.routing_replay != "off" and cfg.generation.backend == "vllm_colocate"
    # server mode: TRL's client sends the job's key (rollout_client.py); colocate: TRL builds its vllm.LLM
    # in the constructor, asked to return routed experts (vllm_routes.py)
    with keyed_rollout_client(rollout_server_key(cfg), server_mode=cfg.generation.backend == "vllm_server"), \
            colocated_llm_returns_routes(routes_from_engine):
        trainer = gspo_trainer_class()(
            model=model, reward_funcs=list(reward_funcs), args=args, train_dataset=train_dataset,
            processing_class=tokenizer,
            callbacks=[JsonlMetricsCallback(Path(cfg.output_dir) / METRICS_FILE), *callbacks, failfast],
        )
    trainer.generation_cpu_threads = cfg.generation.cpu_threads
    trainer.rollout_bounds = (m.rollout_max_mean_logp_diff, m.rollout_min_mean_weight)
    trainer.sync_bounds = (m.rollout_max_logp_diff_rise, m.rollout_probe_max_logp_diff)
    trainer.extra_logs = {}
    trainer.failfast, failfast.extra_logs = failfast, trainer.extra_logs
    vision_language.freeze_vision_tower(trainer.model)  # text-only warmup: no gradient, no optimizer state for it
    vision_language.keep_used_weight_conversions(trainer.model)  # before any save (ZeRO-3 loads record them all)
    if cfg.model.trainable_layers is not None:  # before train() creates the optimizer over trainable parameters
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
            raise ValueError("model.trainable_layers is for single-process and DDP training, not DeepSpeed/FSDP")
        freeze_lower_layers(trainer.model, cfg.model.trainable_layers)
    _check_router_loss(cfg, trainer)
    if cfg.moe.routing_replay != "off":
        if not moe_routers(trainer.model):
            raise ConfigError(f"moe.routing_replay={cfg.moe.routing_replay}: {type(trainer.model).__name__} has no "
                              "top-k MoE routers (a dense model): set moe.routing_replay=off")
        trainer.routing = RoutingState.attach(trainer.model, cfg.moe.routing_replay, cfg.moe.log_mismatch)
        trainer.routing.engine = attach_engine_routes(trainer)  # vLLM's routed experts (R3); None in-process
        trainer.routing.require_rollout_routes = cfg.moe.require_rollout_routes
    return trainer


def _check_generation_batch_fits(cfg: WarmupConfig, train_dataset) -> None:
    """A training split smaller than one generation batch trains 0 steps in TRL (its sampler drops the
    incomplete batch, the Trainer only warns): refuse it, naming the settings."""
    if not hasattr(train_dataset, "__len__"):
        return
    needed = cfg.prompts_per_generation(world_size())
    if len(train_dataset) < needed:
        raise ConfigError(
            f"the training split has {len(train_dataset)} prompts, but one generation batch takes {needed} "
            f"(train.per_device_train_batch_size={cfg.train.per_device_train_batch_size} x "
            f"gspo.steps_per_generation={cfg.gspo.steps_per_generation or cfg.train.gradient_accumulation_steps} x "
            f"{world_size()} processes / gspo.num_generations={cfg.gspo.num_generations}); TRL would train 0 "
            "steps: use more data or lower gspo.steps_per_generation")


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder's list of transformer blocks (``model.model.layers`` in Llama/Mixtral/Qwen-MoE)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", model)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no decoder layer list found (expected model.model.layers)")
    return layers


def freeze_lower_layers(model, trainable: int) -> dict[str, int]:
    """Keep ``requires_grad`` only on the last ``trainable`` decoder layers and the final norm.

    A ``trainable`` beyond the model's depth trains every layer (with a warning), so a recipe
    written for a deeper model still runs on a smaller one.

    Everything else (embeddings, a tied or untied LM head, the lower layers) is frozen: no
    gradient, no optimizer state, and autograd saves no activation below the first trainable
    layer, since nothing there needs a gradient. Returns parameter counts.
    """
    layers = decoder_layers(model)
    if trainable < 1:
        raise ValueError(f"model.trainable_layers={trainable}: expected >= 1")
    if trainable > len(layers):  # a recipe written for a deeper model, run with --model on a smaller one
        log.warning("model.trainable_layers=%d but the model has %d decoder layers: all of them train",
                    trainable, len(layers))
        trainable = len(layers)
    keep = {id(p) for layer in layers[len(layers) - trainable:] for p in layer.parameters()}
    norm = getattr(model.get_decoder() if hasattr(model, "get_decoder") else model.model, "norm", None)
    if norm is not None:
        keep |= {id(p) for p in norm.parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)
    counts = {"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
              "total": sum(p.numel() for p in model.parameters())}
    log.info("trainable_layers=%d: %d of %d parameters train", trainable, counts["trainable"], counts["total"])
    return counts


def _check_router_loss(cfg: WarmupConfig, trainer) -> None:
    """The MoE load-balancing loss must be on for a MoE policy unless the recipe turned it off."""
    model = trainer.model
    if not is_moe_config(model.config):
        return
    if cfg.model.router_aux_loss_coef == 0:
        log.warning("router aux loss disabled by the recipe (model.router_aux_loss_coef=0)")
        return
    if not trainer.aux_loss_enabled:
        raise RuntimeError(
            f"{type(model).__name__} is a MoE model but TRL did not enable its router load-balancing loss "
            f"(coefficient {trainer.router_aux_loss_coef}); set model.router_aux_loss_coef to a positive value")


# --------------------------------------------------------------------------------------
# checkpoints and the run


def last_complete_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """The highest ``checkpoint-N`` whose ``trainer_state.json`` was fully written.

    The HF Trainer writes the state file last, after weights, optimizer, scheduler and RNG
    state; a run killed while saving leaves a directory without a readable state, which is
    skipped (and then overwritten when training gets there again).
    """
    root = Path(output_dir)
    if not root.is_dir():
        return None
    found = []
    for child in root.iterdir():
        match = _CHECKPOINT.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    for step, path in sorted(found, reverse=True):
        try:
            state = json.loads((path / "trainer_state.json").read_text())
        except (OSError, json.JSONDecodeError):
            log.warning("skipping incomplete checkpoint %s", path)
            continue
        if state.get("global_step") == step:
            return path
    return None


def resume_checkpoint(cfg: WarmupConfig) -> Path | None:
    """The checkpoint to resume from according to ``cfg.resume``."""
    if cfg.resume == "never":
        return None
    if cfg.resume == "auto":
        return last_complete_checkpoint(cfg.output_dir)
    return Path(cfg.resume)


@dataclass
class WarmupResult:
    """What a finished warmup run produced."""

    output_dir: str
    final_dir: str
    """The Hugging Face directory for ``load_checkpoint`` / ``python -m unified.eval --model``."""
    global_step: int
    resumed_from: str | None
    train_seconds: float
    seconds_per_step: float
    """Wall time per optimizer step in this process (resumed runs: the steps it ran)."""
    peak_memory: dict[str, float] = field(default_factory=dict)
    kernels: dict[str, str] = field(default_factory=dict)
    last_log: dict[str, Any] = field(default_factory=dict)
    collapse: dict[str, Any] = field(default_factory=dict)
    """What the collapse guard saw (``monitor``): ``collapsed_at``, ``action``, ``reason``, ``kept_step``."""
    stopped: dict[str, Any] = field(default_factory=dict)
    """Set when a fail-fast monitor (:mod:`unified.warmup.failfast`) stopped the run: ``step``, ``reason``,
    ``checkpoint`` (saved at that step; a rerun resumes from it)."""
    already_finished: bool = False
    """True when this call found the run finished (checkpoint at ``max_steps``) and trained nothing."""


def save_final(trainer, output_dir: str | os.PathLike[str], source: str | None = None) -> Path:
    """Weights, tokenizer, chat template (a vision-language class: ``source``'s processor files and mtp.*) -> final/."""
    final, model = Path(output_dir) / FINAL_DIR, trainer.accelerator.unwrap_model(trainer.model)
    trainer.save_model(str(final))  # handles ZeRO-3 / FSDP gathering; writes config + safetensors + tokenizer
    if trainer.accelerator.is_main_process:
        tokenizer = trainer.processing_class
        if getattr(tokenizer, "chat_template", None) and not (final / "chat_template.jinja").exists():
            tokenizer.save_pretrained(str(final))
        if source is not None and vision_language.is_vision_language_config(model.config):
            vision_language.copy_checkpoint_extras(source, final)
    return final


def finished_run(cfg: WarmupConfig) -> WarmupResult | None:
    """The recorded result when ``cfg.output_dir`` already holds a run finished at ``train.max_steps``.

    Finished means: the checkpoint to resume from is at ``max_steps`` or beyond, and ``run.json``
    (written atomically after ``final/``) records that step. Resuming such a run would make the
    HF Trainer take one more step (its stop check runs only after a step), so it is not resumed.
    """
    resume = resume_checkpoint(cfg)
    if resume is None or _checkpoint_step(resume) < cfg.train.max_steps:
        return None
    try:
        record = json.loads((Path(cfg.output_dir) / RUN_RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    final = Path(record.get("final_dir") or Path(cfg.output_dir) / FINAL_DIR)
    if record.get("global_step") != _checkpoint_step(resume) or not (final / "config.json").is_file():
        return None
    fields = {k: record[k] for k in WarmupResult.__dataclass_fields__ if k in record}
    return WarmupResult(**{**fields, "already_finished": True})


def run_warmup(cfg: WarmupConfig, *, train_dataset=None, reward_funcs: Sequence[Callable] | None = None,
               reward_weights: Sequence[float] | None = None, model=None, tokenizer=None,
               callbacks: Sequence[Any] = (), probe_rewards: tuple[Sequence[Callable], Sequence[float]] | None = None,
               validation_dataset=None) -> WarmupResult:
    """Train according to ``cfg`` (resuming if there is a checkpoint) and save ``final/``.

    Data and rewards come from the recipe (:mod:`unified.warmup.data`) unless given; ``probe_rewards``
    (funcs, weights) score the collapse guard's greedy probe (default: the recipe's rewards without
    shaping, or the given ``reward_funcs``) on ``validation_dataset`` (default: the recipe's validation
    split when ``train_dataset`` is not given). The :class:`~unified.warmup.guard.CollapseGuard` of
    ``cfg.monitor`` always runs (degenerate shares in every log record, one progress line a step). A run
    already finished at ``train.max_steps`` is left as it is (``already_finished``); a run
    whose last checkpoint is at ``max_steps`` but that died before writing ``final/`` only
    writes ``final/`` from that checkpoint. Raise ``train.max_steps`` to continue a finished run.
    """
    blocker = vllm_rollouts_blocker(cfg)
    if blocker:
        raise RuntimeError(f"unified.warmup: {blocker}")
    out = Path(cfg.output_dir)
    done = finished_run(cfg)
    if done is not None:
        print(f"unified.warmup: already finished at step {done.global_step} (train.max_steps="
              f"{cfg.train.max_steps}); checkpoint: {done.final_dir}", flush=True)
        return done
    out.mkdir(parents=True, exist_ok=True)
    (out / RESOLVED_RECIPE).write_text(dump_yaml(cfg))
    device = training_device()
    init_kwargs: dict[str, Any] = {}
    if model is None:
        policy = load_policy(cfg, device)
        model, tokenizer, kernels, init_kwargs = policy.model, policy.tokenizer, policy.kernels, policy.init_kwargs
    else:
        kernels = {"attention": str(getattr(model.config, "_attn_implementation", "")),
                   "experts": str(getattr(model.config, "_experts_implementation", "")),
                   "linear_attention": linear_attention_in_use(model)}
    if train_dataset is None:
        splits = load_splits(cfg, tokenizer)
        train_dataset, validation_dataset = splits.train, splits.validation
    if reward_funcs is None:
        reward_funcs, reward_weights = load_rewards(cfg)
        probe_rewards = probe_rewards or load_rewards(cfg, training=False) if cfg.monitor.probe_size else None
    probe_rewards = probe_rewards or (reward_funcs, reward_weights or [1.0] * len(reward_funcs))
    reward_funcs, reward_weights, guard = _with_collapse_guard(cfg, train_dataset, validation_dataset, tokenizer,
                                                               reward_funcs, reward_weights, probe_rewards)
    preempt = PreemptionCallback(out)
    callbacks = [*callbacks, guard, preempt]
    resume = resume_checkpoint(cfg)
    if resume is not None:
        log.info("resuming from %s", resume)
        print(f"unified.warmup: resuming from {resume}", flush=True)
    trainer = build_trainer(cfg, train_dataset=train_dataset, reward_funcs=reward_funcs,
                            reward_weights=reward_weights, model=model, tokenizer=tokenizer, callbacks=callbacks,
                            device=device, model_init_kwargs=init_kwargs)
    guard.attach(trainer)
    start_step = trainer.state.global_step if resume is None else _checkpoint_step(resume)
    t0 = time.time()
    if resume is not None and start_step >= cfg.train.max_steps:
        # killed after its last checkpoint, before final/: no step left, only the weights to write
        print(f"unified.warmup: already trained to step {start_step}; writing {out / FINAL_DIR}", flush=True)
        from transformers import TrainerState

        trainer._load_from_checkpoint(str(resume))
        trainer.state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
    else:
        if resume is None and cfg.parity_probe.sequences > 0:  # before step 1, with the start's weights
            probe_trainer(trainer, cfg.parity_probe, train_dataset, backend=cfg.generation.backend, output_dir=out)
        preempt.install()
        try:
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        finally:
            preempt.uninstall()
        if preempt.stopped_at is not None and trainer.state.global_step < cfg.train.max_steps:
            preempt.request.unlink(missing_ok=True)
            raise Preempted(trainer.state.global_step, out / f"checkpoint-{trainer.state.global_step}")
    seconds = time.time() - t0
    final = save_final(trainer, out, source=cfg.model.name_or_path)
    steps_run = trainer.state.global_step - start_step
    logs = [h for h in trainer.state.log_history if "loss" in h]
    result = WarmupResult(
        output_dir=str(out), final_dir=str(final), global_step=trainer.state.global_step,
        resumed_from=str(resume) if resume else None, train_seconds=round(seconds, 3),
        seconds_per_step=round(seconds / steps_run, 3) if steps_run > 0 else 0.0, peak_memory=peak_memory_gib(),
        kernels=kernels,
        last_log=logs[-1] if logs else {}, collapse=dict(guard.outcome), stopped=dict(trainer.failfast.outcome),
    )
    if trainer.accelerator.is_main_process:
        weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
        write_model_card(cfg, final, steps=result.global_step, train_samples=len(train_dataset),
                         rewards=list(zip(reward_names(reward_funcs), weights)),
                         seconds_per_step=result.seconds_per_step, resumed_from=result.resumed_from)
        write_json_atomic(out / RUN_RECORD, {**to_dict(result), "objective": describe(cfg)})
    if cfg.logging.wandb:
        try:
            import wandb

            if wandb.run is not None:
                wandb.finish()
        except ImportError:  # pragma: no cover
            pass
    return result


def _with_collapse_guard(cfg: WarmupConfig, train_dataset, validation_dataset, tokenizer, reward_funcs,
                         reward_weights, probe_rewards):
    """The rewards plus the weight-0 degenerate-rollout monitor, and the :class:`CollapseGuard` callback
    (its probe: the first ``probe_size`` validation rows, or training rows without a validation split,
    scored with ``probe_rewards``: the recipe's rewards without the shaping terms)."""
    m = cfg.monitor
    eos = getattr(tokenizer, "eos_token_id", None)
    monitor = DegenerateMonitor(cfg.generation.max_completion_length, eos)
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
    probe, score_funcs, score_weights = None, [], []
    if m.keep_best and (validation_dataset is None or len(validation_dataset) == 0):
        raise ValueError("monitor.keep_best selects on the validation split: set data.validation_size > 0 "
                         "(or pass validation_dataset)")
    if m.probe_size > 0:
        source = validation_dataset if validation_dataset is not None and len(validation_dataset) else train_dataset
        probe = source.select(range(min(m.probe_size, len(source))))
        score_funcs, score_weights = probe_rewards
    guard = CollapseGuard(m, monitor, probe=probe, score_funcs=score_funcs, score_weights=score_weights,
                          tokenizer=tokenizer, max_new_tokens=cfg.generation.max_completion_length,
                          cpu_threads=cfg.generation.cpu_threads, thinking=cfg.generation.thinking)
    return [*reward_funcs, monitor], [*weights, 0.0], guard


def _checkpoint_step(path: Path) -> int:
    match = _CHECKPOINT.match(Path(path).name)
    return int(match.group(1)) if match else 0
