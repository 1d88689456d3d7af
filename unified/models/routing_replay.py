"""Routing replay for MoE policies: the rollout's expert choices reused by the trainer's forward.

Why. A token's routed experts are a discrete choice, ``topk(softmax(W_r h), k)``, and tiny numeric
differences between the rollout engine and the trainer (bf16 kernels, batch shape, KV-cache decoding,
a weight update between them) flip it: Rollout Routing Replay (R3, Ma et al. 2025, arXiv 2510.11370)
measured ~10% of the routers of Qwen3-30B-A3B choosing different experts in trainer and rollout
engine, and GRPO runs that collapsed without replay completed with it. R3 records the rollout's
experts per token and layer and has the trainer route through them.

The math, per MoE layer ``l`` and token ``t`` (``E`` experts, top ``k``; ``z = W_r h_t``, the live
router logits of the trainer, shape ``(N, E)`` over the ``N = B x T`` tokens of a forward):

    live:    S_t = topk(softmax(z_t), k)                   (the trainer's own choice)
    replay:  S_t = R[t, l]                                 (the rollout's k expert ids, recorded)
    weights: g_{t,e} = softmax(z_t)_e / sum_{j in S_t} softmax(z_t)_j      for e in S_t
    output:  MoE(h_t) = sum_{e in S_t} g_{t,e} Expert_e(h_t)

Only the *decision* S_t is replayed: the gate weights g come from the live logits, so the router
W_r gets its gradient through g as it does without replay (the Megatron / NeMo RL design; verl's
R3 does the same). Where ``R[t, l]`` holds :data:`NO_ROUTE` (a token the rollout never fed through
the model, such as a completion's last token, or padding) the live choice is used. With ``R`` equal
to the live choice, replay is the identity: ``g`` gathered at the live top-k equals the live top-k
values renormalised.

Shapes. A forward's routes are ``(B, T, L, k)`` (batch, positions of ``input_ids``, MoE layers in
module order, top-k), integer dtype :func:`route_dtype` (int8 for E <= 127, int16 for E <= 32767):
:func:`route_bytes_per_token` = ``L x k x itemsize`` bytes a token, e.g. 40 x 8 x 2 = 640 bytes for
Qwen3.5-35B-A3B (E = 256 needs int16 with the -1 sentinel) and 30 x 2 x 1 = 60 for the embedded
Mixtral. vLLM's ``CompletionOutput.routed_experts`` (``enable_return_routed_experts``) is ``(T, L, k)``
per sequence, the same layout without the batch axis (:func:`routes_from_vllm`).

Which modules. Transformers' MoE blocks call a router module (``MixtralTopKRouter``,
``Qwen3_5MoeTopKRouter``, ``Qwen3MoeTopKRouter``, ...) ``gate(h) -> (logits, weights, indices)``; a
forward hook on each router (:class:`RoutingReplay`) records or replaces ``(weights, indices)``,
so no transformers class is forked. The hooks use the tokens' shape of the current forward, taken
by a pre-hook on the model itself.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal

import torch

NO_ROUTE = -1
"""Route entry meaning "no recorded choice: route live" (padding, a completion's last token)."""
ReplayMode = Literal["idle", "record", "replay"]


def route_dtype(num_experts: int) -> torch.dtype:
    """The smallest signed integer dtype holding expert ids ``0..E-1`` and :data:`NO_ROUTE`."""
    if num_experts <= 127:
        return torch.int8
    if num_experts <= 32767:
        return torch.int16
    return torch.int32


def moe_routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's top-k router modules in layer order (class name ending in ``TopKRouter``, with
    ``top_k`` and ``num_experts``); ``[]`` for a dense model."""
    return [m for _, m in model.named_modules()
            if type(m).__name__.endswith("TopKRouter") and hasattr(m, "top_k") and hasattr(m, "num_experts")]


@dataclass(frozen=True)
class RouteLayout:
    """What one token's routes are: ``layers`` MoE layers x ``top_k`` ids of ``num_experts``."""

    layers: int
    top_k: int
    num_experts: int

    @property
    def dtype(self) -> torch.dtype:
        return route_dtype(self.num_experts)

    @property
    def bytes_per_token(self) -> int:
        """``layers x top_k x itemsize`` bytes a token."""
        return self.layers * self.top_k * torch.empty((), dtype=self.dtype).element_size()

    @classmethod
    def of(cls, model: torch.nn.Module) -> "RouteLayout":
        routers = moe_routers(model)
        if not routers:
            raise ValueError(f"routing replay needs a MoE model with top-k routers; {type(model).__name__} has none")
        return cls(len(routers), int(routers[0].top_k), int(routers[0].num_experts))


def route_bytes_per_token(model: torch.nn.Module) -> int:
    """Bytes the routes of one token take (:attr:`RouteLayout.bytes_per_token`)."""
    return RouteLayout.of(model).bytes_per_token


@dataclass
class Agreement:
    """Counts of (token, layer) pairs whose trainer top-k set equals the replayed one."""

    equal: int = 0
    total: int = 0

    @property
    def share(self) -> float:
        return self.equal / self.total if self.total else float("nan")

    def reset(self) -> None:
        self.equal = self.total = 0


def same_sets(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(N,)`` bool: row i of ``a`` and ``b`` (``(N, k)`` expert ids) name the same set of experts."""
    return (a.long().sort(dim=-1).values == b.long().sort(dim=-1).values).all(dim=-1)


def replayed_weights(logits: torch.Tensor, indices: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Gate weights ``g`` (module docstring) of the experts ``indices`` ``(N, k)`` from live ``logits``
    ``(N, E)``: softmax in fp32, gathered, renormalised over the k, cast to ``dtype``. Differentiable in
    ``logits``."""
    probs = torch.softmax(logits.float(), dim=-1).gather(-1, indices)
    return (probs / probs.sum(dim=-1, keepdim=True)).to(dtype)


class RoutingReplay:
    """Forward hooks on a MoE model's routers that record or replay the top-k decision.

    - ``record`` (:meth:`recording`): every router call's top-k ids are kept; :meth:`recorded_routes`
      returns them as ``(B, T_total, L, k)``, the calls' positions concatenated (a prefill of ``P``
      positions, then each decode step's one), as generation feeds them.
    - ``replay`` (:meth:`replaying` or :meth:`set_routes`): each router call takes its decision from the
      routes ``(B, T, L, k)`` of the forward's ``input_ids`` (``B x T`` must be the forward's token shape)
      and its weights from the live logits; :attr:`agreement` counts the (token, layer) pairs whose live
      top-k set equals the replayed one (positions with :data:`NO_ROUTE` are not counted).
      :meth:`set_routes` keeps the routes until replaced or cleared, so that gradient checkpointing's
      recompute in the backward pass routes as the forward did.
    - ``idle``: the hooks do nothing.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.routers = moe_routers(model)
        self.layout = RouteLayout.of(model)
        self.mode: ReplayMode = "idle"
        self.force = True
        """``False``: in ``replay`` mode only count :attr:`agreement`, routing live (``moe.routing_replay: record``)."""
        self.agreement = Agreement()
        self._routes: torch.Tensor | None = None
        self._shape: tuple[int, int] | None = None
        self._recorded: list[list[torch.Tensor]] = [[] for _ in self.routers]
        self._handles = [model.register_forward_pre_hook(self._take_shape, with_kwargs=True)]
        self._handles += [r.register_forward_hook(self._hook(i)) for i, r in enumerate(self.routers)]

    def remove(self) -> None:
        """Take the hooks off the model."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # the forward's token shape (B, T), from the outer model's input_ids / inputs_embeds
    def _take_shape(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if ids is not None:
            self._shape = (int(ids.shape[0]), int(ids.shape[1]))

    def _hook(self, layer: int):
        def hook(module, args, output):
            if self.mode == "idle":
                return None
            logits, weights, indices = output
            if self._shape is None or self._shape[0] * self._shape[1] != indices.shape[0]:
                raise RuntimeError(f"routing replay: router {layer} saw {indices.shape[0]} tokens, the forward's "
                                   f"input is {self._shape}; call the model with input_ids of shape (B, T)")
            if self.mode == "record":
                self._recorded[layer].append(indices.detach().reshape(*self._shape, -1).to(self.layout.dtype))
                return None
            return self._replay(layer, logits, weights, indices)
        return hook

    def _replay(self, layer: int, logits, weights, indices):
        routes = self._routes
        if routes is None:
            return None
        if tuple(routes.shape[:2]) != self._shape:
            raise RuntimeError(f"routing replay: routes for {tuple(routes.shape[:2])} (batch, positions), the "
                               f"forward's input_ids are {self._shape}")
        forced = routes[:, :, layer].reshape(-1, routes.shape[-1]).to(indices.device, torch.long)
        known = (forced >= 0).all(dim=-1)
        with torch.no_grad():
            self.agreement.equal += int((same_sets(indices, forced) & known).sum())
            self.agreement.total += int(known.sum())
        if not self.force:
            return None
        chosen = torch.where(known.unsqueeze(-1), forced, indices)
        return logits, replayed_weights(logits, chosen, weights.dtype), chosen.to(indices.dtype)

    def set_routes(self, routes: torch.Tensor | None) -> None:
        """Replay ``routes`` ``(B, T, L, k)`` in every forward until replaced (``None``: back to idle)."""
        if routes is not None:
            self.check_routes(routes)
        self._routes = routes
        self.mode = "idle" if routes is None else "replay"

    def check_routes(self, routes: torch.Tensor) -> None:
        lay = self.layout
        if routes.dim() != 4 or routes.shape[2:] != (lay.layers, lay.top_k):
            raise ValueError(f"routes: expected (batch, positions, {lay.layers}, {lay.top_k}), got "
                             f"{tuple(routes.shape)}")
        if routes.numel() and int(routes.max()) >= lay.num_experts:
            raise ValueError(f"routes: expert id {int(routes.max())} >= num_experts {lay.num_experts}")

    @contextmanager
    def replaying(self, routes: torch.Tensor) -> Iterator["RoutingReplay"]:
        previous = (self.mode, self._routes)
        self.set_routes(routes)
        try:
            yield self
        finally:
            self.mode, self._routes = previous

    @contextmanager
    def recording(self) -> Iterator["RoutingReplay"]:
        previous = (self.mode, self._routes)
        self._recorded = [[] for _ in self.routers]
        self.mode = "record"
        try:
            yield self
        finally:
            self.mode, self._routes = previous

    def recorded_prefill_width(self) -> int:
        """Positions of the first recorded forward (a ``generate`` call's left-padded prompt width); raises
        unless every later forward fed one position (KV-cache decoding, what :func:`routes_from_generation`
        reads)."""
        widths = [int(c.shape[1]) for c in self._recorded[0]]
        if any(w != 1 for w in widths[1:]):
            raise RuntimeError(f"routing replay: generation forwards of {widths} positions; expected a prefill, then "
                               "one position a step (generate with use_cache=True)")
        return widths[0]

    def recorded_routes(self) -> torch.Tensor:
        """``(B, T_total, L, k)``: the recorded calls' positions concatenated, layers stacked."""
        if not self._recorded or not self._recorded[0]:
            raise RuntimeError("routing replay: nothing recorded (no forward ran inside recording())")
        per_layer = [torch.cat(calls, dim=1) for calls in self._recorded]
        return torch.stack(per_layer, dim=2).cpu()


def routes_from_generation(recorded: torch.Tensor, prompt_lengths: list[int], completion_lengths: list[int],
                           prompt_width: int | None = None) -> list[torch.Tensor]:
    """Per sample ``(P_i + C_i, L, k)`` routes of prompt + completion from what :class:`RoutingReplay`
    recorded over one left-padded ``generate`` call ``(B, P_max + steps, L, k)`` (prefill of ``P_max``
    positions, then one per decoded token fed back). Completion token ``j`` is the input of decode step
    ``j``; the last completion token is never fed back, so its row is :data:`NO_ROUTE`. ``prompt_width``:
    ``P_max`` when the prompts were padded wider than the longest (:meth:`RoutingReplay.recorded_prefill_width`)."""
    out = []
    width = prompt_width or max(prompt_lengths)
    for i, (p, c) in enumerate(zip(prompt_lengths, completion_lengths, strict=True)):
        prompt = recorded[i, width - p:width]
        fed = recorded[i, width:width + max(c - 1, 0)]
        last = torch.full((min(c, 1), *recorded.shape[2:]), NO_ROUTE, dtype=recorded.dtype)
        out.append(torch.cat([prompt, fed, last], dim=0))
    return out


def share_prompt_routes(routes: list[torch.Tensor], prompt_ids: list[list[int]]) -> list[torch.Tensor]:
    """Give consecutive samples with the same prompt (a GRPO group) the first one's prompt routes.

    The prompt's tokens are the same in every completion of a group, so one record serves all of them
    (vLLM prefills a group's prompt once with its prefix cache; batched ``generate`` recomputes it per
    row, where batch-dependent kernels can make the copies differ). Returns new tensors: the group's
    prompt rows, then each sample's own completion rows."""
    out: list[torch.Tensor] = []
    for i, (r, ids) in enumerate(zip(routes, prompt_ids, strict=True)):
        if i and prompt_ids[i - 1] == ids and out:
            lead = out[-1][:len(ids)]
            out.append(torch.cat([lead, r[len(ids):]], dim=0))
        else:
            out.append(r)
    return out


def pad_routes(routes: list[torch.Tensor], prompt_lengths: list[int], prompt_width: int, completion_width: int
               ) -> torch.Tensor:
    """``(B, prompt_width + completion_width, L, k)`` in TRL's layout of ``prompt_completion_ids``: each
    sample's prompt rows right-aligned in the left-padded prompt block, its completion rows left-aligned
    in the right-padded completion block; padding is :data:`NO_ROUTE`."""
    if not routes:
        raise ValueError("pad_routes: no samples")
    tail = routes[0].shape[1:]
    out = torch.full((len(routes), prompt_width + completion_width, *tail), NO_ROUTE, dtype=routes[0].dtype)
    for i, (r, p) in enumerate(zip(routes, prompt_lengths, strict=True)):
        c = r.shape[0] - p
        if p > prompt_width or c > completion_width:
            raise ValueError(f"pad_routes: sample {i} has {p} prompt + {c} completion rows, the batch "
                             f"{prompt_width} + {completion_width}")
        out[i, prompt_width - p:prompt_width] = r[:p]
        out[i, prompt_width:prompt_width + c] = r[p:]
    return out


def routes_from_vllm(routed_experts, num_experts: int, length: int | None = None) -> torch.Tensor:
    """vLLM's ``CompletionOutput.routed_experts`` (numpy ``(T, L, k)``, prompt and completion positions,
    with ``enable_return_routed_experts``) as a ``(T, L, k)`` route tensor of :func:`route_dtype`;
    ``length`` pads with :data:`NO_ROUTE` (the last completion token vLLM did not feed back) or checks."""
    tensor = torch.as_tensor(routed_experts)
    if tensor.dim() != 3:
        raise ValueError(f"vLLM routed_experts: expected (tokens, layers, top_k), got {tuple(tensor.shape)}")
    if tensor.numel() and (int(tensor.max()) >= num_experts or int(tensor.min()) < 0):
        raise ValueError(f"vLLM routed_experts: ids outside 0..{num_experts - 1}")
    tensor = tensor.to(route_dtype(num_experts))
    if length is not None:
        if tensor.shape[0] > length:
            raise ValueError(f"vLLM routed_experts: {tensor.shape[0]} positions for a sequence of {length}")
        pad = torch.full((length - tensor.shape[0], *tensor.shape[1:]), NO_ROUTE, dtype=tensor.dtype)
        tensor = torch.cat([tensor, pad], dim=0)
    return tensor



class RolloutLogpRecorder:
    """The log-probs ``log_softmax(z / temperature)`` of the tokens an in-process ``generate`` samples, as
    the trainer defines them (before top-p/top-k), kept as it decodes: a hook on the output layer keeps the
    last position's ``(B, V)`` log-probs, and the next forward's input (the token sampled from them) picks
    one a row; the last step is picked with the completions at the end. Memory: one ``(B, V)`` fp32."""

    def __init__(self, model, temperature: float = 1.0) -> None:
        self.temperature = temperature
        self.previous: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []
        head = model.get_output_embeddings()
        self._handles = [model.register_forward_pre_hook(self._fed, with_kwargs=True),
                         head.register_forward_hook(self._logits)]

    def _fed(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self.previous is not None and ids is not None:
            self.steps.append(self.previous.gather(-1, ids[:, -1:].to(self.previous.device)).squeeze(-1).cpu())

    def _logits(self, module, args, output) -> None:
        self.previous = torch.log_softmax(output[:, -1].detach().float() / self.temperature, dim=-1)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def padded(self, lengths: list[int], last_tokens: list[int]) -> torch.Tensor:
        """``(B, max(lengths))``: row i's first ``lengths[i]`` sampled tokens' log-probs, NaN after."""
        out = torch.full((len(lengths), max(lengths, default=0)), float("nan"))
        steps = torch.stack(self.steps, dim=1) if self.steps else torch.zeros(len(lengths), 0)
        for i, n in enumerate(lengths):
            fed = min(n, steps.shape[1])
            out[i, :fed] = steps[i, :fed]
            if n > fed and self.previous is not None:  # the last token, never fed back
                out[i, fed] = self.previous[i, last_tokens[i]].cpu()
        return out


def mismatch_kl(trainer_logps: torch.Tensor, rollout_logps: torch.Tensor, mask: torch.Tensor) -> float:
    """k3 estimate of KL(pi_rollout || pi_trainer) per token over ``mask`` (B x T), NaN rollout entries
    left out: ``mean(r - 1 - log r)``, ``r = exp(logp_trainer - logp_rollout)`` (Schulman's k3, >= 0)."""
    m = mask.bool() & ~torch.isnan(rollout_logps)
    if not bool(m.any()):
        return float("nan")
    log_r = (trainer_logps.double() - rollout_logps.double())[m]  # fp64: r - 1 - log r cancels for tiny log r
    return float(torch.expm1(log_r).sub(log_r).clamp_min(0).mean())


__all__ = ["NO_ROUTE", "Agreement", "RolloutLogpRecorder", "RouteLayout", "RoutingReplay", "mismatch_kl",
           "moe_routers", "pad_routes", "replayed_weights", "route_bytes_per_token", "route_dtype", "routes_from_generation",
           "routes_from_vllm", "same_sets", "share_prompt_routes"]
