"""The AgentWorldBench record format: one JSONL file per domain, one record per (trajectory, turn).

A record is the world-model sample "history of actions and observations, current action ->
next observation" for turn ``t = turn_idx`` of trajectory ``id``:

============== ============ ==========================================================
field          type         meaning
============== ============ ==========================================================
task           str          domain: mcp, search, terminal, swe, web, os, android
id             int | str    trajectory id (records of one trajectory share it); the
                            published files use integers, kept as they are
system_str     str          system prompt: task, action space, initial state
prompt         list[str]    agent actions: turns 1..t-1 (ours), or 1..t or more
                            (the published files list the trajectory's turns)
response       list[str]    ground-truth observations: turns 1..t or more; entry t-1
                            (0-based) is the target
current_prompt str          the agent's action at turn t
turn_idx       int          t, 1-based
total_turns    int          length T of the trajectory (1 <= t <= T)
============== ============ ==========================================================

The lists are kept exactly as read and indexed the way the official ``eval/eval.py``
(QwenLM/Qwen-AgentWorld) indexes them: history = ``prompt[:t-1]`` paired with
``response[:t-1]``, target = ``response[t-1]``, and the world model's input at turn t is
``prompt[t-1]`` where the list has it, else ``current_prompt``.

What eval.py reads, this reader reads too: a field it does not know (kept in ``extra`` and
written back), a ``task`` with a prefix (``lwm/mcp``: the domain is its last ``/``-part, as
eval.py's ``get_subtask``; the original is kept for eval.py's files), a response list shorter
than ``turn_idx`` (the target is then empty, eval.py's ground truth ``""``), and the same sample
twice (eval.py scores every line: the second is ``task/id/turn#2``). Every other deviation (a
missing field, a wrong type, an unknown domain, invalid JSON) is a :class:`RecordError` naming
file, line and field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from unified.store import write_text_atomic

DOMAINS = ("mcp", "search", "terminal", "swe", "web", "os", "android")
"""The seven AgentWorldBench domains."""

FIELDS = ("task", "id", "system_str", "prompt", "response", "current_prompt", "turn_idx", "total_turns")


class RecordError(ValueError):
    """A record that is not valid AgentWorldBench; the message starts with ``file:line: field``."""

    def __init__(self, source: str, line: int, field: str, problem: str) -> None:
        self.source, self.line, self.field = source, line, field
        super().__init__(f"{source}:{line}: {field}: {problem}")


@dataclass
class AWBRecord:
    """One AgentWorldBench record (see the module docstring for the fields)."""

    task: str
    id: int | str
    system_str: str
    prompt: list[str]
    response: list[str]
    current_prompt: str
    turn_idx: int
    total_turns: int
    source_task: str | None = None
    """The file's ``task`` when it is not the bare domain (``lwm/mcp``); eval.py's files get it back."""
    extra: dict = field(default_factory=dict)
    """Fields eval.py ignores and passes along (kept, written back)."""
    occurrence: int = 1
    """The n-th record of the same ``task/id/turn`` in its file (eval.py scores each)."""

    @property
    def target(self) -> str:
        """The ground-truth observation at turn t (``response[t-1]``; ``""`` when the list is shorter,
        as eval.py's ground truth)."""
        t = self.turn_idx
        return self.response[t - 1] if len(self.response) >= t else ""

    @property
    def history(self) -> list[tuple[str, str]]:
        """(action, observation) pairs of turns 1..t-1."""
        t = self.turn_idx
        return list(zip(self.prompt[:t - 1], self.response[:t - 1]))

    @property
    def action(self) -> str:
        """The world model's input at turn t as eval.py sends it: ``prompt[t-1]`` if the list holds
        turn t (the published layout), else ``current_prompt``."""
        t = self.turn_idx
        return self.prompt[t - 1] if len(self.prompt) >= t else self.current_prompt

    def to_dict(self) -> dict:
        """Every attribute (the dataclass's fields), for ``AWBRecord(**d)``; :meth:`fields` is the file's shape."""
        return asdict(self)

    def fields(self) -> dict:
        """The record as its file has it: the eight fields (``task`` as written there) and any extra ones."""
        out = {name: getattr(self, name) for name in FIELDS}
        if self.source_task is not None:
            out["task"] = self.source_task
        return {**out, **self.extra}

    @property
    def key(self) -> str:
        """Unique sample id: ``task/id/turn`` (``#n`` for the n-th repeat of one in a file)."""
        base = f"{self.task}/{self.id}/{self.turn_idx}"
        return base if self.occurrence == 1 else f"{base}#{self.occurrence}"


def validate_record(data: object, source: str = "<record>", line: int = 0) -> AWBRecord:
    """Check one decoded JSON object and build the record, or raise :class:`RecordError`."""

    def fail(field: str, problem: str) -> RecordError:
        return RecordError(source, line, field, problem)

    if not isinstance(data, dict):
        raise fail("<record>", f"expected a JSON object, got {type(data).__name__}")
    missing = [f for f in FIELDS if f not in data]
    if missing:
        raise fail(missing[0], f"missing (required fields: {', '.join(FIELDS)})")
    for name in ("task", "system_str", "current_prompt"):
        if not isinstance(data[name], str):
            raise fail(name, f"expected a string, got {type(data[name]).__name__}")
    domain = data["task"].split("/")[-1]  # eval.py's get_subtask: "lwm/mcp" -> "mcp"
    if domain not in DOMAINS:
        raise fail("task", f"unknown domain {data['task']!r} (valid: {', '.join(DOMAINS)}, optionally "
                           "after a prefix such as lwm/)")
    traj_id = data["id"]
    if isinstance(traj_id, bool) or not isinstance(traj_id, (int, str)):
        raise fail("id", f"expected a string or an integer, got {type(traj_id).__name__}")
    if traj_id == "":
        raise fail("id", "empty")
    for name in ("prompt", "response"):
        value = data[name]
        if not isinstance(value, list):
            raise fail(name, f"expected a list of strings, got {type(value).__name__}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise fail(f"{name}[{i}]", f"expected a string, got {type(item).__name__}")
    for name in ("turn_idx", "total_turns"):
        if isinstance(data[name], bool) or not isinstance(data[name], int):
            raise fail(name, f"expected an integer, got {data[name]!r}")
    t, total = data["turn_idx"], data["total_turns"]
    if t < 1:
        raise fail("turn_idx", f"must be >= 1 (1-based), got {t}")
    if total < t:
        raise fail("total_turns", f"{total} is smaller than turn_idx {t}")
    if not t - 1 <= len(data["prompt"]) <= total:
        raise fail("prompt", f"expected {t - 1} to {total} actions for turn_idx {t} of {total} turns, "
                             f"got {len(data['prompt'])}")
    if len(data["response"]) > total:
        raise fail("response", f"expected at most {total} observations for {total} turns, got {len(data['response'])}")
    return AWBRecord(task=domain, id=traj_id, system_str=data["system_str"], prompt=list(data["prompt"]),
                     response=list(data["response"]), current_prompt=data["current_prompt"], turn_idx=t,
                     total_turns=total, source_task=None if domain == data["task"] else data["task"],
                     extra={k: v for k, v in data.items() if k not in FIELDS})


def read_records(path: str | os.PathLike[str]) -> list[AWBRecord]:
    """Read and validate one JSONL file (blank lines are skipped; a repeated sample is the next occurrence)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such AgentWorldBench file")
    records: list[AWBRecord] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(str(path), lineno, "<json>", f"invalid JSON: {exc.msg} at column {exc.colno}") \
                    from None
            records.append(validate_record(data, str(path), lineno))
    return _number_repeats(records)


def _number_repeats(records: list[AWBRecord]) -> list[AWBRecord]:
    """Set each record's ``occurrence``: the n-th of its ``task/id/turn`` in ``records``."""
    seen: dict[str, int] = {}
    for record in records:
        base = f"{record.task}/{record.id}/{record.turn_idx}"
        record.occurrence = seen[base] = seen.get(base, 0) + 1
    return records


def data_files(paths_or_dir: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand a file, a directory (its ``*.jsonl``, sorted) or a list of either into files."""
    items = [paths_or_dir] if isinstance(paths_or_dir, (str, os.PathLike)) else list(paths_or_dir)
    files: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise FileNotFoundError(f"{p}: directory has no *.jsonl AgentWorldBench files")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    return files


def load_records(paths_or_dir) -> list[AWBRecord]:
    """All records of :func:`data_files` (``paths_or_dir``), in file then line order."""
    out: list[AWBRecord] = []
    for f in data_files(paths_or_dir):
        out.extend(read_records(f))
    return _number_repeats(out)  # eval.py reads every file's lines: a sample repeated across files is scored twice


def dumps_record(record: AWBRecord) -> str:
    """One canonical JSONL line (stable key order, UTF-8 kept), the form the shipped data uses."""
    return json.dumps(record.fields(), ensure_ascii=False, separators=(",", ":"))


def write_records(path: str | os.PathLike[str], records: Iterable[AWBRecord]) -> int:
    """Write records atomically (:func:`unified.store.write_text_atomic`); returns how many."""
    lines = [dumps_record(record) + "\n" for record in records]
    write_text_atomic(path, "".join(lines))
    return len(lines)


def trajectory_records(task: str, traj_id: int | str, system_str: str, actions: list[str],
                       observations: list[str]) -> list[AWBRecord]:
    """All T records (turns 1..T) of one trajectory."""
    if len(actions) != len(observations) or not actions:
        raise ValueError(f"{task}/{traj_id}: need as many observations as actions (got {len(actions)} actions, "
                         f"{len(observations)} observations)")
    total = len(actions)
    return [AWBRecord(task=task, id=traj_id, system_str=system_str, prompt=list(actions[:t - 1]),
                      response=list(observations[:t]), current_prompt=actions[t - 1], turn_idx=t,
                      total_turns=total) for t in range(1, total + 1)]
