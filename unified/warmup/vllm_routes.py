"""The rollout engine's MoE routes from TRL's vLLM paths (R3: Rollout Routing Replay, arXiv 2510.11370).

What vLLM gives. With ``enable_return_routed_experts`` (engine argument; ``--enable-return-routed-experts``
for ``vllm serve``, which ``trl vllm-serve`` forwards as an extra argument), every finished completion carries
the top-k expert ids of each position vLLM fed through the model: a numpy array ``(P + C - 1, L, k)``
(prompt positions from ``SamplingParams.routed_experts_prompt_start``, default 0, then the completion's; the
last sampled token is never fed back, so it has no row), ``uint8`` for ``E <= 256`` experts, else ``uint16``.

- colocate (``vllm.LLM`` in the trainer): ``RequestOutput.outputs[j].routed_experts``, the array itself;
- server (``vllm serve``): each ``/v1/completions`` choice's ``routed_experts``, the base64 of the array's
  ``.npy`` bytes (``np.load(io.BytesIO(base64.b64decode(s)))``), ``None`` when the server runs without
  the flag.

What TRL 1.16 does with it: nothing. ``VLLMGeneration.generate`` keeps token ids and log-probs, and neither
``VLLMClient.generate`` nor the colocated ``LLM(...)`` asks for routes. The seams used here, the smallest
that the trainer offers:

- server: the main process's ``VLLMClient._post`` is wrapped; the choices of every ``/v1/completions``
  answer leave their ``routed_experts`` in an :class:`EngineRoutes` (choice order = TRL's completion order:
  prompt-major, ``n`` a prompt). TRL broadcasts only its own payload; :meth:`EngineRoutes.take` scatters the
  routes from the main process, each process receiving only its slice (the one TRL gives it).

Cost: a choice carries its prompt's rows too, ``(P + C - 1) x L x k`` bytes (uint8), base64 in JSON: the
35B recipe's worst case (64k + 4k tokens, 40 layers x top-8, 768 completions in one request) is ~22 MB a
choice raw, ~22 GB base64 a generation batch, the prompt rows repeated for each of a group's ``n`` choices.
vLLM's ``routed_experts_prompt_start`` (a request field) would drop the prompt rows; taking them once a group
is not wired (docs/routing_replay.md).
- colocate: TRL's ``LLM`` is built with ``enable_return_routed_experts=True`` (:func:`colocated_llm_returns_routes`
  around the trainer's construction), and its ``generate`` is wrapped to keep each output's routes in the
  order TRL flattens them (TP > 1: this rank's share of the TP group, as TRL slices).

:class:`unified.warmup.routing.RoutingState` turns them into the batch's routes
(:func:`unified.models.routing_replay.routes_from_vllm`; the missing last row routes live).
"""

from __future__ import annotations

import base64
import io
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

COMPLETIONS_PATH = "/v1/completions"
SERVER_FLAG = "--enable-return-routed-experts"
"""The ``vllm serve`` argument that makes ``/v1/completions`` return each choice's ``routed_experts``."""


def decode_routed_experts(value: Any) -> np.ndarray | None:
    """vLLM's routes of one completion as a numpy ``(T, L, k)`` array: the array itself (colocate), the
    base64 ``.npy`` string of a server choice, or ``None`` (not returned)."""
    if value is None:
        return None
    if isinstance(value, str):
        array = np.load(io.BytesIO(base64.b64decode(value)), allow_pickle=False)
    else:
        array = np.asarray(value)
    if array.ndim != 3:
        raise ValueError(f"vLLM routed_experts: expected (tokens, layers, top_k), got shape {array.shape}")
    return array


@dataclass
class EngineRoutes:
    """The routes the engine returned for the generation in flight, one entry a completion (None: none)."""

    mode: str = "server"
    """``server`` (only the main process talks to the server) or ``colocate`` (every process has its own)."""
    received: list[np.ndarray | None] = field(default_factory=list)
    tp_group: Any = None
    """Colocate with tensor parallelism: the TP group whose gathered prompts every rank's LLM generated."""

    def keep(self, values) -> None:
        self.received.extend(decode_routed_experts(v) for v in values)

    def take(self, local_count: int) -> list[np.ndarray | None]:
        """This process's ``local_count`` completions' routes (empty entries when the engine gave none)."""
        received, self.received = self.received, []
        received = self._share(received, local_count)
        if len(received) != local_count:  # nothing came back (the wrapped call was not reached) or a mismatch
            if received:
                raise RuntimeError(f"vLLM routed_experts: {len(received)} completions' routes for {local_count} "
                                   "completions of this process")
            return [None] * local_count
        return received

    def _share(self, received: list, local_count: int) -> list:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return received
        world = dist.get_world_size()
        if self.mode == "server" and world > 1:  # rank 0 got every rank's completions, in TRL's rank order
            shares = [received[r * local_count:(r + 1) * local_count] for r in range(world)] \
                if dist.get_rank() == 0 else None
            box: list = [None]
            dist.scatter_object_list(box, shares, src=0)  # each rank only its share (TRL broadcasts all)
            return box[0]
        if self.mode == "colocate" and self.tp_group is not None and dist.get_world_size(self.tp_group) > 1:
            start = dist.get_rank(group=self.tp_group) * local_count
            return received[start:start + local_count]
        return received


def capture_server_routes(client, sink: EngineRoutes) -> None:
    """Wrap ``client._post`` (TRL's ``VLLMClient``) so that ``/v1/completions`` answers leave their
    choices' ``routed_experts`` in ``sink``."""
    post = client._post

    def post_keeping_routes(url: str, **kwargs) -> dict:
        answer = post(url, **kwargs)
        if url.endswith(COMPLETIONS_PATH):
            sink.keep(choice.get("routed_experts") for choice in answer["choices"])
        return answer

    client._post = post_keeping_routes


class RoutesKeepingLLM:
    """A colocated ``vllm.LLM`` whose ``generate`` keeps each completion's ``routed_experts`` in a sink;
    everything else is the LLM's own."""

    def __init__(self, llm, sink: EngineRoutes) -> None:
        self._llm, self._sink = llm, sink

    def generate(self, *args, **kwargs):
        outputs = self._llm.generate(*args, **kwargs)
        self._sink.keep(o.routed_experts for out in outputs for o in out.outputs)
        return outputs

    def __getattr__(self, name: str):
        return getattr(self._llm, name)


@contextmanager
def colocated_llm_returns_routes(enabled: bool) -> Iterator[None]:
    """While TRL builds its colocated ``vllm.LLM`` (the trainer's construction), add
    ``enable_return_routed_experts=True`` to its arguments (TRL 1.16 exposes no engine kwargs)."""
    from trl.generation import vllm_generation

    original = getattr(vllm_generation, "LLM", None)  # absent without vLLM (TRL then refuses use_vllm itself)
    if not enabled or original is None:
        yield
        return

    def llm_with_routes(*args, **kwargs):
        return original(*args, **{**kwargs, "enable_return_routed_experts": True})

    vllm_generation.LLM = llm_with_routes
    try:
        yield
    finally:
        vllm_generation.LLM = original


def attach_engine_routes(trainer) -> EngineRoutes | None:
    """Wrap the trainer's vLLM engine (TRL's ``trainer.vllm_generation``) to keep its routes; None without
    vLLM. In server mode only the main process has a client."""
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or generation is None:
        return None
    if generation.mode == "server":
        sink = EngineRoutes("server")
        client = getattr(generation, "vllm_client", None)
        if client is not None:
            capture_server_routes(client, sink)
        return sink
    sink = EngineRoutes("colocate", tp_group=getattr(generation, "tp_group", None))
    generation.llm = RoutesKeepingLLM(generation.llm, sink)
    return sink


__all__ = ["COMPLETIONS_PATH", "SERVER_FLAG", "EngineRoutes", "RoutesKeepingLLM", "attach_engine_routes",
           "capture_server_routes", "colocated_llm_returns_routes", "decode_routed_experts"]
