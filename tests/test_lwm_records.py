"""AgentWorldBench records: round trip, validation errors, chat samples, seeded sampling, rl_dataset.

The records here are hand-written fixtures in the AgentWorldBench format (``fixture_*``).
"""

from __future__ import annotations

import json
import random

import pytest

from unified.lwm import (
    DOMAINS,
    SYSTEM_PROMPTS,
    AWBRecord,
    RecordError,
    dumps_record,
    load_records,
    read_records,
    rl_dataset,
    sample_one_turn_per_trajectory,
    to_chat,
    trajectory_records,
    write_records,
)
from unified.chatformat.observation import parse_observation
from unified.lwm.dataset import _prompt_tokens as prompt_tokens
from unified.models.tiny import train_tiny_tokenizer


def fixture_trajectory(task: str = "terminal", traj: str = "t1", turns: int = 3) -> list[AWBRecord]:
    actions = [f"echo step{i}" for i in range(1, turns + 1)]
    observations = [f"step{i}\n[exit code: 0]" for i in range(1, turns + 1)]
    return trajectory_records(task, traj, f"system of {traj}", actions, observations)


def fixture_dir(tmp_path, n_traj: int = 6):
    records = []
    for i in range(n_traj):
        records += fixture_trajectory("terminal", f"term{i}", 2 + i % 3)
        records += fixture_trajectory("web", f"web{i}", 3)
    write_records(tmp_path / "terminal.jsonl", [r for r in records if r.task == "terminal"])
    write_records(tmp_path / "web.jsonl", [r for r in records if r.task == "web"])
    return tmp_path, records


def test_round_trip(tmp_path):
    records = fixture_trajectory(turns=4)
    path = tmp_path / "terminal.jsonl"
    assert write_records(path, records) == 4
    again = read_records(path)
    assert again == records
    r3 = again[2]
    assert r3.prompt == ["echo step1", "echo step2"] and r3.current_prompt == "echo step3"
    assert r3.target == "step3\n[exit code: 0]" and r3.key == "terminal/t1/3"
    assert list(json.loads(path.read_text().splitlines()[0])) == [
        "task", "id", "system_str", "prompt", "response", "current_prompt", "turn_idx", "total_turns"]


def _good() -> dict:
    return fixture_trajectory(turns=3)[1].fields()


@pytest.mark.parametrize("mutate, field, words", [
    (lambda d: d.pop("response"), "response", "missing"),
    (lambda d: d.update(task="chess"), "task", "unknown domain"),
    (lambda d: d.update(turn_idx=0), "turn_idx", ">= 1"),
    (lambda d: d.update(turn_idx="2"), "turn_idx", "integer"),
    (lambda d: d.update(total_turns=1), "total_turns", "smaller"),
    (lambda d: d.update(prompt=["a", "b", "c", "d"]), "prompt", "expected 1 to 3 actions"),
    (lambda d: d.update(prompt=[]), "prompt", "expected 1 to 3 actions"),
    (lambda d: d.update(response=["a", "b", "c", "d"]), "response", "at most 3 observations"),
    (lambda d: d.update(id=1.5), "id", "a string or an integer"),
    (lambda d: d.update(id=True), "id", "a string or an integer"),
    (lambda d: d.update(response=["x", 3]), "response[1]", "string"),
    (lambda d: d.update(id=""), "id", "empty"),
    (lambda d: d.update(system_str=None), "system_str", "string"),
])
def test_validation_names_file_line_and_field(tmp_path, mutate, field, words):
    bad = _good()
    mutate(bad)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_good()) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(RecordError) as err:
        read_records(path)
    assert str(err.value).startswith(f"{path}:3: {field}:"), str(err.value)
    assert words in str(err.value)
    assert err.value.line == 3 and err.value.field == field


def test_invalid_json_is_reported(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(_good()) + "\n{not json\n")
    with pytest.raises(RecordError, match=r"x.jsonl:2: <json>: invalid JSON"):
        read_records(path)


def test_what_eval_py_reads_is_read(tmp_path):
    """eval.py (json.loads + .get) reads these four shapes; so does the reader, as eval.py indexes them:
    an extra field (kept and written back), the same sample twice (both scored), a ``lwm/mcp`` task
    (domain mcp, the file's task kept for eval.py's files), a response list shorter than turn_idx
    (ground truth "")."""
    from unified.lwm.official import job_of, subtask_of
    from unified.lwm.records import load_records, write_records

    extra = {**_good(), "source": "crawl-7", "id": "t1"}
    prefixed = {**_good(), "task": "lwm/mcp", "id": 9, "system_str": "You simulate MCP."}
    short = {**_good(), "id": "t2", "response": ["only one"]}
    (tmp_path / "a_test.jsonl").write_text("\n".join(json.dumps(d) for d in (extra, extra, prefixed, short)) + "\n")
    (tmp_path / "b_test.jsonl").write_text(json.dumps(extra) + "\n")  # eval.py reads every file: a third time
    records = load_records(tmp_path)
    assert [r.key for r in records] == ["terminal/t1/2", "terminal/t1/2#2", "mcp/9/2", "terminal/t2/2",
                                        "terminal/t1/2#3"]
    first, _, mcp, cut, _ = records
    assert first.extra == {"source": "crawl-7"} and job_of(first)["source"] == "crawl-7"
    assert mcp.task == "mcp" and job_of(mcp)["task"] == "lwm/mcp" and subtask_of(job_of(mcp)) == "mcp"
    assert cut.target == "" and cut.history == [("echo step1", "only one")]  # turn 1 is there, turn 2 is not
    out = tmp_path / "out.jsonl"
    write_records(out, records[:3])
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert again[0]["source"] == "crawl-7" and again[2]["task"] == "lwm/mcp"


def test_prompt_that_already_holds_the_current_action_is_read_as_eval_py_indexes_it(tmp_path):
    d = _good()
    d["prompt"] = d["prompt"] + [d["current_prompt"]]
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps(d) + "\n")
    (record,) = read_records(path)
    assert record.history == [("echo step1", "step1\n[exit code: 0]")] and record.action == "echo step2"
    assert record.target == "step2\n[exit code: 0]" and dumps_record(record) == json.dumps(d, separators=(",", ":"))


def test_published_layout_integer_id_and_whole_trajectory_lists_fixture(tmp_path):
    """A record written the way AgentWorldBench publishes it (README of QwenLM/Qwen-AgentWorld):
    an integer id and the trajectory's whole prompt/response lists; turn 2 of 3 is the sample."""
    d = {"task": "mcp", "id": 145256090131919, "prompt": ["### Turn 1\nA1", "### Turn 2\nA2", "### Turn 3\nA3"],
         "response": ["**Environment Observation:**\nO1", "**Environment Observation:**\nO2",
                      "**Environment Observation:**\nO3"],
         "current_prompt": "### Turn 2\nA2 (as shown to the judge)", "system_str": "sys", "turn_idx": 2,
         "total_turns": 3}
    path = tmp_path / "mcp_test.jsonl"
    path.write_text(json.dumps(d) + "\n")
    (record,) = read_records(path)
    assert record.id == 145256090131919 and record.key == "mcp/145256090131919/2"
    assert record.history == [("### Turn 1\nA1", "**Environment Observation:**\nO1")]
    assert record.action == "### Turn 2\nA2"  # eval.py's infer sends prompt[turn_idx - 1]
    assert record.target == "**Environment Observation:**\nO2"  # and judges against response[turn_idx - 1]
    assert json.loads(dumps_record(record)) == d  # lossless: the id stays an integer
    assert to_chat(record)[-1] == {"role": "user", "content": "### Turn 2\nA2"}
    assert len(to_chat(record)) == 4
    assert sample_one_turn_per_trajectory([record], seed=0) == [record]


def test_chat_sample_layout_and_gui_tags():
    rec = fixture_trajectory("web", "w", 3)[2]
    msgs = to_chat(rec)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[-1]["content"] == "echo step3"
    assert msgs[2]["content"].startswith("<predicted_observation>") and "step1" in msgs[2]["content"]
    assert parse_observation(msgs[2]["content"]) == "step1\n[exit code: 0]"
    term = fixture_trajectory("terminal", "t", 2)[1]
    assert to_chat(term)[2]["content"] == "step1\n[exit code: 0]"
    empty_system = AWBRecord(**{**term.to_dict(), "system_str": ""})
    assert to_chat(empty_system)[0]["content"] == SYSTEM_PROMPTS["terminal"]
    assert len(to_chat(rec, max_history=1)) == 4


def test_every_domain_has_its_own_prompt():
    assert set(SYSTEM_PROMPTS) == set(DOMAINS) and len(set(SYSTEM_PROMPTS.values())) == 7
    for d in ("web", "os", "android"):
        assert "<predicted_observation>" in SYSTEM_PROMPTS[d]
    for d in ("mcp", "terminal", "search", "swe"):
        assert "<predicted_observation>" not in SYSTEM_PROMPTS[d]


def test_one_turn_per_trajectory_is_seeded_and_order_independent(tmp_path):
    _, records = fixture_dir(tmp_path)
    a = sample_one_turn_per_trajectory(records, seed=7)
    shuffled = records[:]
    random.Random(0).shuffle(shuffled)
    b = sample_one_turn_per_trajectory(shuffled, seed=7)
    assert [r.key for r in a] == [r.key for r in b]
    assert len(a) == 12 and len({(r.task, r.id) for r in a}) == 12
    turns = {tuple(r.key for r in sample_one_turn_per_trajectory(records, seed=s)) for s in range(8)}
    assert len(turns) > 1  # different seeds pick different turns


def test_rl_dataset_columns_and_limits(tmp_path):
    data_dir, _ = fixture_dir(tmp_path)
    ds = rl_dataset(data_dir, seed=3)
    assert set(ds.column_names) == {"prompt", "reference", "domain", "sample_id", "turn_idx"}
    assert len(ds) == 12
    row = ds[0]
    assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
    assert len(row["prompt"]) == 2 * row["turn_idx"]
    assert row["reference"] == f"step{row['turn_idx']}\n[exit code: 0]"
    assert row["sample_id"].endswith(f"/{row['turn_idx']}")
    assert rl_dataset(data_dir, seed=3)["sample_id"] == ds["sample_id"]
    assert len(rl_dataset(data_dir, seed=3, limit=5)) == 5
    assert len(rl_dataset([data_dir / "web.jsonl"], seed=3)) == 6

    tok = train_tiny_tokenizer()
    full = {r["sample_id"]: r for r in ds}
    lengths = [prompt_tokens(tok, r["prompt"]) for r in ds]
    budget = sorted(lengths)[len(lengths) // 2]
    fitted = rl_dataset(data_dir, seed=3, tokenizer=tok, max_prompt_tokens=budget)
    assert 0 < len(fitted) <= 12
    trimmed = [r for r in fitted if len(r["prompt"]) < len(full[r["sample_id"]]["prompt"])]
    assert trimmed, "some prompts should lose their oldest history to fit"
    for r in fitted:
        assert prompt_tokens(tok, r["prompt"]) <= budget
    for r in trimmed:
        assert r["prompt"][-1] == full[r["sample_id"]]["prompt"][-1]
    with pytest.raises(ValueError, match="both"):
        rl_dataset(data_dir, seed=3, max_prompt_tokens=10)


def test_load_records_errors_on_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_records(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no \\*.jsonl"):
        load_records(tmp_path)
