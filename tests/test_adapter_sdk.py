"""The adapter SDK as a versioned API (issue 35): ``unified.benchmarks.__all__`` and its version, SDK
0.1's names kept as shims with one visible deprecation line each, adapter failures that name the
missing import or the wrong tool, and tools declared from a function signature."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import tomllib
import warnings
from pathlib import Path
from typing import Annotated, Literal, Optional

import pytest

import unified
import unified.benchmarks as sdk
from fixture_eval_bench import EchoModel, FixtureAdapter, FixtureEnv
from unified.agent.loop import AgentLoop, Job
from unified.benchmarks import compat
from unified.benchmarks.failures import import_failure
from unified.types import ToolSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_notes(monkeypatch):
    """Each deprecation note is given once per process: start this test with none given."""
    monkeypatch.setattr(compat, "_warned", set())


def test_the_sdk_version_is_the_package_versions_major_minor():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert unified.__version__ == version
    assert sdk.SDK_VERSION == ".".join(version.split(".")[:2])
    assert all(hasattr(sdk, name) for name in sdk.__all__) and len(set(sdk.__all__)) == len(sdk.__all__)
    assert compat.SHIMS_REMOVED_IN == f"0.{int(sdk.SDK_VERSION.split('.')[1]) + 1}"  # one minor version


def test_sdk_0_1_modules_are_the_same_objects_under_their_old_paths():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import unified.contracts as old_contracts
        import unified.eval.adapter as old_adapter
        import unified.eval.aggregate as old_aggregate
    for module in (old_contracts, old_adapter, old_aggregate):
        for name in module.__all__:
            new = getattr(sdk, name, None) or getattr(unified.types, name, None) \
                or getattr(sdk.discovery, name)
            assert getattr(module, name) is new, (module.__name__, name)
    assert set(compat.MOVED_MODULES) == {"unified.contracts", "unified.eval.aggregate", "unified.eval.adapter"}


@pytest.mark.parametrize("flags, shown_as", [((), "SDKDeprecationWarning: "), (("-W", "ignore"), "deprecated: ")])
def test_importing_an_old_module_says_once_what_to_change_even_when_warnings_are_filtered(tmp_path, flags, shown_as):
    script = tmp_path / "old_adapter.py"
    script.write_text("import unified.contracts\nfrom unified.contracts import Adapter\nimport unified.eval.aggregate\n")
    proc = subprocess.run([sys.executable, *flags, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    note = ("unified.contracts moved to unified.benchmarks in adapter SDK 0.2; the shim is removed in SDK 0.3: "
            "change `from unified.contracts import ...` to `from unified.benchmarks import ...` (the names are the same)")
    assert proc.stderr.count(note) == 1, proc.stderr
    assert f"{script}:1: " in proc.stderr and shown_as in proc.stderr  # the adapter's own line
    assert proc.stderr.count("unified.eval.aggregate moved to unified.benchmarks") == 1


def test_agent_limits_build_replace_and_read_with_their_sdk_0_1_names(fresh_notes):
    with pytest.warns(sdk.SDKDeprecationWarning, match=r"AgentLimits.max_(steps_per_user_turn|completion_tokens) is "
                                                       r"now AgentLimits.max_(steps_per_turn|episode_tokens)") as caught:
        limits = sdk.AgentLimits(max_steps_per_user_turn=3, max_completion_tokens=99)
        replaced = dataclasses.replace(limits, max_turns=6, max_steps_per_user_turn=4)
        assert limits.max_steps_per_user_turn == 3
    assert (limits.max_steps_per_turn, limits.max_episode_tokens) == (3, 99)
    assert (replaced.max_turns, replaced.max_steps_per_turn, replaced.max_episode_tokens) == (6, 4, 99)
    assert len(caught) == 2  # one per old name, not one per use
    assert caught[0].filename == __file__  # points at the adapter's line, not at the SDK
    with pytest.raises(TypeError, match="both 'max_steps_per_user_turn' .* keep 'max_steps_per_turn'"):
        sdk.AgentLimits(max_steps_per_user_turn=3, max_steps_per_turn=4)
    with pytest.raises(TypeError, match=r"AgentLimits has no field 'max_user_turns' \(its fields: max_turns, "
                                        r"max_steps_per_turn, max_episode_tokens, max_seconds\)"):
        sdk.AgentLimits(max_user_turns=3)
    with pytest.warns(sdk.SDKDeprecationWarning, match="StopReason.MAX_TOKENS is now StopReason.MAX_EPISODE_TOKENS"):
        assert sdk.StopReason.MAX_TOKENS is sdk.StopReason.MAX_EPISODE_TOKENS
    assert "MAX_TOKENS" not in sdk.StopReason.__members__


def _failure_of(tmp_path, monkeypatch, body: str) -> sdk.BenchmarkUnavailable:
    module = f"zz_sdk_adapter_{abs(hash(body)) % 10**8}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as info:
        __import__(module)
    return import_failure(info.value, module)


def test_an_import_error_names_the_import_and_what_to_change(tmp_path, monkeypatch):
    typo = _failure_of(tmp_path, monkeypatch, "from unified.benchmarks import Adaptr\n")
    assert typo.reason.startswith("its adapter imports 'Adaptr' from unified.benchmarks, which adapter SDK 0.2 "
                                  "does not have (at ")
    assert typo.how_to_fix.startswith("did you mean 'Adapter'? use a name of unified.benchmarks.__all__")
    package = _failure_of(tmp_path, monkeypatch, "import zz_no_such_package_here.sub\n")
    assert "needs the missing package 'zz_no_such_package_here'" in package.reason
    assert package.how_to_fix == "pip install zz_no_such_package_here"
    library = _failure_of(tmp_path, monkeypatch, "import unified.zz_moved\n")
    assert "imports 'unified.zz_moved', which adapter SDK 0.2 does not have" in library.reason
    assert "pip install" not in library.how_to_fix
    # once the shim window closes the old module is gone: the skip says what to change (Python's own error)
    gone = import_failure(ModuleNotFoundError("No module named 'unified.contracts'", name="unified.contracts"))
    assert gone.how_to_fix == ("change `from unified.contracts import ...` to `from unified.benchmarks import ...` "
                               "(moved in SDK 0.2)")


def test_an_adapter_call_is_classified_as_a_skip_naming_the_import_or_an_error():
    class LazyImports(FixtureAdapter):
        def tasks(self, split=None, limit=None):
            import zz_tau2_not_installed  # noqa: F401  (what a tau2-bench adapter does inside tasks())

    with pytest.raises(ImportError) as info:
        LazyImports().tasks()
    skip = sdk.classify_adapter_error(info.value, call="tasks")
    assert skip.status == "skipped" and skip.reason.startswith("tasks(): its adapter needs the missing package "
                                                               "'zz_tau2_not_installed'")
    assert skip.line("tau2") == f"tau2: skipped: {skip.reason} -> pip install zz_tau2_not_installed"
    with pytest.raises(TypeError) as info:
        sdk.AgentLimits(max_user_turns=3)
    error = sdk.classify_adapter_error(info.value, call="agent_limits")
    assert error.status == "error" and error.reason.startswith("agent_limits() raised TypeError: AgentLimits has no "
                                                               "field 'max_user_turns'")
    assert "Traceback" in error.traceback
    unavailable = sdk.classify_adapter_error(sdk.BenchmarkUnavailable("no checkout", "set FOO"), call="tasks")
    assert (unavailable.status, unavailable.reason, unavailable.how_to_fix) == ("skipped", "tasks(): no checkout",
                                                                                 "set FOO")


class DictToolsAdapter(FixtureAdapter):
    """The docs' old example: tools copied as plain OpenAI dicts."""

    name = "dict_tools_fixture"

    def open(self, task, *, run=None):
        env = FixtureEnv(task)
        env.tools = [tool.to_openai()["function"] for tool in env.tools]
        return env


def test_plain_dict_tools_end_the_episode_with_an_error_naming_benchmark_task_and_tool():
    adapter, results = DictToolsAdapter(n=1), []
    AgentLoop(adapter, EchoModel(), on_result=lambda r, e: results.append(r)).run([Job(adapter.tasks()[0])])
    (result,) = results
    assert "dict_tools_fixture: task echo_0: open(): tool 0 ('echo') is a dict, not a unified.types.ToolSpec" \
        in result.error
    assert "to_openai" not in result.error


@pytest.mark.parametrize("tools, message", [
    ([ToolSpec(name="a"), ToolSpec(name="a")], "tool 1 ('a'): a second tool named 'a'"),
    ([ToolSpec(name="has space")], "name must be non-empty text without whitespace"),
    ([ToolSpec(name="a", parameters={"type": "array"})], "parameters must be an object schema"),
    ([ToolSpec(name="a", parameters={"type": "object", "properties": {"x": {"default": {1, 2}}}})],
     "not JSON-serialisable"),
    (ToolSpec(name="a"), "environment.tools is a ToolSpec, not a list"),
])
def test_malformed_tools_are_named(tools, message):
    with pytest.raises(sdk.ToolSpecError, match="^bench: task t: ") as info:
        sdk.check_tools(tools, "bench: task t")
    assert message in str(info.value)


def test_tool_spec_from_function_reads_the_signature_and_the_docstring():
    def search(query: str, k: int = 5, mode: Literal["web", "news"] = "web", site: Optional[str] = None,
               tags: list[str] | None = None, weight: Annotated[float, "how much to trust it"] = 1.0,
               filters: dict[str, int] | None = None, exact: bool = False) -> str:
        """Search the web.

        Args:
            query: what to look for,
                in plain words.
            k (int): how many hits.
        """

    tool = ToolSpec.from_function(search)
    assert (tool.name, tool.description) == ("search", "Search the web.")
    props = tool.parameters["properties"]
    assert tool.parameters["required"] == ["query"] and tool.parameters["type"] == "object"
    assert props["query"] == {"type": "string", "description": "what to look for, in plain words."}
    assert props["k"] == {"type": "integer", "description": "how many hits.", "default": 5}
    assert props["mode"] == {"type": "string", "enum": ["web", "news"], "default": "web"}
    assert props["site"] == {"type": ["string", "null"], "default": None}
    assert props["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                             "default": None}
    assert props["weight"] == {"type": "number", "description": "how much to trust it", "default": 1.0}
    assert props["filters"]["anyOf"][0] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["exact"] == {"type": "boolean", "default": False}
    sdk.check_tools([tool], "bench: task t")

    def refund(order_id: str) -> str:
        """Refund an order.

        :param order_id: the order's id
        """
    assert ToolSpec.from_function(refund, name="refund_order").to_openai()["function"] == {
        "name": "refund_order", "description": "Refund an order.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": "the order's id"}},
                       "required": ["order_id"]}}


@pytest.mark.parametrize("signature, message", [
    ("(x: set[int])", "parameter 'x': type hint set[int] has no JSON schema here (supported: str, int"),
    ("(x)", "parameter 'x' has no type hint"),
    ("(*args: int)", "parameter 'args': *args / **kwargs have no JSON schema"),
    ("(x: dict[int, str])", "JSON object keys are text"),
    ("(x: 'NoSuchType')", "its type hints do not resolve"),
])
def test_tool_spec_from_function_rejects_what_json_schema_cannot_say(signature, message):
    namespace: dict = {}
    exec(f"def tool{signature}:\n    pass\n", namespace)  # a test-made signature, no model output
    with pytest.raises(TypeError, match="^ToolSpec.from_function") as info:
        ToolSpec.from_function(namespace["tool"])
    assert message in str(info.value)
