"""The agentic trainer's rollout engines: who samples an episode's policy calls on each ``generation.backend``.

Each engine hands the agent loop a :class:`unified.inference.base.ChatModel` whose outputs carry the
engine's own prompt token ids, generated token ids and each generated token's log-probability (never
re-tokenised text), so :meth:`unified.types.Episode.token_trajectory` and GSPO's ratio
(:mod:`unified.warmup.agentic_loss`: ``l_old`` is the engine's number) are exact, and puts the trainer's
weights into the engine before each step (``sync_weights``):

- ``hf``: the checkpoint's in-process engine on the trainer's own weights (nothing to sync);
- ``vllm_server``: the warmup's rollout server (``trl vllm-serve``, i.e. ``vllm serve`` with TRL's weight
  routes, behind :mod:`unified.warmup.rollout_gate`'s key when off this machine) at
  ``generation.vllm_server_host:port``. Policy calls go to its OpenAI ``/v1/chat/completions`` with
  ``return_token_ids`` and ``logprobs`` (the ``vllm`` backend's request, :class:`unified.inference.vllm_backend.VLLMPolicy`),
  carrying the run's key (:func:`unified.warmup.rollout_client.rollout_server_key`). Weights go to the server
  before every step after the first (and the first of a resumed process) through TRL's ``VLLMClient``
  (NCCL weight-transfer engine: a CUDA trainer only; TRL's own refusal otherwise), keyed the same way;
- ``vllm_colocate``: a ``vllm.LLM`` in the trainer process (GPU; TRL's colocate settings), prompts rendered
  with the checkpoint's chat template (as ``hf`` renders them) and fed as token ids, weights loaded into
  its model runner before every step after the first (TRL's colocate sync).

Refused with one line before anything loads (:func:`unified.warmup.agentic_checks.refuse_agentic_problems`):
any setting the agentic trainer does not apply, ``moe.*`` among them (vLLM returns routed experts on
``/v1/completions`` and ``LLM.generate``, not on chat completions; the agentic loss does not replay routes yet),
``vllm_colocate`` without vLLM in this environment, and ``vllm_server`` on a trainer without CUDA for more than
one step (no weight sync: the server would sample every later step from the first step's weights).
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any


from unified.inference.base import ChatModel, PolicyOutput, PolicyRequest, SamplingConfig
from unified.inference.hf import HFPolicy
from unified.inference.openai_backend import OpenAIPolicy
from unified.inference.server import free_port
from unified.inference.vllm_backend import VLLMPolicy, checkpoint_dir, raw_completion
from unified.warmup.agentic_checks import cuda_trainer
from unified.warmup.config import WarmupConfig
from unified.warmup.rollout_client import keyed_client_class, rollout_server_key


def rollout_sampling(cfg: WarmupConfig) -> SamplingConfig:
    """The episodes' sampling (no per-request seed: a group would repeat one episode)."""
    g = cfg.generation
    return SamplingConfig(temperature=g.temperature, top_p=g.top_p, max_new_tokens=g.max_completion_length,
                          thinking=g.thinking)


class RolloutSampler:
    """The episodes' policy (``policy``) and the weight sync before each step."""

    def __init__(self, policy: ChatModel) -> None:
        self.policy = policy

    def sync_weights(self, model, step: int) -> None:
        """Put ``model``'s weights into the engine before ``step`` (1-based)."""

    def close(self) -> None:
        self.policy.close()


class ServedVLLMPolicy(VLLMPolicy):
    """:class:`VLLMPolicy`'s requests (``return_token_ids``, ``logprobs``, the raw completion from vLLM's ids)
    to a vLLM server that runs already (the warmup's rollout server), not one this process starts."""

    def __init__(self, base_url: str, served_name: str, tokenizer, sampling: SamplingConfig, *,
                 api_key: str | None = None, max_concurrency: int = 8, timeout_s: float = 600.0) -> None:
        OpenAIPolicy.__init__(self, f"openai:{base_url}#{served_name}", sampling, timeout_s=timeout_s,
                              max_retries=2, max_concurrency=max_concurrency, logprobs=True, api_key=api_key)
        self.tokenizer = tokenizer


def served_model_name(base_url: str, key: str | None, timeout_s: float = 30.0) -> str:
    """The one model a vLLM server serves (``GET /v1/models``)."""
    request = urllib.request.Request(f"{base_url}/models",
                                     headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 (the run's own server)
        data = json.loads(answer.read())
    names = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    if len(names) != 1 or not isinstance(names[0], str):
        raise RuntimeError(f"{base_url}/models: expected the one model of the rollout server, got {names}")
    return names[0]


class ServerSampler(RolloutSampler):
    """``vllm_server``: episodes on the rollout server's chat completions; weights over TRL's client."""

    def __init__(self, cfg: WarmupConfig, loaded, *, base_url: str | None = None, key: str | None = None) -> None:
        gen = cfg.generation
        self.root = base_url or f"http://{gen.vllm_server_host}:{gen.vllm_server_port}"
        self.key = key if base_url is not None else rollout_server_key(cfg)
        self.cfg = cfg
        name = served_model_name(f"{self.root}/v1", self.key)
        super().__init__(ServedVLLMPolicy(f"{self.root}/v1", name, loaded.tokenizer, rollout_sampling(cfg),
                                          api_key=self.key, max_concurrency=cfg.agentic.max_in_flight,
                                          timeout_s=gen.vllm_server_timeout_s))
        self.client = None
        self.synced_once = False

    def sync_weights(self, model, step: int) -> None:
        if step == 1 and not self.synced_once:  # the server loaded the checkpoint the trainer starts from
            return
        if not cuda_trainer():
            raise RuntimeError("generation.backend=vllm_server: weight sync to the server needs a CUDA trainer "
                               "(vLLM's NCCL weight-transfer engine)")
        if self.client is None:
            from trl.generation.vllm_client import VLLMClient

            self.client = keyed_client_class(VLLMClient, self.key)(
                base_url=self.root, connection_timeout=self.cfg.generation.vllm_server_timeout_s)
            self.client.init_communicator(device="cuda")
        self.client.update_model_params(model)
        self.client.reset_prefix_cache()
        self.synced_once = True

    def close(self) -> None:
        super().close()
        if self.client is not None:
            self.client.close_communicator()


class ColocatedVLLMPolicy(ChatModel):
    """Policy calls on an in-process ``vllm.LLM``: the chat template rendered as ``hf`` renders it, the
    prompt's token ids fed as they are, each output's ids and the sampled tokens' log-probabilities
    (``logprobs=0``; ``logprobs_mode=processed_logprobs``: after temperature, as the loss's old side)."""

    name = "vllm_colocate"

    def __init__(self, llm, tokenizer, sampling: SamplingConfig) -> None:
        super().__init__("vllm_colocate", sampling)
        self.llm, self.tokenizer = llm, tokenizer

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        from vllm import SamplingParams, TokensPrompt

        prompts: list[Any] = []
        params = []
        outputs: list[PolicyOutput | Exception | None] = []
        for request in requests:
            s = self.sampling_for(request)
            try:
                text = self.tokenizer.apply_chat_template(request.messages, tools=request.tools or None,
                                                          tokenize=False, add_generation_prompt=True,
                                                          enable_thinking=s.thinking) + request.prefix
            except Exception as exc:  # a template error belongs to that request only
                outputs.append(exc)
                continue
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            prompts.append(TokensPrompt(prompt_token_ids=ids))
            params.append(SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_new_tokens,
                                         logprobs=0))
            outputs.append(None)
        done = iter(self.llm.generate(prompts, params, use_tqdm=False) if prompts else [])
        result: list[PolicyOutput | Exception] = []
        for request, slot in zip(requests, outputs):
            if slot is not None:
                result.append(slot)
                continue
            answer = next(done)
            choice = answer.outputs[0]
            ids = list(choice.token_ids)
            logprobs = [float(step[token].logprob) for step, token in zip(choice.logprobs or [], ids)]
            result.append(PolicyOutput(text=raw_completion(self.tokenizer, ids), prefix=request.prefix,
                                       token_ids=ids, prompt_token_ids=list(answer.prompt_token_ids),
                                       logprobs=logprobs if len(logprobs) == len(ids) else None,
                                       prompt_tokens=len(answer.prompt_token_ids), completion_tokens=len(ids),
                                       finish_reason=str(choice.finish_reason or "")))
        return result


class ColocateSampler(RolloutSampler):
    """``vllm_colocate``: a ``vllm.LLM`` in this process (TRL's colocate settings), weights loaded each step."""

    def __init__(self, cfg: WarmupConfig, loaded) -> None:
        from vllm import LLM

        gen = cfg.generation
        for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                            ("MASTER_PORT", str(free_port()))):
            os.environ.setdefault(name, value)  # one trainer process: vLLM's external launcher is this process
        self.llm = LLM(model=checkpoint_dir(cfg.model.name_or_path)[0], tensor_parallel_size=1,
                       gpu_memory_utilization=gen.vllm_gpu_memory_utilization, max_model_len=gen.vllm_max_model_length,
                       distributed_executor_backend="external_launcher", seed=cfg.train.seed,
                       logprobs_mode="processed_logprobs", max_num_batched_tokens=4096,
                       trust_remote_code=cfg.model.trust_remote_code)
        super().__init__(ColocatedVLLMPolicy(self.llm, loaded.tokenizer, rollout_sampling(cfg)))
        self.synced_once = False

    def sync_weights(self, model, step: int) -> None:
        if step == 1 and not self.synced_once:
            return
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        for name, param in model.named_parameters():
            runner.load_weights([(name, param.data)])
        self.llm.reset_prefix_cache()
        self.synced_once = True


def rollout_sampler(cfg: WarmupConfig, loaded) -> RolloutSampler:
    """The sampler of ``cfg.generation.backend`` (after
    :func:`unified.warmup.agentic_checks.refuse_agentic_problems`)."""
    backend = cfg.generation.backend
    if backend == "vllm_server":
        return ServerSampler(cfg, loaded)
    if backend == "vllm_colocate":
        return ColocateSampler(cfg, loaded)
    return RolloutSampler(HFPolicy(cfg.model.name_or_path, rollout_sampling(cfg), loaded=loaded,
                                   max_batch_size=cfg.agentic.max_in_flight, prefix_cache_mb=0))


__all__ = ["ColocateSampler", "ColocatedVLLMPolicy", "RolloutSampler", "ServedVLLMPolicy", "ServerSampler",
           "rollout_sampler", "rollout_sampling"]
