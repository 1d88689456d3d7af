"""The benchmark packages install beside numpy 2 (see requirements/bench.txt)."""

import subprocess
import sys

import pytest


def test_numpy_2_with_datasets_and_pyarrow():
    import datasets
    import numpy
    import pyarrow

    assert int(numpy.__version__.split(".")[0]) >= 2
    table = datasets.Dataset.from_dict({"x": [1, 2, 3]}).with_format("numpy")
    assert numpy.asarray(table[:]["x"]).sum() == 6 and pyarrow.__version__


@pytest.mark.parametrize("module", [
    "bfcl_eval.constants.eval_config",
    "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker",
    "bfcl_eval.eval_checker.ast_eval.ast_checker",
    "bfcl_eval.eval_checker.agentic_eval.agentic_checker",
    "bfcl_eval.eval_checker.eval_runner",
])
def test_bfcl_eval_imports_on_numpy_2(module, tmp_path):
    pytest.importorskip("bfcl_eval", reason="benchmark packages not installed (make setup BENCH=0)")
    # a subprocess: bfcl-eval keeps state in module globals and reads BFCL_PROJECT_ROOT at import
    code = f"import importlib, numpy; importlib.import_module({module!r}); print(numpy.__version__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={"BFCL_PROJECT_ROOT": str(tmp_path), "HF_HUB_OFFLINE": "1",
                                 "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("2.")
