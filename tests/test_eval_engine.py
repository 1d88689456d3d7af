"""The eval's engine choice for a local checkpoint (``--backend auto``, :mod:`unified.eval.engine`).

The rest of the suite pins the in-process engine (``UNIFIED_EVAL_BACKEND=hf`` in conftest.py); these
tests lift the pin. The vLLM interpreter is ``$UNIFIED_VLLM_PYTHON``: a path that does not exist (no
vLLM), or a real script that exits 1 (a vLLM "installed" whose server cannot start, as on a CPU
without AVX-512). No vLLM server starts here (tests/test_vllm_serving.py runs the real one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unified.config import ConfigError
from unified.eval.cli import main
from unified.eval.config import EvalConfig
from unified.eval.engine import ENV_VAR, choose_backend
from unified.eval.identity import IDENTITY_FILE, IdentityMismatch
from unified.eval.runner import run_eval
from unified.inference.spec import parse_spec

FIXTURE = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter contract's format (tests/)


@pytest.fixture
def auto(monkeypatch):
    """The eval's own choice (the suite's ``hf`` pin lifted)."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    return monkeypatch


@pytest.fixture
def failing_vllm(tmp_path, auto) -> Path:
    """A vLLM interpreter that exists and exits 1 at once."""
    script = tmp_path / "vllm-python"
    script.write_text("#!/bin/sh\necho 'fixture: this vLLM cannot start' >&2\nexit 1\n")
    script.chmod(0o755)
    auto.setenv("UNIFIED_VLLM_PYTHON", str(script))
    return script


def test_auto_picks_vllm_only_on_a_cpu_machine_where_its_interpreter_is_found(tmp_path, auto):
    auto.setenv("UNIFIED_VLLM_PYTHON", str(tmp_path / "missing" / "python"))
    none = choose_backend("embedded", "auto", cuda=False)
    assert (none.backend, none.auto) == ("hf", True)
    assert "no vLLM here" in none.line and "missing/python" in none.line
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    auto.setenv("UNIFIED_VLLM_PYTHON", str(script))
    found = choose_backend("embedded", None, cuda=False)
    assert (found.backend, found.auto) == ("vllm", True)
    assert str(script) in found.line and "--backend hf" in found.line
    gpu = choose_backend("embedded", "auto", cuda=True)
    assert gpu.backend == "hf" and "CUDA" in gpu.line and "--backend vllm" in gpu.line
    # a resume of an in-process run keeps its engine instead of being refused as a change
    assert choose_backend("embedded", "auto", cuda=False, recorded="hf").backend == "hf"
    assert choose_backend("embedded", "auto", cuda=False, recorded="vllm").backend == "vllm"


def test_explicit_backends_and_specs_that_name_their_engine_are_not_chosen_for(tmp_path, auto):
    auto.setenv("UNIFIED_VLLM_PYTHON", str(tmp_path / "missing"))
    assert choose_backend("embedded", "vllm", cuda=False).backend == "vllm"  # no vLLM: the run fails loudly later
    assert choose_backend("embedded", "hf", cuda=False).line == ""
    for spec in ("vllm:embedded", "openai:http://127.0.0.1:1/v1#m", "gold"):
        choice = choose_backend(spec, "auto", cuda=False)
        assert (choice.backend, choice.auto, choice.line) == (None, False, ""), spec
    with pytest.raises(ValueError, match="'gold' replays ground truth"):
        choose_backend("gold", "hf")


def test_the_environment_variable_replaces_the_auto_choice_and_is_checked(tmp_path, auto):
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    auto.setenv("UNIFIED_VLLM_PYTHON", str(script))
    auto.setenv(ENV_VAR, "hf")
    pinned = choose_backend("embedded", "auto", cuda=False)
    assert (pinned.backend, pinned.auto) == ("hf", False) and f"{ENV_VAR}=hf" in pinned.line
    assert choose_backend("embedded", "vllm", cuda=False).backend == "vllm"  # --backend wins
    auto.setenv(ENV_VAR, "auto")
    assert choose_backend("embedded", None, cuda=False).backend == "vllm"
    auto.setenv(ENV_VAR, "vlm")
    with pytest.raises(ConfigError, match=f"{ENV_VAR}=vlm: expected one of auto, hf, vllm"):
        choose_backend("embedded", None, cuda=False)


def test_strict_config_loading_takes_auto_and_rejects_other_words():
    from unified.config import from_dict

    assert EvalConfig().backend == "auto"
    assert from_dict(EvalConfig, {"backend": "auto"}).backend == "auto"
    assert from_dict(EvalConfig, {"backend": None}).backend is None  # older run.json files
    with pytest.raises(ConfigError, match="backend"):
        from_dict(EvalConfig, {"backend": "vlm"})


def _cfg(out: Path, **extra) -> EvalConfig:
    return EvalConfig(benchmarks=[FIXTURE], model="embedded", out=str(out), limit=1,
                      benchmark_config={FIXTURE: {"n": 1}}, **extra)


@pytest.mark.slow  # loads the embedded model in-process and runs one episode
def test_auto_falls_back_in_process_when_the_vllm_server_does_not_start(embedded_cache, failing_vllm, tmp_path,
                                                                         capfd):
    from unified.benchmarks.contract import AgentLimits
    from unified.inference.base import SamplingConfig

    out = tmp_path / "run"
    cfg = _cfg(out, sampling=SamplingConfig(max_new_tokens=8), limits=AgentLimits(max_turns=1))
    run_eval(cfg)
    err = capfd.readouterr().err
    assert "engine: vLLM server for embedded" in err
    assert "engine: the vLLM server for embedded did not start (vLLM server exited with 1 during start-up" in err
    assert "running in-process (hf) instead" in err
    results = [json.loads(line) for line in (out / "fixture_echo" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 1 and results[0]["error"] is None  # the in-process engine ran the episode
    # the run directory records the engine that ran, not the one first chosen
    assert json.loads((out / IDENTITY_FILE).read_text())["fields"]["backend"] == "hf"
    assert json.loads((out / "run.json").read_text())["config"]["backend"] == "hf"
    # the same command resumes on the engine of its results (nothing left to run); another engine is refused
    run_eval(cfg)
    assert "episodes to run" not in capfd.readouterr().err
    with pytest.raises(IdentityMismatch, match="backend hf -> vllm"):
        run_eval(_cfg(out, backend="vllm"))


def test_an_explicit_vllm_backend_fails_loudly_when_its_server_does_not_start(embedded_cache, failing_vllm,
                                                                             tmp_path):
    with pytest.raises(RuntimeError, match="vLLM server exited with 1 during start-up"):
        run_eval(_cfg(tmp_path / "run", backend="vllm"))
    with pytest.raises(RuntimeError, match="vLLM server exited with 1 during start-up"):
        run_eval(EvalConfig(benchmarks=[FIXTURE], model="vllm:embedded", out=str(tmp_path / "run2"), limit=1))


def test_dry_run_says_which_engine_and_why(failing_vllm, tmp_path, capsys):
    assert main(["--benchmarks", FIXTURE, "--model", "embedded", "--out", str(tmp_path / "run"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# engine: vLLM server for embedded" in out and "--backend hf runs it in-process" in out
    assert main(["--benchmarks", FIXTURE, "--model", "embedded", "--backend", "hf", "--out", str(tmp_path / "run"),
                 "--dry-run"]) == 0
    assert "# engine:" not in capsys.readouterr().out


def test_judges_naming_the_policy_checkpoint_follow_it_to_vllm(embedded_cache, failing_vllm):
    """While the eval serves ``embedded`` with vLLM, a judge/user spec ``embedded`` resolves to that vLLM
    server (here: the one that cannot start, a real process), not to an in-process copy."""
    from unified.inference.endpoints import resolve_endpoint
    from unified.inference.routes import routed, serve_with_vllm, stop_serving_with_vllm

    assert routed(parse_spec("embedded")).backend == "hf"
    serve_with_vllm("embedded")
    try:
        assert routed(parse_spec("embedded")).backend == "vllm"
        assert routed(parse_spec("embedded", backend="hf")).text == "embedded"
        assert routed(parse_spec("openai:http://127.0.0.1:1/v1#m")).backend == "openai"
        with pytest.raises(RuntimeError, match="vLLM server exited with 1 during start-up"):
            resolve_endpoint("embedded")
    finally:
        stop_serving_with_vllm("embedded")
    assert routed(parse_spec("embedded")).backend == "hf"
