"""Terminal-Bench 2.0 adapter on the fixture tasks (tests/fixtures/terminal_bench, our own tasks in
the benchmark's folder format, launch-era and current schema) with the local backend: gold scores
100%, doing nothing scores 0, broken task folders are reported with file and field; network,
image choice, reward order, completion markers and the local backend's skips as Harbor does them."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.terminal_bench import TerminalBench2Adapter
from evaluators.terminal_bench.tasks import TaskFormatError, read_task
from unified.agent.loop import AgentLoop, Job
from unified.benchmarks.contract import BenchmarkUnavailable
from unified.execution import LocalBackend
from unified.agent.replay import GoldReplayer
from unified.types import Episode, ToolCall
from _requires import needs_local, needs_tmux

FIXTURES = Path(__file__).parent / "fixtures" / "terminal_bench"
pytestmark = [needs_local, needs_tmux]


def _adapter(**kw):
    adapter = TerminalBench2Adapter(root=str(FIXTURES), backend="local", agent="tool_calling", **kw)
    adapter.name = "terminal_bench_2"
    return adapter


def test_fixture_tasks_are_read_from_the_task_folders():
    tasks = _adapter().tasks()
    assert [t.id for t in tasks] == ["fixture_error_count", "fixture_hello_file", "fixture_region_report"]
    payload = tasks[0].payload
    assert payload["verifier_env"] == {"EXPECTED_FILE": "/app/errors.txt"} and payload["memory_mb"] == 1024
    assert payload["agent_timeout_s"] == 300 and payload["build_context"].endswith("environment")
    assert _adapter(tasks="fixture_hello_file").tasks()[0].id == "fixture_hello_file"


def test_gold_solutions_score_100_percent_on_the_local_backend():
    adapter = _adapter()
    results = AgentLoop(adapter, GoldReplayer()).run([Job(t, 0) for t in adapter.tasks()])
    assert [r.error for r in results] == [None, None, None]
    assert all(r.score == 1.0 and r.passed and r.details["backend"] == "local" for r in results)
    # bubblewrap cannot keep a verifier out of the agent's reach: its processes are stopped first, and the record says so
    assert all(r.details["agent_processes"].startswith("stopped before verification") for r in results)
    summary = adapter.aggregate(results)
    assert summary["score"] == 100.0 and summary["backends"] == ["local"]


def test_doing_nothing_scores_zero_and_a_wrong_answer_too():
    adapter = _adapter(tasks="fixture_error_count")
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        assert "service.log" in env.first_user_message and "$" in env.first_user_message
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        assert result.score == 0.0 and not result.passed
    with adapter.open(task) as env:
        obs = env.step([ToolCall("send_keys", {"keystrokes": "grep -c ERROR data/service.log > errors.txt"}, "c0"),
                        ToolCall("send_keys", {"keystrokes": "cat errors.txt", "duration": 2}, "c1"),
                        ToolCall("rm_rf", {}, "c2")])
        assert "\n5\n" in obs[1].content  # grep -c also counts the WARN and DEBUG lines: wrong
        assert obs[2].is_error and "Unknown tool" in obs[2].content
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        assert result.score == 0.0 and "expected 3, got '5'" in result.details["verifier_output"]


def test_agent_timeout_ends_the_episode():
    adapter = _adapter(tasks="fixture_hello_file", agent_timeout_s=0.5)
    with adapter.open(adapter.tasks()[0]) as env:
        import time

        time.sleep(0.6)
        obs = env.step([ToolCall("send_keys", {"keystrokes": "ls"}, "c0")])
        assert obs[0].is_error and "Time limit" in obs[0].content and env.done


def test_broken_task_folders_name_file_and_field(tmp_path):
    bad = tmp_path / "broken"
    (bad / "tests").mkdir(parents=True)
    (bad / "tests" / "test.sh").write_text("true\n")
    (bad / "instruction.md").write_text("x")
    (bad / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    with pytest.raises(TaskFormatError, match=r"task.toml: \[agent\] timeout_sec must be a number"):
        read_task(bad)
    (bad / "task.toml").write_text("[agent]\ntimeout_sec = 10\n")
    with pytest.raises(TaskFormatError, match="neither environment/Dockerfile nor"):
        read_task(bad)
    tasks = TerminalBench2Adapter(root=str(tmp_path), backend="local", agent="tool_calling").tasks()
    assert tasks[0].skip_reason and "Dockerfile" in tasks[0].skip_reason


def test_missing_source_is_a_clear_unavailability(monkeypatch):
    monkeypatch.delenv("TERMINAL_BENCH_ROOT", raising=False)
    monkeypatch.delenv("UNIFIED_FIXTURES_DIR", raising=False)
    with pytest.raises(BenchmarkUnavailable, match="TERMINAL_BENCH_ROOT"):
        TerminalBench2Adapter(agent="tool_calling").tasks()


# -- the current published task schema ----------------------------------------------------


def _task_dir(root: Path, name: str, toml: str, dockerfile: str | None = "FROM ubuntu:24.04\nWORKDIR /app\n",
              test_sh: str = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n") -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "instruction.md").write_text("Do it.")
    (task / "task.toml").write_text(toml)
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def test_current_schema_loads_and_unknown_keys_are_warnings(tmp_path):
    current = FIXTURES / "fixture_region_report"
    t = read_task(current)
    assert (t.name, t.schema, t.docker_image) == ("unified-fixtures/region-report", "1.1",
                                                    "unified-fixtures/region-report:fixture")
    assert t.solution_env == {"REPORT_INDENT": "2"} and t.environment_env == {"REPORT_PATH": "/app/report.json"}
    assert t.network and t.network_source == "harbor default (public)" and t.skip_reason is None
    assert any("storage_mb" in w for w in t.warnings)
    odd = _task_dir(tmp_path, "odd", 'schema_version = "1.3"\nbrand_new_key = 1\n[task]\nname = "x/odd"\n'
                    'new_field = true\n[telemetry]\nlevel = 2\n[environment]\nfuture_knob = "x"\n')
    t = read_task(odd)
    assert t.skip_reason is None
    assert {"unknown top-level key 'brand_new_key' (ignored)", "unknown top-level key 'telemetry' (ignored)",
            "[task] new_field is not used here (ignored)", "[environment] future_knob is not used here (ignored)"} \
        <= set(t.warnings)
    steps = _task_dir(tmp_path, "multi", 'schema_version = "1.4"\n[[steps]]\nname = "one"\n')
    assert "multi-step" in read_task(steps).skip_reason


def test_network_follows_harbor_default_with_a_flag_and_a_per_task_cut(tmp_path):
    _task_dir(tmp_path, "default_net", 'version = "1.0"\n')
    _task_dir(tmp_path, "legacy_off", 'version = "1.0"\n[environment]\nallow_internet = false\n')
    _task_dir(tmp_path, "mode_off", 'schema_version = "1.1"\n[environment]\nnetwork_mode = "no-network"\n')
    _task_dir(tmp_path, "legacy_on", 'version = "1.0"\n[environment]\nallow_internet = true\n')

    def networks(**kw):  # what a container engine gets (the local backend never has the network)
        adapter = TerminalBench2Adapter(root=str(tmp_path), backend="local", agent="tool_calling", **kw)
        assert not any(adapter.open(t).spec().network for t in adapter.tasks()) or kw.get("network") == "on"
        return {t.id: adapter.network_for(adapter._task(t), "docker")[0] for t in adapter.tasks()}

    assert networks() == {"default_net": True, "legacy_off": False, "legacy_on": True, "mode_off": False}
    assert networks(network="off") == dict.fromkeys(["default_net", "legacy_off", "legacy_on", "mode_off"], False)
    assert networks(network_off="legacy_on")["legacy_on"] is False
    assert networks(network_off="legacy_on")["default_net"] is True


def test_prebuilt_image_is_used_unless_a_build_is_asked_for():
    t = read_task(FIXTURES / "fixture_region_report")
    image = "unified-fixtures/region-report:fixture"
    for backend in ("docker", "podman", "apptainer"):
        assert _adapter().image_for(t, backend) == (image, None)
        assert _adapter(build="always").image_for(t, backend) == (None, t.build_context)
    assert _adapter().image_for(t, "local") == (image, t.build_context)  # local replays the Dockerfile
    no_image = read_task(FIXTURES / "fixture_hello_file")
    assert _adapter().image_for(no_image, "docker") == (None, no_image.build_context)


def test_apptainer_hint_names_the_prebuilt_image_and_podman_pulls_qualified_names(tmp_path):
    from unified.execution import ApptainerBackend, BackendUnavailable, DockerBackend, EnvironmentSpec
    from unified.execution.containers import qualify_image

    if any(DockerBackend(b).available() for b in ("docker", "podman")):
        pytest.skip("an engine that can build is installed here")
    spec = EnvironmentSpec(image="alexgshaw/fix-git:20251031", build_context=FIXTURES / "fixture_hello_file" /
                           "environment")
    with pytest.raises(BackendUnavailable) as info:
        ApptainerBackend().prepare_image(spec, "apptainer")
    assert "alexgshaw/fix-git:20251031" in info.value.how_to_fix and "give the task a prebuilt" not in str(info.value)
    assert qualify_image("alexgshaw/fix-git:20251031") == "docker.io/alexgshaw/fix-git:20251031"
    assert qualify_image("ubuntu:24.04") == "docker.io/library/ubuntu:24.04"
    assert qualify_image("ghcr.io/x/y:1") == "ghcr.io/x/y:1"


def test_rewards_are_read_in_harbors_order():
    from evaluators.terminal_bench.environment import read_reward
    from unified.execution import EnvironmentSpec

    with LocalBackend().start(EnvironmentSpec(extra_dirs=["/logs/verifier"])) as s:
        s.write_file("/logs/verifier/reward.txt", "0\n")
        s.write_file("/logs/verifier/reward.json", '{"reward": 1.0, "tests_passed": 3, "note": "x"}')
        got = read_reward(s)
        assert got["reward"] == 1.0 and got["reward_source"] == "reward.json"
        assert got["rewards"] == {"reward": 1.0, "tests_passed": 3.0}
        s.write_file("/logs/verifier/reward.json", '{"tests_passed": 3}')
        got = read_reward(s)  # no 'reward' key: reward.txt supplies it, and reward_source says so
        assert got["reward"] == 0.0 and got["reward_source"] == "reward.txt" and got["rewards"]["tests_passed"] == 3
        s.exec("rm -f /logs/verifier/reward.json /logs/verifier/reward.txt")
        assert read_reward(s)["reward"] is None and "no /logs/verifier" in read_reward(s)["reward_error"]


def test_a_command_ends_on_its_completion_marker_not_on_the_foreground_process():
    from unified.execution import EnvironmentSpec, TmuxTerminal

    with LocalBackend().start(EnvironmentSpec(workdir="/app")) as s:
        if s.exec("command -v tmux").exit_code != 0:
            pytest.skip("tmux is not installed (apt-get install -y tmux)")
        term = TmuxTerminal(s)
        term.start()
        term.wait(5)
        # a script run by bash: the pane's foreground process is `bash` the whole time it runs
        term.send_keys("bash -c 'sleep 2; echo finished > done.txt; exit 3'\n")
        waited = term.wait(60)
        assert (s.host_workspace / "done.txt").read_text() == "finished\n"
        assert term.last_exit_code == 3 and waited < 60
        term.send_keys("true\n")
        assert term.wait(60) < 60 and term.last_exit_code == 0


def test_local_backend_skips_what_it_cannot_build_or_verify_with_the_reason(tmp_path):
    _task_dir(tmp_path, "apt_build", 'version = "1.0"\n',
              dockerfile="FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get update && apt-get install -y jq\n")
    _task_dir(tmp_path, "image_only", 'schema_version = "1.1"\n[environment]\ndocker_image = "alexgshaw/x:1"\n',
              dockerfile=None)
    _task_dir(tmp_path, "verify_fetch", 'version = "1.0"\n',
              test_sh="#!/bin/bash\ncurl -LsSf https://astral.sh/uv/install.sh | sh\nuvx pytest /tests\n")
    _task_dir(tmp_path, "plain", 'version = "1.0"\n',
              dockerfile="FROM ubuntu:24.04\nWORKDIR /app\nRUN mkdir -p data && echo 1 > data/x\n")
    tasks = {t.id: t.skip_reason for t in TerminalBench2Adapter(root=str(tmp_path), backend="local", agent="tool_calling").tasks()}
    assert tasks["plain"] is None
    assert tasks["apt_build"].startswith("local backend cannot run it: the image build needs root or the network\n")
    assert "Dockerfile:3: RUN uses 'apt-get'" in tasks["apt_build"]
    assert "prebuilt image" in tasks["image_only"] and "alexgshaw/x:1" in tasks["image_only"]
    assert "verifier installs" in tasks["verify_fetch"] and "test.sh:2: uses 'curl'" in tasks["verify_fetch"]


def test_aggregate_says_why_a_run_is_not_comparable():
    from evaluators.terminal_bench import aggregate_rewards
    from unified.types import EpisodeResult

    results = [EpisodeResult(benchmark="terminal_bench_2", task_id="a", trial=0, score=1.0,
                             details={"backend": "local", "network": True, "task_network": True}),
               EpisodeResult(benchmark="terminal_bench_2", task_id="b", trial=0, score=0.0, skipped="no image")]
    agg = aggregate_rewards(results)
    assert agg["comparable"] is False and agg["skipped_tasks"] == ["b"]
    assert agg["not_comparable_because"] == ["local sandbox instead of the task's Docker image"]
    cut = EpisodeResult(benchmark="terminal_bench_2", task_id="c", trial=0, score=1.0,
                        details={"backend": "docker", "network": False, "task_network": True})
    assert aggregate_rewards([cut])["not_comparable_because"] == ["network off for 1 task(s) that have it under Harbor"]
    on = EpisodeResult(benchmark="terminal_bench_2", task_id="c", trial=0, score=1.0,
                       details={"backend": "docker", "network": True, "task_network": True})
    assert aggregate_rewards([on])["comparable"] is True
