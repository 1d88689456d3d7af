"""One dict -> dataclass loader (unified.config.from_dict) for recipes and stored records.

``Record.from_dict`` used to have its own reviver (``_revive``): it said nothing of a mistyped
field but its name, no "did you mean", and let a wrong type through (``"trial": "first"`` came
back as a string in an ``int`` field). Both entry points now run the same code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest

from unified.config import ConfigError, ConfigNameError, from_dict
from unified.eval.rundir import BenchmarkStore
from unified.types import Episode, EpisodeResult, Message, Record, Step, ToolCall


def _episode() -> Episode:
    call = ToolCall(name="ls", arguments={"path": "."}, id="c1")
    return Episode(benchmark="b", task_id="t", trial=0, model="m",
                   messages=[Message(role="user", content="hi"), Message(role="assistant", tool_calls=[call])],
                   steps=[Step(index=0, prompt="p", completion="c", content="", tool_calls=[call])])


def test_records_round_trip_through_the_one_loader():
    episode = _episode()
    again = Episode.from_dict(json.loads(json.dumps(episode.to_dict())))
    assert again == episode
    assert isinstance(again.steps[0].tool_calls[0], ToolCall) and isinstance(again.messages[1], Message)


def test_a_mistyped_record_field_says_did_you_mean_with_file_and_line():
    row = {**EpisodeResult(benchmark="b", task_id="t", trial=0, score=1.0).to_dict(), "scroe": 1.0}
    with pytest.raises(ConfigNameError, match=r"^results\.jsonl:7: EpisodeResult: unknown key 'scroe'\. "
                                              r"Did you mean 'score'\?"):
        EpisodeResult.from_dict(row, "results.jsonl:7")


def test_nested_record_errors_name_the_path_and_are_value_errors():
    data = _episode().to_dict()
    data["steps"][0]["tool_calls"][0]["argumnets"] = {}
    with pytest.raises(ValueError, match=r"^ep\.jsonl:3: steps\[0\]\.tool_calls\[0\]: unknown key 'argumnets'"):
        Episode.from_dict(data, "ep.jsonl:3")
    data = _episode().to_dict()
    data["messages"][0]["role"] = "admin"
    with pytest.raises(ValueError, match=r"messages\[0\]\.role: unknown value 'admin'.*Valid values: assistant"):
        Episode.from_dict(data, "ep.jsonl:3")


def test_wrong_types_in_a_record_are_errors_not_silently_kept():
    row = {**EpisodeResult(benchmark="b", task_id="t", trial=0, score=1.0).to_dict(), "trial": "first"}
    with pytest.raises(ConfigError, match=r"^r\.jsonl:2: trial: expected an integer, got 'first'"):
        EpisodeResult.from_dict(row, "r.jsonl:2")
    with pytest.raises(ConfigError, match="Episode: expected a mapping"):
        Episode.from_dict(["not", "a", "record"], "x.jsonl:1")
    with pytest.raises(ConfigError, match="missing required key.*task_id"):
        EpisodeResult.from_dict({"benchmark": "b", "trial": 0, "score": 0.0})


def test_the_result_store_reports_a_corrupted_row_with_its_line(tmp_path):
    good = EpisodeResult(benchmark="b", task_id="t", trial=0, score=1.0).to_dict()
    store = BenchmarkStore(tmp_path, "b")
    store.dir.mkdir()
    store.results_path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "pased": True}) + "\n")
    with pytest.raises(ValueError, match=r"results\.jsonl:2: EpisodeResult: unknown key 'pased'\. "
                                         r"Did you mean 'passed'"):
        store.load()


@dataclass
class _Section(Record):
    name: str
    weights: dict[str, float] = field(default_factory=dict)


def test_record_and_config_entry_points_are_the_same_code():
    data = {"name": "x", "weights": {"a": "0.5"}}
    assert _Section.from_dict(data) == from_dict(_Section, data) == _Section("x", {"a": 0.5})
    for call in (lambda: _Section.from_dict({"nmae": "x"}, "f.jsonl:1"),
                 lambda: from_dict(_Section, {"nmae": "x"}, source="f.jsonl:1")):
        with pytest.raises(ConfigNameError) as info:
            call()
        assert str(info.value) == ("f.jsonl:1: _Section: unknown key 'nmae'. Did you mean 'name'? "
                                   "Valid keys: name, weights.")


@dataclass
class _JudgeOptions:
    """A section with a renamed key whose value flips (as a reward function's judge_disable_thinking)."""

    RENAMED = {"no_thinking": ("thinking", lambda value: not value), "effort": "reasoning_effort"}

    thinking: bool = True
    reasoning_effort: str = "low"


def test_a_renamed_key_loads_once_noted_and_the_warning_points_at_the_caller(capsys):
    """One deprecation line per old key and place (the flipped one says so); the DeprecationWarning names
    the code that called from_dict, not the loader."""
    with pytest.warns(DeprecationWarning, match="judge.no_thinking is now judge.thinking") as caught:
        options = from_dict(_JudgeOptions, {"no_thinking": True, "effort": "high"}, where="judge", source="r.yaml")
    assert (options.thinking, options.reasoning_effort) == (False, "high")
    assert {w.filename for w in caught if issubclass(w.category, DeprecationWarning)} == {__file__}
    err = capsys.readouterr().err.splitlines()
    assert err == ["note: deprecated: r.yaml: judge.no_thinking is now judge.thinking (the opposite value)",
                   "note: deprecated: r.yaml: judge.effort is now judge.reasoning_effort"]
    again = from_dict(_JudgeOptions, {"no_thinking": False}, where="judge", source="r.yaml")
    assert again.thinking is True and capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match="both 'no_thinking' \\(its old name\\) and 'thinking' are set"):
        from_dict(_JudgeOptions, {"no_thinking": True, "thinking": True})


def test_general_task_records_are_read_strictly_by_the_one_loader(tmp_path):
    """``general/results.jsonl`` lines go through the same loader as every other record: a mistyped key
    says "did you mean" with file and line, and a value of the wrong type is an error, not kept."""
    from unified.eval.general import GeneralStore, Metric, TaskRecord

    store = GeneralStore(tmp_path)
    good = TaskRecord(task="arc_easy", status="ok", model="m", fingerprint="f",
                      metrics=[Metric(name="acc", filter="none", value=0.5, stderr=0.1)],
                      subtasks={"arc_easy/x": [Metric(name="acc", filter="none", value=1.0, stderr=None)]})
    store.append(good)
    assert store.records() == [good]
    assert isinstance(store.records()[0].subtasks["arc_easy/x"][0], Metric)
    bad_lines = [
        ({"fingerprnt": "f"}, r":2: TaskRecord: unknown key 'fingerprnt'\. Did you mean 'fingerprint'\?"),
        ({"seconds": "slow"}, r":2: seconds: expected a number, got 'slow'"),
        ({"metrics": [{"name": "acc", "filter": "none", "value": "high", "stderr": None}]},
         r":2: metrics\[0\]\.value: expected float \| None, got 'high'"),
    ]
    for change, message in bad_lines:
        path = store.path
        path.write_text(path.read_text().splitlines()[0] + "\n" + json.dumps({**json.loads(
            path.read_text().splitlines()[0]), **change}) + "\n")
        with pytest.raises(ConfigError, match=re.escape(str(path)) + message):
            store.records()
