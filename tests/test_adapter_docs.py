"""docs/adapters.md as an outsider reads it: its example is a real file that runs end to end through
``python -m unified.eval``, the listing is that file, every record field is documented, every link resolves."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from unified.benchmarks import AgentLimits, Environment, RunContext, Task
from unified.types import Episode, EpisodeResult, Message, Observation, ToolCall, ToolSpec

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "adapters.md"
EXAMPLE = ROOT / "docs" / "examples" / "unit_converter.py"


def test_the_listing_in_the_docs_is_the_example_file():
    text = DOC.read_text()
    begin, end = "<!-- BEGIN docs/examples/unit_converter.py -->\n", "<!-- END docs/examples/unit_converter.py -->"
    listing = text[text.index(begin) + len(begin):text.index(end)]
    assert listing == f"```python\n{EXAMPLE.read_text()}```\n"


def test_the_example_runs_end_to_end_through_the_eval_cli(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE.parent), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "unified.eval", "--benchmarks", "unit_converter:UnitConverterAdapter",
                           "--set", "benchmarks.unit_converter.tolerance=0.05",
                           "--model", "gold", "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SDKDeprecationWarning" not in proc.stderr  # the example uses today's names only
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # one name per benchmark: the class's, for its settings, its plan, its summary row, its directory and its suites
    assert list(summary["benchmarks"]) == ["unit_converter"] and list(summary["suites"]) == ["examples"]
    entry = summary["benchmarks"]["unit_converter"]
    assert entry["status"] == "ok" and entry["aggregate"]["score"] == 100.0 and entry["results"] == 3, entry
    assert entry["settings"] == {"tolerance": 0.05} and entry["suites"] == ["examples"]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert [(b["name"], b["directory"], b["adapter_path"]) for b in plan["benchmarks"]] == \
        [("unit_converter", "unit_converter", "unit_converter:UnitConverterAdapter")]
    episodes = [json.loads(line) for line in (tmp_path / "run" / "unit_converter" / "episodes.jsonl").open()]
    assert all(e["stop_reason"] == "answer" and e["tools"][0]["name"] == "convert" for e in episodes)


def test_the_example_scores_a_wrong_answer_zero(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    from unit_converter import UnitConverterAdapter

    adapter = UnitConverterAdapter()
    task = adapter.tasks()[0]
    with adapter.open(task, run=RunContext()) as env:
        (obs,) = env.step([ToolCall(name="convert", arguments={"value": 5, "from_unit": "km", "to_unit": "m"}, id="c")])
        (bad,) = env.step([ToolCall(name="convert", arguments={"value": 5}, id="d")])
        assert obs.content == "5000" and bad.is_error
        for answer, expected in (("5000", 1.0), ("4000", 0.0), ("five thousand", 0.0)):
            episode = Episode(benchmark=adapter.name, task_id=task.id,
                              messages=[Message(role="assistant", content=answer)], stop_reason="answer")
            assert adapter.score(task, episode, env).score == expected


@pytest.mark.parametrize("record", [Task, ToolSpec, ToolCall, Observation, EpisodeResult, AgentLimits, RunContext])
def test_every_field_of_the_records_is_in_the_docs_table(record):
    row = next((line for line in DOC.read_text().splitlines() if line.startswith(f"| `{record.__name__}` ")), None)
    assert row is not None, f"no row for {record.__name__}"
    missing = [f.name for f in dataclasses.fields(record) if f"`{f.name}`" not in row]
    assert not missing, f"{record.__name__}: fields not documented: {missing}"


def test_every_relative_link_of_the_docs_resolves():
    links = re.findall(r"\]\(((?!https?:|#)[^)]+)\)", DOC.read_text())
    assert links
    broken = [link for link in links if not (DOC.parent / link.split("#")[0]).exists()]
    assert not broken, broken


def test_the_docs_put_the_environments_init_in_the_environment_and_say_what_gold_answers_between_turns():
    """Issue 44's doc fixes, as a reader following the text would meet them."""
    text = DOC.read_text()
    open_section = text[text.index("`open` only builds the environment"):text.index("`step(tool_calls, message)`")]
    assert "class RefundDeskEnvironment(Environment):" in open_section and "Adapter.__init__ ran a second time" \
        in open_section
    assert '"Done."' in text and "next_user_turn(self, episode: Episode) -> str | None" in text
    assert "ToolSpec.from_function(self.lookup)" in text and "DetailsNotJSONWarning" in text
    assert "--set benchmarks.unit_converter.tolerance=" in text and "**One name per benchmark.**" in text


def test_the_docs_bound_method_tool_example_runs():
    """The docs' ``ToolSpec.from_function(self.lookup)`` example, executed as written (our own doc's code)."""
    text = DOC.read_text()
    start = text.index("```python\nclass OrdersEnvironment(Environment):") + len("```python\n")
    namespace = {"json": json, "Environment": Environment,
                 "ToolSpec": ToolSpec, "Observation": Observation}
    exec(text[start:text.index("```", start)], namespace)  # noqa: S102 (the docs' own listing)
    env = namespace["OrdersEnvironment"]({"A1": {"status": "delivered"}})
    (tool,) = env.tools
    assert (tool.name, list(tool.parameters["properties"])) == ("lookup", ["order_id"])
    (obs,) = env.step([ToolCall(name="lookup", arguments={"order_id": "A1"}, id="c1")])
    assert json.loads(obs.content) == {"status": "delivered"} and obs.call_id == "c1"
