"""The locked GPU stack (requirements/gpu-lock.txt) resolves for CUDA Linux, checked from this CPU machine.

`scripts/gpu_lock.py check` runs uv's resolver against the package index (no wheel downloaded, no sdist
built). Without uv or the index these tests skip locally and fail in CI (CI installs the dev extra, uv
included, and reaches PyPI).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_lock", ROOT / "scripts/gpu_lock.py")
gpu_lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_lock)

LOCK = ROOT / "requirements/gpu-lock.txt"
PINS = ROOT / "requirements/gpu.in"


def _check(lock: Path, pins: Path = PINS) -> tuple[int, str]:
    if gpu_lock.uv_command() is None:
        if os.environ.get("CI"):
            pytest.fail("uv is not installed in CI (the dev extra pins uv)")
        pytest.skip("uv is not installed (pip install uv==0.13.9)")
    status, report = gpu_lock.check(ROOT, lock, pins)
    if status == 3:
        if os.environ.get("CI"):
            pytest.fail(f"CI cannot check the GPU lock: {report}")
        pytest.skip(f"package index unreachable: {report.splitlines()[0]}")
    return status, report


def _edited(tmp_path: Path, source: Path, old: str, new: str | None) -> Path:
    text = source.read_text()
    assert re.search(rf"^{re.escape(old)}$", text, re.M), f"{old} not in {source}"
    lines = [line for line in text.splitlines() if line != old or new is not None]
    out = tmp_path / source.name
    out.write_text("\n".join(new if line == old else line for line in lines) + "\n")
    return out


def test_gpu_lock_pins_what_trl_and_vllm_accept():
    """No index needed: the lock pins the named stack, with a vLLM inside TRL 1.16's range."""
    locked = gpu_lock.read_pins(LOCK)
    for name in ("torch", "transformers", "trl", "vllm", "flash-attn", "flash-linear-attention", "causal-conv1d",
                 "deepspeed"):
        assert name in locked, name
    wanted = gpu_lock.read_pins(PINS)
    assert all(locked[n] == v for n, v in wanted.items())
    vllm = tuple(int(x) for x in locked["vllm"].split(".")[:3])
    assert (0, 28, 0) <= vllm <= (0, 31, 0)  # TRL 1.16: 0.22-0.31; its weight-sync calls from 0.28
    cpu = gpu_lock.read_pins(ROOT / "requirements/cpu-constraints.txt")
    for name in ("torch", "transformers", "trl", "tokenizers", "accelerate"):
        assert locked[name] == cpu[name], f"{name}: GPU {locked[name]} vs CPU {cpu[name]}"
    assert gpu_lock.sdist_metadata_versions(ROOT / "requirements/gpu-sdist-metadata.toml") == {
        n: locked[n] for n in ("flash-attn", "causal-conv1d", "deepspeed")}


def test_read_pins_names_file_and_line_of_a_bad_line(tmp_path):
    bad = tmp_path / "lock.txt"
    bad.write_text("torch==2.13.0\nvllm>=0.30\n")
    with pytest.raises(ValueError, match=r"lock.txt:2: expected name==version"):
        gpu_lock.read_pins(bad)


def test_gpu_lock_resolves():
    status, report = _check(LOCK)
    assert status == 0, report
    assert "vllm 0.30.0" in report and "torch 2.13.0" in report


def test_gpu_lock_check_fails_when_the_lock_no_longer_resolves(tmp_path):
    # torch 2.14.0 needs another triton than the lock's (and vllm 0.30.0 pins torch 2.13.0): no solution
    lock = _edited(tmp_path, LOCK, "torch==2.13.0", "torch==2.14.0")
    pins = _edited(tmp_path, PINS, "torch==2.13.0", "torch==2.14.0")
    status, report = _check(lock, pins)
    assert status == 1
    assert "no longer resolves" in report and "torch==2.14.0" in report and "unsatisfiable" in report


def test_gpu_lock_check_names_a_package_the_lock_lacks(tmp_path):
    lock = _edited(tmp_path, LOCK, next(line for line in LOCK.read_text().splitlines()
                                        if line.startswith("einops==")), None)
    status, report = _check(lock)
    assert status == 1
    assert "needed, not in the lock: einops==" in report


def test_gpu_lock_check_rejects_pins_that_disagree(tmp_path):
    pins = _edited(tmp_path, PINS, "vllm==0.30.0", "vllm==0.31.0")
    status, report = gpu_lock.check(ROOT, LOCK, pins)  # before any resolve: bad input
    assert status == 2 and "vllm==0.31.0, lock: 0.30.0" in report


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a CUDA machine with the locked stack")
@pytest.mark.gpu
def test_installed_gpu_stack_is_the_lock():
    from importlib.metadata import PackageNotFoundError, version

    locked = gpu_lock.read_pins(LOCK)
    wrong = {}
    for name in ("torch", "transformers", "trl", "vllm", "flash-attn", "flash-linear-attention", "causal-conv1d",
                 "deepspeed"):
        try:
            have = version(name).split("+")[0]
        except PackageNotFoundError:
            have = "not installed"
        if have != locked[name]:
            wrong[name] = (have, locked[name])
    assert not wrong, f"installed vs locked: {wrong}"


def test_must_compile_names_what_has_no_wheel_on_el8():
    """glibc 2.28 (EL8): the two CUDA extensions, DeepSpeed's sdist, and llguidance (manylinux_2_31 only)."""
    if gpu_lock.uv_command() is None:
        pytest.skip("uv is not installed (pip install uv==0.13.9)")
    status, names, report = gpu_lock.must_compile(ROOT, LOCK, PINS, "2.28")
    if status == 3:
        if os.environ.get("CI"):
            pytest.fail(f"CI cannot check the GPU lock: {report}")
        pytest.skip(f"package index unreachable: {report.splitlines()[0]}")
    assert status == 0, report
    assert set(names) == {"flash-attn", "causal-conv1d", "deepspeed", "llguidance"}, report
    assert "llguidance==1.7.6 (Rust: cargo" in report and "x86_64-manylinux_2_28" in report
