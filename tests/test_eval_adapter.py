"""The adapter contract: discovery by entry point, suites, skips for missing modules."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from unified.agent.prompting import PROMPTING, PromptingModule, make_prompting
from unified.config import ConfigError
from unified.benchmarks.contract import Adapter, BenchmarkUnavailable, Environment, NoConfig
from unified.benchmarks.discovery import (adapter_class, check_benchmark_config, declared_suites, expand_benchmarks,
                                          load_adapter, registered_benchmarks)
from unified.lwm.records import DOMAINS
from unified.registry import UnknownNameError
from unified.types import Message, Observation, ToolCall

ROOT = Path(__file__).resolve().parents[1]


def test_suites_are_what_the_adapters_declare_in_the_study_order():
    suites, broken = declared_suites()
    assert not broken
    assert suites["ood"][:3] == ["claw_eval", "qwenclawbench", "bfcl_v4"]
    assert suites["in_domain"][:4] == ["terminal_bench_2", "swe_bench_verified", "swe_bench_pro", "widesearch"]
    assert suites["all"] == suites["in_domain"] + suites["ood"]
    assert set(suites["all"]) <= set(registered_benchmarks())


def test_every_builtin_adapter_declares_suites_domain_config_and_paper_numbers():
    for name in registered_benchmarks():
        cls = adapter_class(name)
        assert issubclass(cls, Adapter) and cls.suites, name
        assert cls.world_model_domain in DOMAINS, name
        assert dataclasses.is_dataclass(cls.Config) and cls.Config is not NoConfig, name
        assert cls.paper_reference is not None and cls.paper_reference.sft < cls.paper_reference.lwm_rl, name
        for f in dataclasses.fields(cls.Config):  # every setting is documented in the class source
            assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, (name, f.name)
    assert {adapter_class(n).world_model_domain for n in ("terminal_bench_2", "swe_bench_verified", "widesearch",
                                                          "bfcl_v4")} == {"terminal", "swe", "search", "mcp"}


def test_adapter_settings_are_typed_and_strict():
    adapter = load_adapter("terminal_bench_2", tasks="a, b", network_off=["c"], exec_timeout_s="30")
    assert adapter.settings.tasks == ["a", "b"] and adapter.settings.network_off == ["c"]
    assert adapter.settings.exec_timeout_s == 30.0 and adapter.config["network"] == "task"
    with pytest.raises(UnknownNameError, match="Did you mean 'off'"):
        load_adapter("terminal_bench_2", network="of")
    with pytest.raises(UnknownNameError, match="Did you mean 'categories'"):
        load_adapter("bfcl_v4", categroies="multi_turn")
    with pytest.raises(ConfigError, match="expected true/false"):
        load_adapter("swe_bench_verified", network="maybe")
    with pytest.raises(ConfigError, match=">= 1"):
        load_adapter("claw_eval", memory_mb=0)
    with pytest.raises(UnknownNameError, match="Did you mean 'bfcl_v4'"):
        check_benchmark_config({"bfcl_v5": {"categories": "all"}})
    check_benchmark_config({"bfcl_v4": {"categories": "all", "limit_order": "per_category"}})

    class Plain(Adapter):
        name = "plain"

    with pytest.raises(UnknownNameError, match="unknown key 'anything'"):
        Plain(anything=1)


def test_a_mistyped_benchmark_setting_is_a_usage_error_through_the_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "unified.eval", "--benchmarks", "bfcl_v4", "--model", "gold",
                           "--out", str(tmp_path / "run"), "--set", "benchmarks.bfcl_v4.categroies=x"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "did you mean 'categories'" in proc.stderr.lower(), proc.stderr
    assert not (tmp_path / "run" / "bfcl_v4").exists()  # nothing ran


def test_recipes_still_load():
    for recipe in sorted((ROOT / "recipes" / "eval").glob("*.yaml")):
        proc = subprocess.run([sys.executable, "-m", "unified.eval", "--recipe", str(recipe), "--dry-run"],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 0 and "# would evaluate:" in proc.stdout, (recipe, proc.stderr)


def test_unknown_benchmark_says_did_you_mean():
    with pytest.raises(UnknownNameError) as info:
        load_adapter("bfcl4")
    assert "bfcl_v4" in str(info.value) and "Did you mean" in str(info.value)


def test_missing_module_is_not_yet_available(monkeypatch):
    import importlib.metadata as md

    fake = md.EntryPoint(name="zz_bench", value="evaluators.zz_not_written:Adapter", group="unified.benchmarks")
    monkeypatch.setattr("unified.benchmarks.discovery.registered_benchmarks", lambda: {"zz_bench": fake})
    with pytest.raises(BenchmarkUnavailable) as info:
        load_adapter("zz_bench")
    assert info.value.reason == "not yet available"
    assert info.value.line("zz_bench").startswith("zz_bench: skipped: not yet available")


def test_expand_benchmarks():
    assert expand_benchmarks("ood", ["bfcl_v4,widesearch"]) == ["claw_eval", "qwenclawbench", "bfcl_v4", "widesearch"]
    with pytest.raises(UnknownNameError, match="Did you mean 'ood'.*Valid suites: all, in_domain, ood"):
        expand_benchmarks("oood")


def test_environment_always_stops():
    events = []

    class Broken(Environment):
        def start(self):
            events.append("start")
            raise RuntimeError("service did not come up")

        def stop(self):
            events.append("stop")

    with pytest.raises(RuntimeError):
        with Broken():
            pass
    assert events == ["start", "stop"]

    class Fine(Broken):
        def start(self):
            events.append("start")

    events.clear()
    with pytest.raises(ValueError):
        with Fine():
            raise ValueError("episode crashed")
    assert events == ["start", "stop"]


def test_act_is_identity_and_registry_lists_names():
    act = make_prompting("act")
    messages = [Message(role="user", content="hi")]
    assert act.system_prompt("base") == "base"
    assert act.before_policy(messages) is messages
    assert act.parse("<think>x</think>answer") == ("<think>x</think>answer", {})
    assert isinstance(act, PromptingModule) and "act" in PROMPTING
    assert act.after_observations(None, [Observation(call_id="0", content="")]) is None  # type: ignore[arg-type]
    with pytest.raises(UnknownNameError):
        make_prompting("predict_then_actt")
    assert ToolCall(name="f").arguments == {}


def test_no_core_module_names_a_benchmark():
    """Code and data in unified/ never key on a benchmark's name (docstrings may use them as examples):
    suites, paper numbers and world-model domains come from the adapters. Two modules use bfcl-eval
    on purpose: harvest_mcp runs its executable backends as an environment source, bench_batching
    measures throughput on real BFCL episodes."""
    import ast
    import re

    names = re.compile("|".join([*registered_benchmarks(), "bfcl", "claw", "terminal_bench", "swe_bench"]), re.I)
    allowed = {"unified/lwm/harvest_mcp.py", "unified/eval/bench_batching.py"}
    found = []
    for path in sorted((ROOT / "unified").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(getattr(node, "body", None), list) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        docstrings |= {id(node.value) for node in ast.walk(tree)  # attribute docstrings after an assignment
                       if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            text = (node.value if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings else getattr(node, "id", None) or getattr(node, "attr", None))
            if isinstance(text, str) and names.search(text):
                found.append(f"{rel}:{node.lineno}: {text[:80]!r}")
    assert not found, "\n".join(found)


def test_an_adapter_that_does_not_load_is_named_when_suites_are_expanded(monkeypatch, capsys):
    import importlib.metadata as md

    from unified.eval.config import EvalConfig
    from unified.eval.runner import benchmarks_to_run

    real = registered_benchmarks()
    fake = md.EntryPoint(name="zz_bench", value="evaluators.zz_not_written:Adapter", group="unified.benchmarks")
    monkeypatch.setattr("unified.benchmarks.discovery.registered_benchmarks", lambda: {**real, "zz_bench": fake})
    suites, broken = declared_suites()
    assert "not yet available" in broken["zz_bench"] and "zz_bench" not in suites["all"]
    names, general = benchmarks_to_run(EvalConfig(suite="ood,general"))
    assert names == ["claw_eval", "qwenclawbench", "bfcl_v4"] and general
    assert "zz_bench: not in any suite here: its adapter does not load" in capsys.readouterr().err
    with pytest.raises(UnknownNameError, match="Did you mean 'general'.*Valid suites: all, general, in_domain, ood\."):
        benchmarks_to_run(EvalConfig(suite="generl"))


def test_an_adapter_importing_a_missing_module_of_the_library_says_so(monkeypatch, tmp_path):
    import importlib.metadata as md

    (tmp_path / "zz_outside_bench.py").write_text("import unified.zz_moved_away\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = md.EntryPoint(name="zz_bench", value="zz_outside_bench:Adapter", group="unified.benchmarks")
    monkeypatch.setattr("unified.benchmarks.discovery.registered_benchmarks", lambda: {"zz_bench": fake})
    with pytest.raises(BenchmarkUnavailable) as info:
        adapter_class("zz_bench")
    assert "imports 'unified.zz_moved_away'" in info.value.reason and "pip install" not in info.value.how_to_fix


@pytest.mark.parametrize("body, expected", [
    ("from unified.benchmarks import NoSuchName\n", "imports 'NoSuchName' from unified.benchmarks, which adapter SDK"),
    ("raise ImportError('libfoo.so: cannot open shared object file')\n", "failed to import: libfoo.so"),
    ("raise RuntimeError('needs FOO_HOME')\n", "raised RuntimeError on import: needs FOO_HOME"),
])
def test_an_outside_adapter_that_fails_to_import_is_a_recorded_skip_naming_why(monkeypatch, tmp_path, body, expected):
    """ImportError that is not ModuleNotFoundError (and any error at import) is a skip, not a crash of the run."""
    import importlib.metadata as md

    from unified.eval.config import EvalConfig
    from unified.eval.runner import run_eval

    module = f"zz_broken_{abs(hash(body)) % 10**6}"
    (tmp_path / f"{module}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = md.EntryPoint(name="zz_bench", value=f"{module}:Adapter", group="unified.benchmarks")
    monkeypatch.setattr("unified.benchmarks.discovery.registered_benchmarks", lambda: {"zz_bench": fake})
    with pytest.raises(BenchmarkUnavailable) as info:
        adapter_class("zz_bench")
    assert expected in info.value.reason
    summary = run_eval(EvalConfig(benchmarks=["zz_bench"], model="gold", out=str(tmp_path / "run")))
    assert summary.benchmarks["zz_bench"].status == "skipped"
    assert expected in summary.benchmarks["zz_bench"].reason
