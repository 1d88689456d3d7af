"""Terminal trajectories: seeded shell sessions run for real in a throwaway bubblewrap sandbox.

Each trajectory is a small task (keep notes, analyse a log, build a tiny script, tidy a
project) played by a seeded generator of plausible agent behaviour: it explores, creates and
edits files, inspects them, makes the occasional mistake (a missing file, a typo'd command).
Every command line runs in the same sandbox workspace (``/workspace``, no network, resource
limits); each is its own ``sh -c`` process, so state carries over through files only.

The observation is the command's combined output followed by ``[exit code: N]``. To make the
harvest bit-for-bit reproducible, every file's mtime is reset to a fixed instant after each
command, and the generator avoids output that depends on the host's filesystem (directory
sizes, block counts, inode numbers) or on the clock.
"""

from __future__ import annotations

import random
import shlex

from unified.lwm.prompts import build_system_prompt
from unified.lwm.records import AWBRecord, trajectory_records
from unified.sandbox import throwaway_sandbox

FIXED_MTIME = "@1700000000"  # 2023-11-14 22:13:20 UTC
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "river", "stone", "cloud", "ember", "maple", "quartz", "harbor",
          "falcon", "lumen", "cedar", "pixel", "orbit", "tundra", "violet", "copper")
_LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
_ACTION_SPACE = "One POSIX shell command line per turn (pipes, redirections and && allowed), run in /workspace."


def _word(rng: random.Random) -> str:
    return rng.choice(_WORDS)


def _notes_task(rng: random.Random) -> tuple[str, list[str]]:
    name = f"{_word(rng)}_notes.txt"
    items = rng.sample(_WORDS, 5)
    cmds = [
        "ls",
        f"printf '%s\\n' {' '.join(items)} > {name}",
        f"cat {name}",
        f"sort {name} | head -n 3",
        f"grep -n {items[rng.randrange(5)]} {name}",
        f"echo {_word(rng)} >> {name} && wc -l {name}",
        f"cat {name.replace('_notes', '_note')}",
        f"sed -n '2,4p' {name}",
        f"ls -l {name}",
        f"tr a-z A-Z < {name} | tail -n 2",
    ]
    return f"Keep a list of words in {name} and inspect it.", _pick(rng, cmds, fixed=2)


def _log_task(rng: random.Random) -> tuple[str, list[str]]:
    lines = [f"{rng.choice(_LEVELS)} {_word(rng)} took {rng.randint(1, 900)}" for _ in range(rng.randint(6, 10))]
    body = "\\n".join(lines)
    cmds = [
        f"mkdir -p logs && printf '{body}\\n' > logs/app.log",
        "wc -l logs/app.log",
        "grep -c ERROR logs/app.log",
        "cut -d' ' -f1 logs/app.log | sort | uniq -c",
        "awk '{s += $4} END {print s}' logs/app.log",
        "grep WARN logs/app.log | head -n 2",
        "sort -k4 -n logs/app.log | tail -n 1",
        "ls logs",
        "grep -v INFO logs/app.log | wc -l",
        "cat logs/missing.log",
    ]
    return "Analyse the application log logs/app.log (levels, counts, slowest entry).", _pick(rng, cmds, fixed=1)


def _script_task(rng: random.Random) -> tuple[str, list[str]]:
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    fn = rng.choice(("add", "mul", "sub"))
    op = {"add": "+", "mul": "*", "sub": "-"}[fn]
    cmds = [
        f"printf 'import sys\\ndef {fn}(a, b):\\n    return a {op} b\\nprint({fn}(int(sys.argv[1]), int(sys.argv[2])))\\n'"
        " > calc.py",
        "cat calc.py",
        f"python3 calc.py {a} {b}",
        f"python3 calc.py {b}",
        f"python3 -c 'print({a} ** 2 + {b})'",
        f"sed -i 's/{op}/{'+' if op != '+' else '-'}/' calc.py && python3 calc.py {a} {b}",
        "grep -n return calc.py",
        "pyhton3 calc.py 1 2",
        "ls",
        "head -n 2 calc.py",
    ]
    return f"Write a small Python script calc.py that computes {fn}(a, b) and test it.", _pick(rng, cmds, fixed=1)


def _project_task(rng: random.Random) -> tuple[str, list[str]]:
    proj = f"{_word(rng)}-{rng.randint(1, 9)}"
    files = rng.sample(("README.md", "main.py", "util.py", "notes.txt", "data.csv"), 3)
    cmds = [
        f"mkdir -p {proj}/src {proj}/docs",
        f"touch {' '.join(f'{proj}/src/{f}' for f in files)}",
        f"find {proj} -type f | sort",
        f"echo '# {proj}' > {proj}/docs/README.md && cat {proj}/docs/README.md",
        f"mv {proj}/src/{files[0]} {proj}/docs/ && ls {proj}/docs",
        f"cp {proj}/docs/README.md {proj}/README.md && ls {proj}",
        f"rmdir {proj}/src",
        f"ls -R {proj}",
        f"rm {proj}/src/{files[1]} && ls {proj}/src",
        f"test -f {proj}/src/{files[2]} && echo present || echo absent",
    ]
    return f"Lay out a project directory {proj} with src and docs folders.", _pick(rng, cmds, fixed=1)


def _pick(rng: random.Random, cmds: list[str], fixed: int) -> list[str]:
    """Keep the first ``fixed`` set-up commands, then a seeded ordered subset of the rest (3..5)."""
    rest = cmds[fixed:]
    k = min(len(rest), rng.randint(3, 5))
    chosen = sorted(rng.sample(range(len(rest)), k))
    return cmds[:fixed] + [rest[i] for i in chosen]


TASKS = (_notes_task, _log_task, _script_task, _project_task)


def run_session(commands: list[str], timeout_s: float = 10.0) -> list[str]:
    """Run ``commands`` one after another in one fresh sandbox; the observations, in order."""
    observations = []
    reset = f"find . -exec touch -h -d {FIXED_MTIME} {{}} + 2>/dev/null; true"
    with throwaway_sandbox(timeout_s=timeout_s, memory_mb=512, max_processes=256) as box:
        for command in commands:
            res = box.run(["/bin/sh", "-c", "exec 2>&1\n" + command], timeout_s=timeout_s)
            text = res.stdout
            if "Cannot fork" in text or "Resource temporarily unavailable" in text:
                raise RuntimeError(f"sandbox ran out of processes on {command!r}: {text.strip()[:200]}")
            if res.timed_out:
                text += f"[timed out after {timeout_s:g}s]\n"
            if text and not text.endswith("\n"):
                text += "\n"
            observations.append(f"{text}[exit code: {res.exit_code}]")
            box.run(["/bin/sh", "-c", reset])
    return observations


def harvest_terminal(n_trajectories: int, seed: int) -> list[AWBRecord]:
    """``n_trajectories`` seeded shell sessions, every turn a record."""
    records: list[AWBRecord] = []
    for i in range(n_trajectories):
        rng = random.Random(f"terminal:{seed}:{i}")
        task_fn = TASKS[i % len(TASKS)]
        task, commands = task_fn(rng)
        system = build_system_prompt(
            "terminal", task=task, action_space=_ACTION_SPACE,
            initial_state="An empty directory /workspace owned by the user 'agent'; python3 and coreutils installed; "
                          "all file times read 2023-11-14 22:13 UTC.")
        observations = run_session(commands)
        records += trajectory_records("terminal", f"terminal-{seed}-{i:04d}", system, commands, observations)
    return records


def quote(text: str) -> str:
    """Shell-quote (exposed for callers composing commands)."""
    return shlex.quote(text)
