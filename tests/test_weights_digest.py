"""The same weights under two names are recognised: the tensor digest ignores shard layout and the
other files, changes with any tensor, and ``--compare`` of two eval runs of the same tensors says
IDENTICAL WEIGHTS (the warmup's guard keeping the start makes exactly such a pair)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from unified.benchmarks import AgentLimits
from unified.eval.cli import main
from unified.eval.config import EvalConfig
from unified.eval.identity import eval_identity
from unified.eval.runner import run_eval
from unified.inference.base import SamplingConfig
from unified.models.tiny import save_tiny_checkpoint, tiny_moe_model
from unified.models.weights_digest import WeightsDigestError, compute_weights_digest, weights_digest

FIXTURE = "fixture_eval_bench:FixtureAdapter"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "start")


def _resave(model_dir, out, *, shard_size="200KB", change=None):
    """``model_dir``'s tensors saved again through transformers (another shard layout); ``change``
    edits the state dict first."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if change:
        with torch.no_grad():
            change(model)
    model.save_pretrained(out, max_shard_size=shard_size)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, out / name)
    return out


def test_the_digest_ignores_shards_and_other_files_and_sees_every_tensor(tiny, tmp_path):
    start = compute_weights_digest(tiny)
    resharded = _resave(tiny, tmp_path / "resharded")
    assert len(list(resharded.glob("*.safetensors"))) > 1 == len(list(tiny.glob("*.safetensors")))
    assert compute_weights_digest(resharded) == start
    config = json.loads((resharded / "config.json").read_text())
    (resharded / "config.json").write_text(json.dumps({**config, "note": "a model card edit"}))
    (resharded / "README.md").write_text("another card")
    assert compute_weights_digest(resharded) == start

    def nudge(model):
        next(model.parameters()).view(-1)[0] += 1e-3
    assert compute_weights_digest(_resave(tiny, tmp_path / "nudged", change=nudge)) != start
    other = tiny_moe_model("qwen3_moe", seed=1, vocab_size=json.loads((tiny / "config.json").read_text())["vocab_size"])
    other.save_pretrained(tmp_path / "seed1")
    assert compute_weights_digest(tmp_path / "seed1") != start


def test_pickled_weights_have_no_digest_and_a_broken_file_is_named(tmp_path):
    (tmp_path / "pickled").mkdir()
    torch.save({"w": torch.zeros(2)}, tmp_path / "pickled" / "pytorch_model.bin")
    assert compute_weights_digest(tmp_path / "pickled") is None
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(WeightsDigestError, match="broken/model.safetensors"):
        compute_weights_digest(tmp_path / "broken")
    # the eval's identity records "unknown" for it (loading reports the file) instead of failing
    (tmp_path / "broken" / "config.json").write_text("{}")
    assert eval_identity(EvalConfig(model=str(tmp_path / "broken")), [])["fields"]["model.weights"] is None


def test_the_digest_is_cached_until_a_file_changes(tiny, tmp_path, monkeypatch):
    copy = shutil.copytree(tiny, tmp_path / "copy")
    cache = tmp_path / "digests.json"
    first = weights_digest(copy, cache)
    import unified.models.weights_digest as module

    def no_read(path):
        raise AssertionError("the cached digest was recomputed")
    monkeypatch.setattr(module, "compute_weights_digest", no_read)
    assert weights_digest(copy, cache) == first  # no read: cached
    monkeypatch.undo()
    shard = next(copy.glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the last tensor
    shard.write_bytes(bytes(data))
    assert weights_digest(copy, cache) != first
    assert len(json.loads(cache.read_text())) == 1  # the stale entry of that path is replaced


def test_compare_of_two_runs_of_the_same_tensors_says_identical_weights(tiny, tmp_path, capsys, monkeypatch):
    resharded = _resave(tiny, tmp_path / "final")  # what a warmup whose guard kept the start writes
    different = _resave(tiny, tmp_path / "trained", change=lambda m: next(m.parameters()).mul_(1.01))
    for name, model in (("a", tiny), ("b", resharded), ("c", different)):
        run_eval(EvalConfig(benchmarks=[FIXTURE], model=str(model), out=str(tmp_path / name),
                            benchmark_config={FIXTURE: {"n": 1}}, backend="hf",
                            sampling=SamplingConfig(max_new_tokens=4), limits=AgentLimits(max_turns=1)))
        fields = json.loads((tmp_path / name / "identity.json").read_text())["fields"]
        assert fields["model.weights"] == compute_weights_digest(model)
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    same = capsys.readouterr().out
    assert same.startswith(f"IDENTICAL WEIGHTS: A and B evaluated the same tensors (weights digest "
                           f"{compute_weights_digest(tiny)})")
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "c")]) == 0
    assert "IDENTICAL" not in capsys.readouterr().out
    run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path / "gold"),
                        benchmark_config={FIXTURE: {"n": 1}}))
    assert main(["--compare", str(tmp_path / "gold"), str(tmp_path / "a")]) == 0
    assert "- weights digest not recorded for A" in capsys.readouterr().out
    import unified.plot as plot

    titles: list[str] = []
    monkeypatch.setattr(plot, "_save_png", lambda plt, fig, out, name: titles.append(fig.axes[0].get_title()))
    plot.plot_compare(tmp_path / "a", tmp_path / "b")
    plot.plot_compare(tmp_path / "a", tmp_path / "c")
    assert "IDENTICAL WEIGHTS" in titles[0] and "IDENTICAL" not in titles[1]
