"""The contract between benchmarks, the agent loop and the eval runner.

``unified.agent`` (the loop), ``unified.eval`` (the runner, reports) and every adapter import this
module; it imports none of them (``tests/test_import_graph.py`` checks the floors). A benchmark is a package whose
entry point (group ``unified.benchmarks``) names a factory of an :class:`Adapter`::

    [project.entry-points."unified.benchmarks"]
    bfcl_v4 = "evaluators.bfcl_v4:BFCLAdapter"

``docs/adapters.md`` walks through a whole outside adapter package (the one under
``tests/outside_adapter/``). In short, an adapter answers four questions:

``tasks(split, limit) -> list[Task]``
    Which tasks, read from the benchmark's own files. A missing source raises
    :class:`BenchmarkUnavailable` ``(reason, how_to_fix)``: the runner prints one line and records
    the benchmark as skipped (never a traceback, never a fake 0). One task that cannot run here
    (no API key ...) gets ``Task.skip_reason``.
``open(task, *, run) -> Environment``
    A context manager that starts what the task needs and always stops it (also on errors and
    Ctrl-C): the tools, the system prompt, an optional assistant greeting, the first user
    message, ``step(tool_calls, message)`` (one Observation per call, in call order; ``message``
    is the assistant turn that made the calls) and ``next_user_turn(episode)`` for follow-up user
    turns (BFCL multi-turn, simulated users). ``tools`` may change between user turns.
``score(task, episode, env) -> EpisodeResult``
    The benchmark's official per-episode metric, called after the episode ends and *before* the
    environment is closed (it may read the final state).
``aggregate(results, *, run) -> dict``
    The official aggregate. It holds a float under ``"score"`` (named in ``"metric"``);
    ``"comparable"`` (bool) and ``"not_comparable_because"`` (list of str) say whether the number
    can stand next to the paper's; anything else is free-form.

``run`` is the :class:`RunContext` of the eval the call is part of: ``run.work_dir`` (a
per-benchmark directory in the run's output for state that outlives one episode and survives a
resume) and ``run.runs`` (the trials per task the run asked for, so ``aggregate`` counts a missing
trial as the protocol does). Outside a run (a test, a harvest) it is ``RunContext()``: no work
directory, the protocol's ``runs_default``.

and declares, as class attributes, what the runner and the rest of the library need to know:

- ``name``: the registered name; ``suites``: the suites it joins (``ood``, ``in_domain``, or any
  new name: ``--suite NAME`` runs every installed adapter declaring it; ``all`` is ``in_domain`` +
  ``ood``, outside adapters declaring those included, a new suite name only when asked for);
- ``world_model_domain``: the AgentWorldBench domain its episodes harvest into (``terminal``,
  ``swe``, ``mcp``, ``search``, ...), or None;
- ``suite_position``: where it stands in its suites' lists and tables (lower first, then by name);
- ``paper_reference``: a :class:`PaperReference` (published numbers the report prints beside ours), or None;
- ``runs_default``: the trials per task its protocol asks for (``--runs`` overrides);
- ``Config``: a dataclass of its settings (``--set benchmarks.NAME.KEY=VALUE`` or a recipe's
  ``benchmark_config``), checked strictly: an unknown key is an error saying "did you mean";
- ``agent_limits(limits)``: the per-episode limits its protocol fixes (step budgets ...).

Adapters never see the prompting module or the policy: those belong to the agent loop, so any
adapter runs under any ``--prompting``.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from unified.benchmarks.compat import (accept_renamed_fields, renamed_members_meta, signature_takes,
                                       warn_deprecated)
from unified.benchmarks.aggregate import mean_score
from unified.config import bounded, from_dict
from unified.types import Episode, EpisodeResult, Message, Observation, Record, ToolCall, ToolSpec

ENTRY_POINT_GROUP = "unified.benchmarks"
SCORING_FAILED_AFTER_AGENT = "scoring_failed_after_agent"
"""``EpisodeResult.details["status"]`` of an episode whose scoring raised after the agent acted: it scores 0 and
is counted (never left out of the aggregate; :func:`unified.agent.workers.scoring_failed_result`)."""
"""The entry-point group benchmark packages register their adapter factory under."""


class StopReason(str, enum.Enum, metaclass=renamed_members_meta(enum.EnumMeta)):
    """Why an episode ended (``Episode.stop_reason``; stored as the plain string value). ``MAX_TOKENS``
    (SDK 0.1) still answers ``MAX_EPISODE_TOKENS`` until SDK 0.3, with a deprecation line."""

    ANSWER = "answer"
    """The agent answered without tool calls and the environment had no further user turn."""
    ENV_DONE = "env_done"
    """The environment declared the task over (``Environment.done``) after a step."""
    MAX_TURNS = "max_turns"
    """``AgentLimits.max_turns`` policy calls were made."""
    MAX_STEPS_PER_TURN = "max_steps_per_turn"
    """``AgentLimits.max_steps_per_turn`` policy calls within one user turn."""
    MAX_EPISODE_TOKENS = "max_episode_tokens"
    """``AgentLimits.max_episode_tokens`` tokens were generated in the episode (stored runs from
    before this name say ``max_tokens``; they load as this member)."""
    TIMEOUT = "timeout"
    """``AgentLimits.max_seconds`` of wall time passed (generation is cut at the deadline too)."""
    CONTEXT_FULL = "context_full"
    """The conversation no longer fit the model's context window (the server said so before generating):
    a limit of the model, so the episode is scored as it stands, like ``max_turns``."""
    ERROR = "error"
    """Something raised while running the episode; the traceback is in ``Episode.error``."""
    SKIPPED = "skipped"
    """The task could not run here (``Task.skip_reason``); the episode has no steps."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> "StopReason | None":
        return {"max_tokens": cls.MAX_EPISODE_TOKENS}.get(value)  # type: ignore[arg-type]


StopReason._RENAMED_MEMBERS_TABLE = {"MAX_TOKENS": "MAX_EPISODE_TOKENS"}  # type: ignore[attr-defined]


@accept_renamed_fields
@dataclass
class AgentLimits:
    """Per-episode limits; hitting one ends the episode with the :class:`StopReason` of the same name
    (``max_seconds``: ``timeout``). Each is also a flag of ``python -m unified.eval``
    (``--max-turns``, ``--max-steps-per-turn``, ``--max-episode-tokens``, ``--max-seconds``) and a key
    of a recipe's ``limits`` section. The SDK 0.1 names (:attr:`RENAMED`) still build, read and
    ``dataclasses.replace`` until SDK 0.3, with a deprecation line; another unknown name is a TypeError
    naming it."""

    max_turns: int = bounded(40, ge=1)
    """Policy calls per episode."""
    max_steps_per_turn: int = bounded(20, ge=1)
    """Policy calls within one user turn (BFCL's MAXIMUM_STEP_LIMIT is 20)."""
    max_episode_tokens: int = bounded(32768, ge=1)
    """Generated tokens per episode."""
    max_seconds: float = bounded(3600.0, gt=0)
    """Wall time per episode (stop reason ``timeout``)."""

    RENAMED: ClassVar[dict[str, str]] = {"max_steps_per_user_turn": "max_steps_per_turn",
                                         "max_completion_tokens": "max_episode_tokens"}
    """SDK 0.1 field -> today's (recipes and stored records load through it too: ``unified.config``)."""


class BenchmarkUnavailable(RuntimeError):
    """A benchmark (or its data) that cannot run here; recorded as a skip, not an error.

    ``reason`` says why in one line, ``how_to_fix`` what to install, clone or set.
    """

    def __init__(self, reason: str, how_to_fix: str = "") -> None:
        self.reason, self.how_to_fix = reason, how_to_fix
        super().__init__(f"{reason}" + (f" ({how_to_fix})" if how_to_fix else ""))

    def line(self, name: str) -> str:
        """The one line the runner prints."""
        fix = f" -> {self.how_to_fix}" if self.how_to_fix else ""
        return f"{name}: skipped: {self.reason}{fix}"


class TaskFormatError(ValueError):
    """A benchmark file that does not have the shape the adapter expects: names the file and field."""


TASK_ID_MAX_CHARS = 200
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+=,-]*")


def task_id_problem(task_id: Any) -> str | None:
    """Why ``task_id`` cannot be a task id (None when it can).

    A task id names record keys, log lines and, in adapters, scratch directories, so it is text of
    1..200 characters from ``A-Z a-z 0-9 _ . : @ + = , -``, starting with a letter or digit: no
    path separator, no ``..``, no whitespace or control character."""
    if not isinstance(task_id, str):
        return f"a task id must be text, not {type(task_id).__name__}"
    if not 0 < len(task_id) <= TASK_ID_MAX_CHARS:
        return f"task id has {len(task_id)} characters (1..{TASK_ID_MAX_CHARS} allowed)"
    if not _TASK_ID.fullmatch(task_id) or ".." in task_id:
        return (f"task id {task_id[:80]!r} may only hold A-Z a-z 0-9 _ . : @ + = , - (starting with a letter or "
                "digit; no '/', '\\', '..' or whitespace)")
    return None


def check_task_id(task_id: Any, where: str) -> str:
    """``task_id`` when it is a valid task id, else :class:`TaskFormatError` naming ``where``."""
    problem = task_id_problem(task_id)
    if problem:
        raise TaskFormatError(f"{where}: {problem}")
    return task_id


def check_task_ids(tasks: list[Task], where: str) -> None:
    """Every id valid (:func:`task_id_problem`) and none twice (a second task with an id would share
    the first one's results and silently replace them), else :class:`TaskFormatError` naming
    ``where`` (the benchmark or the file)."""
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        check_task_id(task.id, f"{where}: task {index}")
        if task.id in seen:
            raise TaskFormatError(f"{where}: task id {task.id!r} appears more than once; each task needs its own id")
        seen.add(task.id)


@dataclass
class Task(Record):
    """One benchmark task, as the adapter read it."""

    id: str
    """The benchmark's own task id (unique within the benchmark)."""
    benchmark: str
    """Adapter name, e.g. ``bfcl_v4``."""
    split: str = ""
    """Split or category the task belongs to (e.g. ``multi_turn_base``)."""
    payload: dict[str, Any] = field(default_factory=dict)
    """Everything the adapter needs to open and score the task (JSON-serialisable)."""
    skip_reason: str | None = None
    """Set when this task cannot run here (missing API key ...): recorded as a skip."""
    group: str = ""
    """Optional coarser group (e.g. BFCL ``multi_turn``) for aggregation."""
    depends_on: list[str] = field(default_factory=list)
    """Ids of tasks that must finish first (BFCL memory questions need the memory-writing
    conversations of their scenario). The runner schedules them first; a dependency that is
    not part of the run is ignored."""
    scored: bool = True
    """False for tasks that only prepare state for others (they are run and recorded, but
    ``aggregate`` leaves them out)."""


class Environment:
    """One task's world, as a context manager: ``start`` on enter, ``stop`` always on exit.

    Subclasses set ``tools``, ``system_prompt`` and ``first_user_message`` (in ``__init__`` or
    ``start``) and implement ``step``. ``stop`` must be idempotent and must not raise.

    Threading: the agent loop calls ``step``, ``next_user_turn`` and the adapter's ``score`` of
    one episode on worker threads, never two of them at once for the same environment, so a
    slow tool, simulated user or judge holds back only its own episode.
    """

    tools: list[ToolSpec]
    system_prompt: str
    first_user_message: str
    malformed_call_ends_turn: ClassVar[bool] = False
    """When every call of a step is malformed, the user turn ends there (``next_user_turn``)
    instead of the agent seeing parse errors and trying again: bfcl's inference handlers do
    this (a response with nothing decodable ends the turn)."""
    steps_unoffered_calls: ClassVar[bool] = False
    """Well-formed calls to names that are not among ``tools`` go to ``step`` too (which must
    answer each one), instead of the agent loop answering "no tool named ...": bfcl executes
    every call and records the error itself."""

    def __init__(self) -> None:
        self.tools = []
        self.system_prompt = ""
        self.first_user_message = ""
        self.assistant_greeting: str | None = None
        """An assistant message placed before the first user message (tau2-bench's agents open
        with a greeting); None: the conversation starts with the user."""
        self.done = False
        """Set by the environment when the task is over (the agent loop then stops)."""
        self.metadata: dict[str, Any] = {}
        """Run facts recorded into Episode.metadata (e.g. ``sandbox``: ``bwrap``/``docker``)."""

    def start(self) -> None:
        """Start services, sandboxes, containers. Default: nothing."""

    def stop(self) -> None:
        """Stop everything ``start`` started. Default: nothing. Must not raise."""

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        """Execute every call (none dropped), return one Observation per call, in order.

        ``message`` is the assistant turn that made the calls (its visible text, reasoning and
        every call, malformed ones included); environments that judge or answer the text too
        (a simulated user reading the agent's words) use it, the others ignore it. A call with
        ``parse_error`` set, or naming an unknown tool, must give an error Observation
        (``is_error=True``) rather than raise.
        """
        raise NotImplementedError

    def next_user_turn(self, episode: Episode) -> str | None:
        """The next user message once the agent answered without tool calls, or None when done."""
        return None

    def policy_messages(self, messages: list[Message]) -> list[Message]:
        """The conversation the policy is asked with next, given the episode's (``messages``, not to be
        mutated). Default: the episode's. An environment that manages the agent's context itself
        returns its own (harbor's Terminus-2 asks with its own history, which its summarisation
        replaces); the episode still records every turn."""
        return messages

    def __enter__(self) -> "Environment":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


@dataclass(frozen=True)
class PaperReference:
    """Published numbers of the study for a benchmark, printed beside a run's score (never mixed in)."""

    label: str
    """How the study names the benchmark and its protocol, e.g. ``"Claw-Eval (Avg@3)"``."""
    sft: float
    """The SFT checkpoint's score (same unit as the adapter's ``aggregate()["score"]``)."""
    lwm_rl: float
    """The score after the world-model RL warmup (+LWM RL)."""
    source: str = "Qwen-AgentWorld report, Paradigm II"
    """Where the numbers come from."""


@dataclass(frozen=True)
class RunContext:
    """What the runner tells an adapter about the eval run a call belongs to (``open``, ``aggregate``)."""

    work_dir: Path | None = None
    """A per-benchmark directory inside the run's output for state that must outlive one episode
    (and survive a resume), e.g. BFCL memory snapshots; None outside a run."""
    runs: int | None = None
    """Trials per task this run asked for (``--runs``, else ``runs_default``); None outside a run."""
    sampling: Any = None
    """The run's policy decoding (a :class:`unified.inference.base.SamplingConfig`); None outside a run."""
    policy_backend: str | None = None
    """The policy's backend name (``openai``, ``vllm``, ``hf``, ``gold``); None outside a run."""

    def trials(self, adapter: "Adapter") -> int:
        """The trials per task to aggregate over: the run's, else the adapter's protocol."""
        return int(self.runs or adapter.runs_default)


def with_run(adapter: "Adapter", method: str, *args: Any, run: RunContext) -> Any:
    """``adapter.<method>(*args, run=run)`` (``open`` or ``aggregate``). An adapter written for SDK 0.1
    (a method without ``run``) still works until SDK 0.3: it gets ``work_dir`` / ``runs_requested`` set
    as attributes, with a deprecation line pointing at the method."""
    bound = getattr(adapter, method)
    if signature_takes(bound, "run"):
        return bound(*args, run=run)
    code = getattr(getattr(bound, "__func__", bound), "__code__", None)
    where = (code.co_filename, code.co_firstlineno) if code else None
    warn_deprecated(f"{type(adapter).__name__}.{method}() takes no `run` (adapter SDK 0.1; removed in SDK 0.3): "
                    f"declare `def {method}(self, ..., *, run: RunContext = RunContext())` and read run.work_dir / "
                    "run.runs (or run.trials(self)) instead of self.work_dir / self.runs_requested", where)
    adapter.work_dir, adapter.runs_requested = run.work_dir, run.runs  # type: ignore[attr-defined]
    return bound(*args)


@dataclass
class NoConfig:
    """The settings of an adapter that takes none (any key is an unknown-key error)."""


class Adapter:
    """Base class of benchmark adapters (see the module docstring for the contract)."""

    name: ClassVar[str] = ""
    suites: ClassVar[tuple[str, ...]] = ()
    """Suites this benchmark belongs to (``--suite NAME``)."""
    suite_position: ClassVar[int] = 100
    """Order within a suite (lower first, ties by name): the study's benchmarks take 1-7 in the paper's
    order, so an outside adapter with the default comes after them."""
    world_model_domain: ClassVar[str | None] = None
    """AgentWorldBench domain its episodes harvest into (``python -m unified.lwm.harvest``): one of
    :data:`unified.lwm.records.DOMAINS` (``mcp``, ``search``, ``terminal``, ``swe``, ...), or None."""
    paper_reference: ClassVar[PaperReference | None] = None
    """The study's published numbers for this benchmark (the report shows them beside ours), or None."""
    runs_default: ClassVar[int] = 1
    """Rollouts per task the benchmark's protocol asks for (Claw-Eval Avg@3: 3); ``--runs`` overrides."""
    Config: ClassVar[type] = NoConfig
    """The dataclass of this adapter's settings; ``self.settings`` holds the parsed instance."""
    replay: str | None = None
    """The replayer answering this run's episodes instead of a model (``"gold"`` for ``--model gold``;
    None: a model). The runner sets it before ``tasks()``: nothing generates, so an adapter may run
    without what only a model's actions reach (WideSearch's search backend) and say so."""

    def __init__(self, **config: Any) -> None:
        if "settings" in vars(self):  # a second run would silently put every setting back to its default
            raise TypeError(f"{type(self).__name__}: Adapter.__init__ ran a second time on a built adapter, which would "
                            "reset its settings to the defaults (a `super().__init__()` in `open`? That is the "
                            "Adapter's; the Environment's `super().__init__()` goes in the Environment subclass's "
                            "own `__init__`, see docs/adapters.md)")
        self.settings = from_dict(self.Config, dict(config), where=f"benchmarks.{self.name or type(self).__name__}")
        self.config = {f.name: getattr(self.settings, f.name) for f in dataclasses.fields(self.settings)}
        """The parsed settings as a plain dict (the run records it in ``summary.json``, ``settings``)."""

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        raise NotImplementedError

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        raise NotImplementedError

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        raise NotImplementedError

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        """Default: mean score in percent over scored (not skipped, not crashed-as-skip) results
        (:func:`unified.benchmarks.aggregate.mean_score`; a summary recomputes it without the adapter)."""
        return mean_score(results)

    @classmethod
    def sent_request_settings(cls, config: dict[str, Any], sampling: Any) -> dict[str, Any]:
        """The sampling fields this benchmark's agent puts in each policy request, given the adapter's
        ``config`` (the ``--set`` settings) and the run's ``sampling`` (recorded in run.json and
        identity.json as ``sent``). Default: our agent loop's request, the run's sampling as is; an
        adapter whose agent is another client (harbor's Terminus-2) says what that client sends."""
        if sampling is None:
            return {}
        return {"max_tokens": sampling.max_new_tokens, "temperature": sampling.temperature,
                "top_p": sampling.top_p, "thinking": sampling.thinking,
                "source": "the eval's sampling, sent by our agent loop"}

    def agent_limits(self, limits: AgentLimits) -> AgentLimits:
        """The limits this benchmark runs under, given the run's. Default: the run's; an adapter
        whose protocol fixes its own (BFCL's step limit) returns those."""
        return limits

    work_dir: ClassVar[Path | None] = None
    """Deprecated (SDK 0.1): set only on an adapter whose ``open``/``aggregate`` take no ``run``; use ``run.work_dir``."""
    runs_requested: ClassVar[int | None] = None
    """Deprecated (SDK 0.1): set only on an adapter whose ``open``/``aggregate`` take no ``run``; use ``run.runs``."""

    # Optional: the ground-truth actions, replayed by ``--model gold`` to verify an adapter.
    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        """Per user turn, the calls a perfect agent makes (then it answers). Optional."""
        raise NotImplementedError(f"{self.name or type(self).__name__} has no ground truth to replay")

    def gold_answer(self, task: Task) -> str | None:
        """The final answer text a perfect agent gives, where the benchmark scores text. Optional."""
        return None
