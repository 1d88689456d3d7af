"""Shared fixtures. Tests run on CPU; ``@pytest.mark.gpu`` tests skip without CUDA."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

collect_ignore_glob = ["fixtures/*"]
"""The benchmarks' own tests inside task fixtures (a SWE-bench repository's, a Terminal-Bench task's
``test_outputs.py``) are what the verifiers run inside their sandboxes, not tests of this suite."""

# Offline by construction: nothing in the suite may reach a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The eval's engine for a local checkpoint: in-process. Left on `auto`, every `--model embedded` eval of the
# suite would start a vLLM server wherever `make vllm` was run (CI runs it), ~90 s each
# (unified.eval.engine). The auto choice itself is tested in tests/test_eval_engine.py.
os.environ["UNIFIED_EVAL_BACKEND"] = "hf"


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `make test-gpu` on a GPU node)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def embedded_cache(tmp_path_factory) -> Path:
    """A session-private UNIFIED_CACHE_DIR (the embedded checkpoint is built once into it).

    ``UNIFIED_TEST_CACHE_DIR`` reuses a persistent cache across runs (handy locally).
    """
    path = Path(os.environ.get("UNIFIED_TEST_CACHE_DIR") or tmp_path_factory.mktemp("unified-cache"))
    old = os.environ.get("UNIFIED_CACHE_DIR")
    os.environ["UNIFIED_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("UNIFIED_CACHE_DIR", None)
    else:
        os.environ["UNIFIED_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def embedded_dir(embedded_cache) -> Path:
    from unified.models.embedded import ensure_embedded_checkpoint

    return ensure_embedded_checkpoint()


@pytest.fixture(scope="session")
def dense_reference(embedded_cache):
    from unified.models.embedded import load_dense_reference

    return load_dense_reference()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from unified.models.tiny import train_tiny_tokenizer

    return train_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from unified.models.tiny import save_tiny_checkpoint

    return save_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "qwen3_moe", "qwen3_moe")


@pytest.fixture(scope="session")
def tiny_judge_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny checkpoint with a context window of 4096 positions (its own is 1024): a rubric judge's prompt
    (about 1,500 tokens) must fit the judge's window, or the local server answers 400 as vLLM does."""
    import json
    import shutil

    path = tmp_path_factory.mktemp("tiny_judge") / "qwen3_moe"
    shutil.copytree(tiny_checkpoint, path)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="session")
def _slurm_session():
    """Stops the shared one-node Slurm (tests/_slurm_cluster.py) at the end of the session, if a test started it."""
    from _slurm_cluster import stop_shared_cluster

    yield
    stop_shared_cluster()


@pytest.fixture
def slurm_cluster(_slurm_session, tmp_path_factory):
    """The session's one-node Slurm in the default layout (started on first use; skips where Slurm is missing).
    Each test's jobs must end in the test; whatever is left is cancelled after it, so the next test starts on an
    empty cluster."""
    from _slurm_cluster import require_slurm, shared_cluster

    require_slurm()
    cluster = shared_cluster(lambda: tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.cancel_all()


@pytest.fixture(autouse=True)
def _fresh_shared_models():
    """Each test starts and ends without models or loopback servers shared from an earlier test
    (the process registry of unified.inference.shared keeps one copy per checkpoint for the process)."""
    yield
    import sys

    if "unified.inference.shared" in sys.modules:
        from unified.inference import endpoints, shared

        endpoints.stop_local_servers()
        shared.clear()
