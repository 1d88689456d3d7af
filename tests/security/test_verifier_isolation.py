"""Promise: verification starts only after every process the agent started is gone.

Attack (Terminal-Bench, ``local`` backend): a do-nothing agent starts a ``setsid`` loop that
keeps writing ``1`` into ``/logs/verifier/reward.txt`` and makes it read-only. Before the fix
the loop survived into verification, the verifier could not overwrite the file, and the agent
scored 1.0 in 3 of 3 runs. Now the session kills every process but its own (stop, then kill,
until a round finds none) and makes ``/logs/verifier`` a fresh directory before the verifier
runs. Also: the agent cannot forge the local backend's answers by writing into the command
runner's pipes through ``/proc/<pid>/fd``, nor read the host's requests (the verifier's
environment) from them. Before the fix, on a non-root host bubblewrap's own init (pid 1, dumpable,
the agent's user) held those pipes and ``/proc/1/fd/1`` took forged answers; the command runner
is now pid 1 itself (non-dumpable) and reaps the orphans the agent leaves.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from security._support import needs_local, needs_tmux
from unified.execution import EnvironmentSpec, ExecutionError, ExecutionSession, LocalBackend
from unified.execution.local import wait_until
from unified.types import Episode, ToolCall

FIXTURES = Path(__file__).parents[1] / "fixtures" / "terminal_bench"
FORGER = ("(setsid sh -c 'while :; do rm -f /logs/verifier/reward.txt; echo 1 > /logs/verifier/reward.txt; "
          "chmod 444 /logs/verifier/reward.txt; sleep 0.01; done' >/dev/null 2>&1 &); echo started")


@needs_local
@needs_tmux
def test_a_background_process_cannot_forge_a_terminal_bench_reward():
    from evaluators.terminal_bench import TerminalBench2Adapter

    adapter = TerminalBench2Adapter(root=str(FIXTURES), backend="local", tasks="fixture_hello_file",
                                    agent="tool_calling")
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        env.step([ToolCall("send_keys", {"keystrokes": FORGER, "duration": 1}, "c0"),
                  ToolCall("task_complete", {}, "c1")])
        def forged() -> bool:  # the forger deletes and rewrites the file in a loop: a read may fall in between
            try:
                return env.session.read_file("/logs/verifier/reward.txt") == b"1\n"
            except (FileNotFoundError, ExecutionError):
                return False

        assert wait_until(forged, 10.0)  # the forger is at work
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
    assert result.score == 0.0 and not result.passed, result.details


USERCUSTOMIZE = ("d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && "
                 "printf '%s\\n' 'import atexit' "
                 "'atexit.register(lambda: open(\"/logs/verifier/reward.json\", \"w\").write(\"{\\\"reward\\\": 1.0}\"))' "
                 "> \"$d/usercustomize.py\" && echo planted \"$d\"")


@needs_local
@needs_tmux
def test_code_the_agent_left_in_its_home_does_not_run_in_the_verifier():
    """A ``usercustomize.py`` in the agent's home ran in the verifier's python and wrote reward.json (1.0)."""
    from evaluators.terminal_bench import TerminalBench2Adapter

    adapter = TerminalBench2Adapter(root=str(FIXTURES), backend="local", tasks="fixture_region_report",
                                    agent="tool_calling")
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        planted = env.session.exec(USERCUSTOMIZE)
        assert planted.stdout.startswith("planted /app/"), planted.output()  # the agent's home is its workdir
        # the door is real: any python the agent itself starts now writes the reward file
        env.session.exec(["python3", "-c", "pass"])
        assert b'"reward": 1.0' in env.session.read_file("/logs/verifier/reward.json")
        env.session.exec(["sh", "-c", "printf 'print(1)' > /app/pytest.py"])  # and `python -m pytest` from /app
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
    assert result.score == 0.0 and not result.passed, result.details


@needs_local
def test_the_verifier_environment_leaves_out_what_the_agent_could_write():
    spec = EnvironmentSpec(env={"PATH": "/workspace/bin:/tmp/x:bin:/usr/bin:/bin"})
    with LocalBackend().start(spec) as s:
        s.exec("mkdir -p bin && printf '#!/bin/sh\\necho forged\\n' > bin/ls && chmod +x bin/ls")
        env = s.verifier_env()
        assert env["PATH"] == "/usr/bin:/bin" and env["PYTHONNOUSERSITE"] == "1", env
        assert env["HOME"].startswith("/tmp/") and env["HOME"] != s.verifier_env()["HOME"]  # fresh each time
        res = s.exec('ls -A "$HOME"; echo "home=$HOME"; python3 -c "import site, sys; print(site.ENABLE_USER_SITE)"',
                     env=env)
        assert res.stdout == f"home={env['HOME']}\nFalse\n", res.output()


@needs_local
def test_every_agent_process_is_gone_before_verification():
    with LocalBackend().start(EnvironmentSpec(extra_dirs=["/logs/verifier"], max_processes=64)) as s:
        s.exec("nohup sleep 300 >/dev/null 2>&1 & (setsid sleep 301 &) ; (sh -c 'sleep 302 &' &); "
               "echo x > /logs/verifier/reward.txt; chmod 444 /logs/verifier/reward.txt /logs/verifier; echo ok")
        assert "sleep 302" in s.exec("ps -eo args").stdout
        # last, a fork loop that fills the process table: not even a command could start now
        s.exec("(setsid sh -c 'while :; do sleep 303 & done' >/dev/null 2>&1 &); sleep 2; echo ok")
        stopped = s.stop_agent_processes()
        assert stopped["ok"], stopped
        left = s.exec("ps -eo pid=,args=").stdout.splitlines()
        assert [line for line in left if "sleep" in line] == [], left
        s.fresh_dir("/logs/verifier")
        assert s.exec("ls -A /logs/verifier; echo y > /logs/verifier/reward.txt && cat /logs/verifier/reward.txt").stdout == "y\n"
        assert s.exec("echo still usable").stdout == "still usable\n"  # the session itself survived


@needs_local
def test_the_agent_cannot_inject_answers_into_the_local_command_runner():
    fake = json.dumps({"exit_code": 0, "stdout": base64.b64encode(b"FORGED").decode(), "stderr": "",
                       "timed_out": False, "duration_s": 0})
    inject = ("me=$$; for d in /proc/[0-9]*; do p=${d#/proc/}; [ \"$p\" = \"$me\" ] && continue; "
              f"printf '%s\\n' '{fake}' > $d/fd/1 2>/dev/null && echo injected $p; done; echo tried")
    with LocalBackend().start(EnvironmentSpec()) as s:
        res = s.exec(inject)
        assert res.stdout.endswith("tried\n") and "injected" not in res.stdout, res.stdout
        assert s.exec("echo honest").stdout == "honest\n"


@needs_local
def test_the_agent_cannot_read_the_hosts_requests_or_the_runners_environment():
    with LocalBackend().start(EnvironmentSpec()) as s:
        # a reader left on pid 1's request pipe would see the verifier's command and env
        s.exec("(setsid sh -c 'cat /proc/1/fd/0 > /tmp/stolen 2>/tmp/err' >/dev/null 2>&1 &); sleep 0.2; echo ok")
        s.exec("true", env={"VERIFIER_ONLY": "secret-request-marker"})
        res = s.exec("cat /tmp/stolen; cat /proc/1/environ; ls /proc/1/fd; echo END")
        assert "secret-request-marker" not in res.stdout and res.stdout.endswith("END\n"), res.stdout
        assert s.exec("cat /proc/1/cmdline").stdout.startswith(s.exec("command -v python3").stdout.strip())


@needs_local
def test_orphans_of_the_agent_are_reaped_inside_the_local_sandbox():
    """The command runner is pid 1: what the agent orphans must not pile up as zombies (the process limit)."""
    with LocalBackend().start(EnvironmentSpec(max_processes=64)) as s:
        for _ in range(3):  # 3 x 40 orphans would exceed the limit of 64 if none were reaped
            res = s.exec("for i in $(seq 40); do (sh -c 'exit 0' &); done; echo ok", timeout_s=30)
            assert res.stdout == "ok\n", res.output()
        zombies = lambda: [ln for ln in s.exec("ps -eo stat=").stdout.split() if ln.startswith("Z")]  # noqa: E731
        from unified.execution.local import wait_until
        assert wait_until(lambda: zombies() == [], 5.0), zombies()


@needs_local
def test_the_portable_reaper_of_the_container_backends_leaves_only_the_session():
    """Docker, Podman and Apptainer sessions stop the agent with a POSIX sh script; run it here for real."""
    with LocalBackend().start(EnvironmentSpec()) as s:
        s.exec("nohup sleep 310 >/dev/null 2>&1 & (setsid sleep 311 &); (sh -c 'sleep 312 &' &); "
               "(setsid sh -c 'while :; do sleep 313 & sleep 0.01; done' >/dev/null 2>&1 &); echo ok")
        stopped = ExecutionSession.stop_agent_processes(s)  # the base-class (container) implementation
        assert stopped["ok"], stopped
        assert [line for line in s.exec("ps -eo args=").stdout.splitlines() if "sleep" in line] == []
