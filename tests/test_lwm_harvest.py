"""Harvesting: the shipped dataset is valid and regenerates bit for bit; bfcl backends; Episodes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from unified.lwm import load_records, rl_dataset
from unified.lwm.harvest import harvest, records_from_episodes
from unified.lwm.harvest_mcp import execute_call, load_backend, run_calls
from unified.types import Episode, Message, Observation, Step, ToolCall, ToolSpec
from _requires import needs_bwrap

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "lwm"


def test_shipped_dataset_is_valid_small_and_matches_its_manifest():
    manifest = json.loads((SHIPPED / "MANIFEST.json").read_text())
    total = 0
    for name, info in manifest["files"].items():
        data = (SHIPPED / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == info["sha256"], name
        records = load_records(SHIPPED / name)
        assert len(records) == info["records"] and len({r.id for r in records}) == info["trajectories"]
        total += len(data)
    assert total < 5 * 1024 * 1024
    records = load_records(SHIPPED)
    assert {r.task for r in records} == {"terminal", "mcp"} and len(records) >= 300
    # every trajectory is complete: turns 1..T all present
    by_traj = {}
    for r in records:
        by_traj.setdefault((r.task, r.id), set()).add(r.turn_idx)
    assert all(turns == set(range(1, max(turns) + 1)) for turns in by_traj.values())
    assert len(rl_dataset(SHIPPED, seed=0)) == len(by_traj)


@pytest.mark.slow
@needs_bwrap
def test_regenerate_command_reproduces_the_shipped_data_bit_for_bit(tmp_path):
    manifest = json.loads((SHIPPED / "MANIFEST.json").read_text())
    settings = manifest["settings"]
    assert manifest["regenerate"] == (f"python -m unified.lwm.harvest --seed {settings['seed']} "
                                      f"--terminal {settings['terminal']} --mcp {settings['mcp']}")
    again = harvest(tmp_path, seed=settings["seed"], terminal=settings["terminal"], mcp=settings["mcp"])
    assert again == manifest
    for name in manifest["files"]:
        assert (tmp_path / name).read_bytes() == (SHIPPED / name).read_bytes(), name


def test_bfcl_backends_run_calls_by_name_only():
    fs = load_backend("file_system", {"root": {"me": {"type": "directory", "contents": {
        "a.txt": {"type": "file", "content": "hello"}}}}})
    assert json.loads(execute_call(fs, "cat", {"file_name": "a.txt"})) == {"file_content": "hello"}
    assert "unknown function" in execute_call(fs, "_load_scenario", {"scenario": {}})
    assert "unknown function" in execute_call(fs, "__class__", {})
    assert "error" in json.loads(execute_call(fs, "cat", {"wrong_arg": 1}))
    actions, observations, _ = run_calls("ticket", {"ticket_counter": 5}, [
        {"name": "ticket_login", "arguments": {"username": "u", "password": "p"}},
        {"name": "create_ticket", "arguments": {"title": "t"}},
        {"name": "get_ticket", "arguments": {"ticket_id": 5}}])
    assert json.loads(actions[1])["name"] == "create_ticket"
    assert json.loads(observations[2])["id"] == 5 and json.loads(observations[2])["title"] == "t"


def fixture_episode(trial: int = 0, error: str | None = None) -> Episode:
    call = ToolCall(name="ls", arguments={"path": "."}, id="c0")
    return Episode(
        benchmark="bfcl_v4", task_id="multi_turn_base_1", trial=trial, error=error,
        messages=[Message(role="system", content="s"), Message(role="user", content="list the files")],
        tools=[ToolSpec(name="ls")],
        steps=[Step(index=0, prompt="p", completion="c", tool_calls=[call],
                    observations=[Observation(call_id="c0", content='{"files": ["a"]}')]),
               Step(index=1, prompt="p", completion="done", content="done")])


def test_records_from_saved_episodes(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(json.dumps(e.to_dict()) for e in (fixture_episode(0), fixture_episode(1, "boom"))))
    records = records_from_episodes(path)
    assert len(records) == 1
    (r,) = records
    assert r.task == "mcp" and r.id == "bfcl_v4-multi_turn_base_1-0" and r.total_turns == 1
    assert json.loads(r.current_prompt) == {"name": "ls", "arguments": {"path": "."}}
    assert r.target == '{"files": ["a"]}' and "list the files" in r.system_str
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"benchmark": "x", "task_id": "t", "bogus": 1}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        records_from_episodes(bad)


def test_a_run_directory_harvests_by_the_domain_each_adapter_declares(tmp_path):
    """An eval run dir of terminal_bench_2 and swe_bench_verified episodes harvests without --domain:
    the domains come from the adapters (``world_model_domain``), not from a map in core."""
    from unified.lwm.harvest import main

    run = tmp_path / "run"
    for benchmark in ("terminal_bench_2", "swe_bench_verified"):
        episode = fixture_episode(0)
        episode.benchmark = benchmark
        (run / benchmark).mkdir(parents=True)
        (run / benchmark / "episodes.jsonl").write_text(json.dumps(episode.to_dict()) + "\n")
    out = tmp_path / "lwm"
    assert main(["--out", str(out), "--terminal", "0", "--mcp", "0", "--episodes", str(run)]) == 0
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert set(manifest["files"]) == {"terminal.jsonl", "swe.jsonl"}
    (record,) = load_records(out / "terminal.jsonl")
    assert record.id == "terminal_bench_2-multi_turn_base_1-0"
    unknown = run / "zz_not_a_benchmark"
    unknown.mkdir()
    episode = fixture_episode(0)
    episode.benchmark = "zz_not_a_benchmark"
    (unknown / "episodes.jsonl").write_text(json.dumps(episode.to_dict()) + "\n")
    with pytest.raises(ValueError, match="declares no world-model domain.*pass --domain"):
        records_from_episodes(run)
    assert {r.task for r in records_from_episodes(run, domain="mcp")} == {"mcp"}
