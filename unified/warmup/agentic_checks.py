"""Whether an agentic run can sample on its ``generation.backend`` (light: read by the preflight before anything loads).

The engines themselves are :mod:`unified.warmup.agentic_backends`; this module says which combinations they refuse.
"""

from __future__ import annotations

import importlib.util

from unified.warmup.config import WarmupConfig, is_agentic


def cuda_trainer() -> bool:
    """Whether the trainer process has a CUDA device (weight sync to a vLLM server needs one)."""
    import torch

    return torch.cuda.is_available()


def backend_problems(cfg: WarmupConfig) -> list[str]:
    """One line for each reason the agentic run cannot sample on ``cfg.generation.backend``; empty when it can
    (and for a recipe that is not agentic)."""
    backend = cfg.generation.backend
    if backend == "hf" or not is_agentic(cfg):
        return []
    if cfg.moe.require_rollout_routes:
        return [f"moe.require_rollout_routes with generation.backend={backend}: agentic episodes are sampled through "
                "vLLM's chat API, which returns no routed experts, and the agentic loss does not replay routes yet; "
                "set moe.require_rollout_routes=false or generation.backend=hf"]
    if backend == "vllm_colocate" and importlib.util.find_spec("vllm") is None:
        return ["generation.backend=vllm_colocate: vLLM is not installed in this environment (the gpu extra on a "
                "CUDA machine); use generation.backend=hf, or vllm_server with a rollout server"]
    if backend == "vllm_colocate" and cfg.generation.vllm_tensor_parallel_size > 1:
        return [f"generation.vllm_tensor_parallel_size={cfg.generation.vllm_tensor_parallel_size} with "
                "generation.backend=vllm_colocate: the agentic trainer is one process, so its colocated vLLM runs "
                "on one GPU (tensor parallel 1); use vllm_server for a larger engine"]
    if backend == "vllm_server" and cfg.train.max_steps > 1 and not cuda_trainer():
        return ["generation.backend=vllm_server on a trainer without CUDA: the weights reach the server over vLLM's NCCL "
                "weight-transfer engine (CUDA only), so every step after the first would sample the first step's "
                f"weights (train.max_steps={cfg.train.max_steps}); run on a GPU, or use generation.backend=hf"]
    return []


__all__ = ["backend_problems", "cuda_trainer"]
