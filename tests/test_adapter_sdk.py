"""The adapter SDK as a versioned API (issue 35): ``unified.benchmarks.__all__`` and its version, SDK
0.1's names kept as shims with one visible deprecation line each, adapter failures that name the
missing import or the wrong tool, and tools declared from a function signature."""

from __future__ import annotations

import dataclasses
import json
import re
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
from unified.types import EpisodeResult, ToolSpec

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


def test_the_sdk_names_bounded_settings_and_judge_endpoints_without_importing_torch(tmp_path):
    """Issue 44: what adapters with a judge or a simulated user need has an SDK name, and importing the SDK
    stays light (resolve_endpoint imports the inference stack on its first call)."""
    import unified.config

    assert sdk.bounded is unified.config.bounded and {"bounded", "resolve_endpoint"} <= set(sdk.__all__)
    probe = subprocess.run([sys.executable, "-c", "import sys, unified.benchmarks; print('torch' in sys.modules)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert probe.stdout.strip() == "False", probe.stderr[-2000:]
    endpoint = sdk.resolve_endpoint("openai:http://127.0.0.1:9/v1#judge-model")  # an endpoint spec: used as is
    assert (endpoint.config.base_url, endpoint.config.model, endpoint.local) == ("http://127.0.0.1:9/v1", "judge-model",
                                                                               False)
    outside_sdk = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "evaluators").rglob("*.py"))
                   for n, line in enumerate(path.read_text().splitlines(), 1)
                   if re.match(r"\s*from unified\.(config|inference\.endpoints) import .*\b(bounded|resolve_endpoint)\b",
                               line)]
    assert not outside_sdk, outside_sdk


def test_calling_the_adapters_init_again_is_an_error_not_a_silent_reset():
    """The docs' old ``open`` example: ``super().__init__()`` inside ``open`` is the Adapter's, which put every
    setting back to its default."""

    @dataclasses.dataclass
    class Settings:
        tolerance: float = 0.01

    class ResetsInOpen(FixtureAdapter):
        Config = Settings

        def open(self, task, *, run=None):
            super(FixtureAdapter, self).__init__()  # what `super().__init__()` in an Adapter's open runs
            return FixtureEnv(task)

    adapter = ResetsInOpen(n=1, tolerance=0.5)
    with pytest.raises(TypeError, match=r"Adapter.__init__ ran a second time .* reset its settings"):
        adapter.open(adapter.tasks()[0])
    assert adapter.settings.tolerance == 0.5 and adapter.config == {"tolerance": 0.5}


class ObjectDetailsAdapter(FixtureAdapter):
    name = "object_details_fixture"

    def score(self, task, episode, env):
        result = super().score(task, episode, env)
        result.details = {"checker": object(), "ok": [1, {"tags": {"a"}}], "note": "fine"}
        return result


def test_details_that_json_cannot_hold_are_recorded_as_text_with_a_warning_naming_task_key_and_type():
    adapter, results = ObjectDetailsAdapter(n=2), []
    with pytest.warns(sdk.DetailsNotJSONWarning) as caught:
        AgentLoop(adapter, EchoModel(), on_result=lambda r, e: results.append(r)).run(
            [Job(task) for task in adapter.tasks()])
    lines = sorted(str(w.message) for w in caught if w.category is sdk.DetailsNotJSONWarning)
    assert len(lines) == 2, lines  # once per benchmark, key and type, not once per task
    assert "object_details_fixture: task echo_" in lines[0] and "EpisodeResult.details['checker'] is a object" in lines[0]
    assert "EpisodeResult.details['ok'][1]['tags'] is a set" in lines[1]
    for result in results:
        json.dumps(result.details)  # what results.jsonl gets is JSON, with nothing silently repr'd
        assert result.details["checker"].startswith("<object object at") and result.details["note"] == "fine"
    clean = EpisodeResult(benchmark="b", task_id="t", trial=0, score=1.0, details={"x": [1, 2.5, None, {"y": "z"}]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sdk.check_details(clean).details == {"x": [1, 2.5, None, {"y": "z"}]}
