"""Memory per trainer GPU, rollout KV capacity and one generation batch's time, on paper.

Pure arithmetic over :class:`~unified.warmup.sizing_model.ModelDims` and a :class:`Layout`; no torch.
:mod:`unified.warmup.plan` feeds it a recipe and prints the table (``--dry-run``, ``--plan``, the Slurm
dry run) and the preflight refuses a layout whose memory does not fit. Units: bytes; GiB = 2^30 bytes.
``T`` = tokens of one micro-batch row (prompt + completion), ``b`` = rows a micro-batch, ``c`` = the
context-parallel degree (each rank holds ``T/c`` tokens), ``a`` = bytes of an activation element (2
under bf16 autocast, 4 in fp32 on a CPU), ``n`` = the processes the states are sharded over.

Trainer memory per GPU (:func:`trainer_memory`), one component each:

- **model states**: sharded (ZeRO-3 / FSDP2) ``(16 P_train + w P_frozen) / n``: a trainable parameter
  holds a bf16 copy (2) and bf16 gradient (2) plus fp32 master (4) and Adam's two fp32 moments (8) [1];
  a frozen one only its weights (``w`` = 2 bf16 under ZeRO-3, 4 fp32 otherwise). Unsharded (one process,
  DDP) every process holds ``16 P_train + 4 P_frozen`` (fp32 weights 4 + fp32 gradients 4 + Adam 8),
  DDP's gradient buckets another ``4 P_train``, and bf16 autocast caches a bf16 copy of the weights it
  used (``2 P`` on a GPU).
- **saved activations**: with gradient checkpointing only each trainable layer's input is kept,
  ``L_train * b * T/c * h * a``; without, everything a layer saves for its backward (:func:`layer_saved_bytes`
  per token) for every trainable layer.
- **one layer's recompute + backward** (checkpointing only): the recomputed layer's saved tensors
  (the largest layer) plus the backward's largest temporaries, the gradients of the experts'
  gathered inputs and gate/up outputs, ``k (h + 2I) a`` per token.
- **router logits** (aux loss on): ``L * b * T/c * E * (a + 4)``: each layer's logits are returned to the
  loss (``a``) and the load-balancing loss keeps each layer's fp32 softmax for its backward (4).
- **Gated DeltaNet chunk states** (checkpointing, linear layers): the chunked kernel (fla) keeps the
  state at every 64-token chunk boundary for the backward of the recomputed layer,
  ``ceil(T/c / 64) * b * nv * dk * dv * 4``.
- **replayed routes** (``moe.routing_replay`` record/replay): the rollout's expert ids of every token of
  the rank's share of a generation batch, ``L * k * 2`` bytes a token (int16; unified/models/routing_replay.py).
- **logits**: TRL's fused LM head scores the completion positions in tiles of 32,768 tokens:
  ``min(b * C, 32768) * V * (a + 4)`` (the bf16 tile and its fp32 log-softmax); ``C`` = completion tokens.
- **buffers**: sharded: the gathered bf16 weights of the layer being computed and of the one prefetched
  (``2 * 2 * P_layer``) and that layer's unsharded bf16 gradients before the reduce-scatter (``2 P_layer``);
  the CUDA context, cuBLAS workspace and NCCL buffers (1.5 GiB a GPU, 0.3 GiB of Python and libraries on a CPU).

[1] Rajbhandari et al., ZeRO (arXiv 1910.02054), the 2 + 2 + 12 bytes of mixed-precision Adam.

The plan fits when the total is at most ``USABLE_FRACTION`` of the device memory (the rest: the
caching allocator's fragmentation, which these formulas do not model).

Rollout (:func:`rollout_capacity`): vLLM on ``TP`` GPUs with ``gpu_memory_utilization u``: per GPU, the
budget ``u * M`` minus the bf16 weights ``2 P / TP`` minus a fixed 3 GiB (the start-up profile's
activations and CUDA graphs) is the KV/state pool. A full-attention layer caches K and V of
``max(1, nkv / TP)`` heads per GPU (KV heads are replicated when TP exceeds them): per token and GPU
``L_full * 2 * max(1, nkv/TP) * d * 2`` bytes. A Gated DeltaNet layer keeps a constant state a
sequence: ``nv/TP * dk * dv * s`` (s = the SSM dtype's bytes) plus the conv window
``conv_dim/TP * (kernel - 1) * 2``. Capacity = pool / (``T * kv_per_token + state``) full-length sequences.

Generation time (:func:`generation_time`), one generation batch of ``B`` completions in groups of
``G`` (prompt ``P`` tokens, completion ``C`` tokens, both at their caps: the worst case):

- prefill FLOPs of a prompt: ``2 * P_active * P`` (matmuls) ``+ L_full * 2 * nq * d * P^2`` (causal
  QK^T and AV) ``+ L_lin * 6 * nv * dk * dv * P`` (the chunked delta rule); ``B`` prompts without
  prefix sharing (vLLM 0.30 shares prefixes of this hybrid only in ``mamba_cache_mode=align``,
  untested), ``B/G`` with it; at ``PREFILL_MFU`` of the node's bf16 peak;
- decode: at most ``K`` = min(capacity, B) sequences run at once, so ``ceil(B/K) * C`` steps; each step
  reads, per GPU, the weights it touches (``2/TP * (P_dense + E_hit * P_expert)``, ``E_hit = E (1 -
  (1 - k/E)^K)`` experts a layer) and the KV of ``K`` sequences at their mean length ``P + C/2`` plus
  their states, at ``DECODE_BW_EFFICIENCY`` of HBM bandwidth, plus ``DECODE_STEP_OVERHEAD_S``
  (scheduling, sampling, the TP all-reduces).

In TRL's server mode every trainer rank waits in a collective while rank 0's request is generated,
so the batch must finish inside ``train.collective_timeout_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from unified.warmup.sizing_model import ModelDims

GIB = 2 ** 30
USABLE_FRACTION = 0.92
"""Share of a device's memory the plan may fill (the rest: allocator fragmentation)."""
LOGITS_TILE_TOKENS = 32768
"""TRL 1.16's fused LM head tile (``trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE``)."""
GDN_CHUNK = 64
"""Chunk length of the chunked gated delta rule (fla, transformers' torch fallback)."""
RUNTIME_GPU_BYTES = int(1.5 * GIB)
RUNTIME_CPU_BYTES = int(0.3 * GIB)
VLLM_RESERVED_BYTES = 3 * GIB
"""Per GPU, vLLM's start-up profile activations and CUDA graphs, outside the KV pool."""
CPU_LOAD_COPY_FACTOR = 1.0
"""CPU: one fp32 copy of the weights stays in the RSS after loading (the state dict read before it is
copied into the model; glibc keeps the freed arena): 1.62 GiB above the 0.3 GiB baseline and the
1.39 GiB of weights after loading the embedded model (docs/warmup_memory.md's profiler)."""
CPU_BACKWARD_FACTOR = 2.5
"""CPU: the backward's temporaries (each saved tensor's gradient, the autograd buffers) that the allocator
keeps, as a multiple of the activation components. Fitted on two measured runs
(unified/warmup/sizing_measured.json: the demo's warmup and the checkpointed micro-batch-2 run), checked on
the third; tests/test_warmup_margins.py fails when a row leaves its stated error."""
PREFILL_MFU = 0.35
"""Assumed, not measured on this stack (no GPU run yet): prefill's share of the bf16 peak. Range
:data:`ASSUMPTION_RANGES`; the plan prints the batch's time at both ends."""
DECODE_BW_EFFICIENCY = 0.6
"""Assumed, not measured: decode's share of HBM bandwidth (range in :data:`ASSUMPTION_RANGES`)."""
DECODE_STEP_OVERHEAD_S = 0.003
"""Assumed: per decode step, scheduling + sampling + the TP all-reduces."""
ASSUMPTION_RANGES: dict[str, tuple[float, float]] = {
    "PREFILL_MFU": (0.25, 0.5), "DECODE_BW_EFFICIENCY": (0.45, 0.75), "DECODE_STEP_OVERHEAD_S": (0.002, 0.006)}
"""(pessimistic, optimistic) ends of each time assumption; the worst case sets the collective timeout's margin."""
ROUTES_DECODE_BYTES_PER_S = 160e6
"""Base64 ``.npy`` routes JSON decoded on trainer rank 0 (json.loads + b64decode + np.load, one thread):
measured 154-189 MB/s on the 2-core CI machine at 1,024 / 4,096 / 16,384 positions x 40 layers x top-8
(28-112 MB answers; docs/warmup_plan.md), the issue's ~200 MB/s (22.8 GB in ~112 s) elsewhere; the low end
is taken. tests/test_warmup_margins.py checks the bytes formula against encoded arrays byte for byte."""
NPY_HEADER_BYTES = 128
"""``np.save``'s header of a 3-d uint8 array (format 1.0: 128 bytes)."""


@dataclass(frozen=True)
class GpuSpec:
    """A GPU model: memory as the driver reports it, dense bf16 peak, HBM bandwidth."""

    name: str
    memory_gib: float
    bf16_tflops: float
    hbm_tb_s: float


GPUS: dict[str, GpuSpec] = {
    "h100": GpuSpec("H100 SXM 80GB", 79.6, 989.0, 3.35),      # nvidia-smi: 81,559 MiB
    "h200": GpuSpec("H200 141GB", 140.4, 989.0, 4.8),         # nvidia-smi: 143,771 MiB
    "a100": GpuSpec("A100 SXM 80GB", 79.2, 312.0, 2.04),      # nvidia-smi: 81,920 MiB less ECC
}


@dataclass(frozen=True)
class Layout:
    """Where the recipe runs: trainer processes, their sharding, and the rollout engine."""

    trainer_processes: int
    gpu: GpuSpec | None
    """None: a CPU layout (host memory is not checked)."""
    sharded: bool
    """ZeRO-3 / FSDP2 (states split over the trainer processes) vs one process / DDP (replicated)."""
    ddp: bool = False
    context_parallel: int = 1
    rollout: str = "none"
    """``server`` (a vLLM node of its own), ``colocate`` (vLLM inside each trainer process) or ``none``."""
    rollout_tp: int = 1
    rollout_gpu_memory_utilization: float = 0.9


@dataclass(frozen=True)
class Workload:
    """What one micro-batch and one generation batch hold (the recipe's caps: the worst case)."""

    prompt_tokens: int
    completion_tokens: int
    micro_batch: int = 1
    generation_batch: int = 1
    """Completions a generation batch (``steps_per_generation x micro-batch x trainer processes``)."""
    group_size: int = 1
    gradient_checkpointing: bool = True
    trainable_layers: int | None = None
    aux_loss: bool = True
    bf16: bool = True
    routes_tokens: int = 0
    """Tokens whose recorded expert ids a rank holds for routing replay (a generation batch's share)."""
    linear_kernel: str = "fla"
    """Gated DeltaNet backward: ``fla`` (the GPU lock's kernels) or ``torch`` (transformers' reference)."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class MemoryEstimate:
    """Bytes per trainer process by component, against the device's usable memory."""

    components: dict[str, int] = field(default_factory=dict)
    device_bytes: int | None = None

    @property
    def total(self) -> int:
        return sum(self.components.values())

    @property
    def usable_bytes(self) -> int | None:
        return None if self.device_bytes is None else int(self.device_bytes * USABLE_FRACTION)

    @property
    def fits(self) -> bool:
        return self.usable_bytes is None or self.total <= self.usable_bytes


@dataclass
class RolloutEstimate:
    """vLLM's memory per GPU and how many full-length sequences its KV/state pool holds."""

    weights_bytes: int
    budget_bytes: int
    kv_pool_bytes: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    sequence_tokens: int

    @property
    def sequences(self) -> int:
        per_seq = self.sequence_tokens * self.kv_bytes_per_token + self.state_bytes_per_sequence
        return max(0, self.kv_pool_bytes // per_seq) if per_seq else 0


@dataclass
class TimeEstimate:
    """Seconds of one generation batch (worst case) against the collective timeout."""

    prefill_s: float
    prefill_shared_s: float
    decode_s: float
    concurrent: int
    steps: int
    timeout_s: float

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def fits(self) -> bool:
        return self.total_s <= self.timeout_s


def _trainable_layers(dims: ModelDims, work: Workload) -> int:
    return dims.num_layers if work.trainable_layers is None else min(work.trainable_layers, dims.num_layers)


def trainable_params(dims: ModelDims, work: Workload) -> int:
    """Parameters with gradients: the text stack, or only the top N layers (embeddings/LM head frozen)."""
    if work.trainable_layers is None:
        return dims.text_params()
    n = _trainable_layers(dims, work)
    mixers = dims.full_attention_params() * round(n * dims.full_attention_layers / dims.num_layers)
    mixers += dims.linear_attention_params() * (n - round(n * dims.full_attention_layers / dims.num_layers))
    return mixers + n * (dims.mlp_params() + 2 * dims.hidden_size) + dims.hidden_size


def layer_saved_bytes(dims: ModelDims, act: int, linear: bool, linear_kernel: str = "fla") -> int:
    """Bytes one decoder layer saves for its backward, per token (eager expert loop, fused attention).

    Norms: each RMSNorm keeps its fp32 input and normalised input (``8h``) and its output (``a h``); with
    per-head q/k norms (Qwen3, Qwen3.5) the same for q and k. Full attention: the
    q projection (gated: ``2 nq d``), roped q, k (projected and roped), v, the attention output and,
    gated, the sigmoid gate and gated output. Gated DeltaNet: the qkv projection, conv and SiLU outputs
    (``3 (2Kd + Vd)``), l2-normalised q and k (``2 Kd``), z, the kernel output, the gated norm's
    output and product (``4 Vd``), and b, a, beta, g (``4 nv``). MoE: router logits (``a E``) and its
    fp32 softmax (``4 E``); per routed expert (``k`` of them) the gathered input, gate/up output, SiLU,
    product and down output, ``(2h + 4I)``; the shared expert ``(2h + 4 Is)``. Dense MLP ``(h + 4I)``.
    ``linear_kernel="torch"`` (transformers' reference chunked delta rule, no fla: CPUs, a GPU without
    the kernels) also keeps, in fp32, its intra-chunk matrices and fp32 copies of q/k/v,
    ``4 (5 nv C + 8 nv dk)`` bytes (C = 64, the chunk); fla recomputes them in its backward.
    """
    h = dims.hidden_size
    norms = 2 * (8 * h + act * h)
    extra = 0
    if linear:
        mixer = (3 * dims.linear_conv_dim + 2 * dims.linear_key_dim + 4 * dims.linear_value_dim
                 + 4 * dims.linear_num_value_heads)
        if linear_kernel == "torch":
            extra = 4 * (5 * dims.linear_num_value_heads * GDN_CHUNK
                         + 8 * dims.linear_num_value_heads * dims.linear_key_head_dim)
    else:
        q = dims.num_attention_heads * dims.head_dim
        kv = dims.num_kv_heads * dims.head_dim
        mixer = q * (2 if dims.attn_output_gate else 1) + q + 3 * kv + q + (2 * q if dims.attn_output_gate else 0)
        if dims.qk_norm:
            norms += (8 + act) * (q + kv)
    if dims.is_moe:
        mlp_elems = dims.experts_per_token * (2 * h + 4 * dims.expert_intermediate)
        if dims.shared_expert_intermediate:
            mlp_elems += 2 * h + 4 * dims.shared_expert_intermediate
        router = dims.num_experts * (act + 4)
    else:
        mlp_elems, router = h + 4 * dims.dense_intermediate, 0
    return norms + act * (mixer + mlp_elems) + router + extra


def trainer_memory(dims: ModelDims, layout: Layout, work: Workload) -> MemoryEstimate:
    """Peak bytes per trainer process by component (module docstring)."""
    act = 2 if work.bf16 else 4
    c = max(1, layout.context_parallel)
    rows_tokens = work.micro_batch * math.ceil(work.tokens / c)
    n_train = _trainable_layers(dims, work)
    p_train = trainable_params(dims, work)
    p_frozen = dims.total_params() - p_train
    out: dict[str, int] = {}
    if layout.sharded:
        n = max(1, layout.trainer_processes)
        out["model states (sharded)"] = (16 * p_train + 2 * p_frozen) // n
    else:
        out["model states"] = 16 * p_train + 4 * p_frozen
        if layout.ddp:
            out["DDP gradient buckets"] = 4 * p_train
        if work.bf16:
            out["bf16 autocast weight copies"] = 2 * dims.total_params()
    linear_share = dims.linear_attention_layers / dims.num_layers
    per_layer = [layer_saved_bytes(dims, act, linear=False),
                 layer_saved_bytes(dims, act, linear=True, linear_kernel=work.linear_kernel)]
    if work.gradient_checkpointing:
        out["checkpointed layer inputs"] = n_train * rows_tokens * dims.hidden_size * act
        largest = max(per_layer) if dims.linear_attention_layers else per_layer[0]
        transient = dims.experts_per_token * (dims.hidden_size + 2 * dims.expert_intermediate) * act \
            if dims.is_moe else (dims.hidden_size + 2 * dims.dense_intermediate) * act
        out["one layer's recompute + backward"] = rows_tokens * (largest + transient)
        if dims.linear_attention_layers:
            out["Gated DeltaNet chunk states"] = (math.ceil(work.tokens / c / GDN_CHUNK) * work.micro_batch
                                                  * dims.linear_num_value_heads * dims.linear_key_head_dim
                                                  * dims.linear_value_head_dim * 4)
    else:
        mean_layer = per_layer[0] * (1 - linear_share) + per_layer[1] * linear_share
        out["saved activations (all trainable layers)"] = int(n_train * rows_tokens * mean_layer)
    if dims.is_moe and work.aux_loss:
        out["router logits (aux loss)"] = dims.num_layers * rows_tokens * dims.num_experts * (act + 4)
    if work.routes_tokens and dims.is_moe:
        out["replayed routes (generation batch)"] = work.routes_tokens * dims.num_layers * dims.experts_per_token * 2
    tile = min(work.micro_batch * math.ceil(work.completion_tokens / c), LOGITS_TILE_TOKENS)
    out["logits (fused LM head tile)"] = tile * dims.vocab_size * (act + 4)
    if layout.sharded:
        out["ZeRO-3/FSDP gathered layers + grads"] = 3 * 2 * dims.layer_params()
    out["runtime (CUDA/NCCL or Python)"] = RUNTIME_GPU_BYTES if layout.gpu else RUNTIME_CPU_BYTES
    if layout.gpu is None:
        out.update(cpu_host_memory(dims, layout, work, out))
    if layout.rollout == "colocate" and layout.gpu:
        out["colocated vLLM (utilization x memory)"] = int(layout.rollout_gpu_memory_utilization
                                                           * layout.gpu.memory_gib * GIB)
    return MemoryEstimate(out, int(layout.gpu.memory_gib * GIB) if layout.gpu else None)


def cpu_host_memory(dims: ModelDims, layout: Layout, work: Workload, tensors: dict[str, int]) -> dict[str, int]:
    """What a CPU process's peak RSS holds beyond the tensors above (module docstring, "CPU host memory")."""
    act = 2 if work.bf16 else 4
    activations = sum(v for k, v in tensors.items() if k.startswith(("saved activations", "one layer's recompute",
                                                                      "checkpointed layer inputs")))
    rows = max(1, work.generation_batch // max(1, layout.trainer_processes))
    kv = rows * work.tokens * dims.full_attention_layers * 2 * dims.num_kv_heads * dims.head_dim * act
    if dims.linear_attention_layers:
        kv += rows * dims.linear_attention_layers * dims.linear_num_value_heads * dims.linear_key_head_dim \
            * dims.linear_value_head_dim * 4
    return {"loading copy kept by the allocator (CPU)": int(CPU_LOAD_COPY_FACTOR * 4 * dims.total_params()),
            "generation KV cache (CPU, generation batch)": kv,
            "backward temporaries kept by the allocator (CPU)": int(CPU_BACKWARD_FACTOR * activations)}


def _kv_heads_per_gpu(dims: ModelDims, tp: int) -> int:
    return max(1, dims.num_kv_heads // tp)


def rollout_capacity(dims: ModelDims, layout: Layout, work: Workload) -> RolloutEstimate | None:
    """The rollout engine's KV pool per GPU and full-length sequences it holds (module docstring)."""
    if layout.rollout == "none" or layout.gpu is None:
        return None
    tp = max(1, layout.rollout_tp)
    budget = int(layout.rollout_gpu_memory_utilization * layout.gpu.memory_gib * GIB)
    weights = 2 * dims.total_params() // tp
    pool = max(0, budget - weights - VLLM_RESERVED_BYTES)
    kv_token = dims.full_attention_layers * 2 * _kv_heads_per_gpu(dims, tp) * dims.head_dim * 2
    state = 0
    if dims.linear_attention_layers:
        heads = max(1, dims.linear_num_value_heads // tp)
        state = dims.linear_attention_layers * (
            heads * dims.linear_key_head_dim * dims.linear_value_head_dim * dims.ssm_state_bytes
            + max(1, dims.linear_conv_dim // tp) * (dims.linear_conv_kernel - 1) * 2)
    return RolloutEstimate(weights, budget, pool, kv_token, state, work.tokens)


def prefill_flops(dims: ModelDims, prompt_tokens: int) -> float:
    """FLOPs of one prompt's prefill (module docstring)."""
    p = float(prompt_tokens)
    return (2 * dims.active_params() * p
            + dims.full_attention_layers * 2 * dims.num_attention_heads * dims.head_dim * p * p
            + dims.linear_attention_layers * 6 * dims.linear_num_value_heads * dims.linear_key_head_dim
            * dims.linear_value_head_dim * p)


def generation_time(dims: ModelDims, layout: Layout, work: Workload, rollout: RolloutEstimate,
                    timeout_s: float, *, mfu: float | None = None, bw_efficiency: float | None = None,
                    step_overhead_s: float | None = None) -> TimeEstimate:
    """Worst-case seconds of one generation batch on the rollout engine (module docstring); the three
    assumptions default to :data:`PREFILL_MFU`, :data:`DECODE_BW_EFFICIENCY`, :data:`DECODE_STEP_OVERHEAD_S`."""
    mfu = PREFILL_MFU if mfu is None else mfu
    bw_efficiency = DECODE_BW_EFFICIENCY if bw_efficiency is None else bw_efficiency
    step_overhead_s = DECODE_STEP_OVERHEAD_S if step_overhead_s is None else step_overhead_s
    gpu = layout.gpu
    assert gpu is not None
    tp = max(1, layout.rollout_tp)
    peak = tp * gpu.bf16_tflops * 1e12 * mfu
    one = prefill_flops(dims, work.prompt_tokens)
    prefill = work.generation_batch * one / peak
    shared = math.ceil(work.generation_batch / max(1, work.group_size)) * one / peak
    concurrent = max(1, min(rollout.sequences, work.generation_batch))
    steps = math.ceil(work.generation_batch / concurrent) * work.completion_tokens
    expert = 3 * dims.hidden_size * dims.expert_intermediate
    hit = dims.num_experts * (1 - (1 - dims.experts_per_token / dims.num_experts) ** concurrent) if dims.is_moe else 0
    dense = dims.total_params() - dims.frozen_extra_params - dims.num_layers * dims.num_experts * expert
    weight_bytes = 2 * (dense + dims.num_layers * hit * expert) / tp
    mean_ctx = work.prompt_tokens + work.completion_tokens / 2
    kv_bytes = concurrent * (mean_ctx * rollout.kv_bytes_per_token + 2 * rollout.state_bytes_per_sequence)
    step_s = (weight_bytes + kv_bytes) / (gpu.hbm_tb_s * 1e12 * bw_efficiency) + step_overhead_s
    return TimeEstimate(prefill, shared, steps * step_s, concurrent, steps, timeout_s)


@dataclass(frozen=True)
class RoutesTransfer:
    """R3's routes over ``/v1/completions`` for one generation batch (base64 ``.npy`` a choice, to rank 0)."""

    choices: int
    tokens: int
    """Route rows in the answer (every choice's prompt rows unless fetched once a group)."""
    json_bytes: int
    seconds: float
    prompt_once: bool


def routes_transfer(dims: ModelDims, work: Workload, *, prompt_once: bool = False) -> RoutesTransfer:
    """Bytes and decode seconds of one generation batch's routes (vllm_routes.py: a choice holds
    ``(P + C - 1)`` rows of ``L x k`` uint8; with ``prompt_once`` the prompt rows come once a group
    (``routed_experts_prompt_start``), each choice then ``C`` rows). Base64: ``4 ceil(n / 3)`` bytes."""
    row = dims.num_layers * dims.experts_per_token
    b, g = work.generation_batch, max(1, work.group_size)
    if prompt_once:
        arrays = [(work.prompt_tokens - 1, math.ceil(b / g)), (work.completion_tokens, b)]
    else:
        arrays = [(work.prompt_tokens + work.completion_tokens - 1, b)]
    tokens = sum(rows * n for rows, n in arrays)
    json_bytes = sum(n * 4 * math.ceil((NPY_HEADER_BYTES + rows * row) / 3) for rows, n in arrays)
    return RoutesTransfer(b, tokens, json_bytes, json_bytes / ROUTES_DECODE_BYTES_PER_S, prompt_once)


def generation_time_range(dims: ModelDims, layout: Layout, work: Workload, rollout: RolloutEstimate,
                          timeout_s: float) -> tuple[TimeEstimate, TimeEstimate]:
    """(pessimistic, optimistic) :class:`TimeEstimate` at the ends of :data:`ASSUMPTION_RANGES`."""
    r = ASSUMPTION_RANGES
    return tuple(generation_time(dims, layout, work, rollout, timeout_s, mfu=r["PREFILL_MFU"][end],
                                 bw_efficiency=r["DECODE_BW_EFFICIENCY"][end],
                                 step_overhead_s=r["DECODE_STEP_OVERHEAD_S"][1 - end]) for end in (0, 1))
