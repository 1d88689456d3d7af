"""AgentWorldBench's own judge, loaded at run time from a checkout of QwenLM/Qwen-AgentWorld.

Nothing of the benchmark is copied here. With a checkout (``$AGENTWORLD_ROOT`` or a path
argument), :func:`load_checkout` imports its ``eval/eval.py`` (and through it
``eval/lwm_eval_utils``) under a private module name and reads ``prompts/<domain>/
judge_system_prompt.txt`` with the checkout's own loader. What we then call is theirs:

- ``build_judge_messages(job, model_output, judge_system_prompts)``: the domain's judge system
  prompt and the ``JUDGE_USER_PROMPT`` template (context, current turn, prediction, ground
  truth, response markers removed);
- ``parse_model_output(gen, response_tag)``: think tags removed, the last
  ``<predicted_observation>`` block (tags of ``TASK_CONFIGS``);
- ``parse_judge_output(raw, response_tag)``: the ``<final_evaluation>`` JSON, its per-sample
  ``total_score`` = mean of the non-zero dimensions (each clamped to 1..5);
- the defaults of ``run_inference`` / ``run_judge`` (max_tokens, temperature, max_retries),
  read from their signatures.

:func:`judge_with_retries` asks a :class:`unified.inference.judge.Judge` for the raw answers
(reasoning kept: the official parser removes it itself) and gives each request up to
``max_retries`` attempts, as eval.py's ``run_judge`` does: an attempt whose call fails or whose
answer does not parse is followed by the next one; after the last the sample has failed. Each
attempt has its own cache key, so a rerun replays the same answers.

:class:`AgentWorldJudgeReward` is the same judge as a warmup reward (the recipe entry
``agentworld_rubric`` of :mod:`unified.rewards.entries`): for a completion whose judge answer parses with total t in [1, 5]

    r = 5 * t  in [5, 25]          (0 when every attempt failed, or the completion is empty)

the scale of :class:`unified.rewards.functions.RubricReward`, so the paper's 0.9 / 0.1 mix with
the rule reward keeps its meaning.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from unified.chatformat.observation import completion_text
from unified.inference import PolicyRequest
from unified.inference.judge import Judge
from unified.rewards.functions import RewardFunction, _column, _prompt_parts
from unified.types import RewardBreakdown

ROOT_ENV = "AGENTWORLD_ROOT"
"""Environment variable naming the checkout (``git clone https://github.com/QwenLM/Qwen-AgentWorld``)."""
EVAL_SCRIPT = "eval/eval.py"
CHECKOUT_FILES = (EVAL_SCRIPT, "eval/lwm_eval_utils/__init__.py", "eval/lwm_eval_utils/task_configs.py",
                  "eval/lwm_eval_utils/judge_parser.py", "eval/lwm_eval_utils/output_parser.py")
"""What a checkout must hold (fingerprinted in the results)."""
EVAL_PY_REQUEST_FIELDS = ("max_tokens", "temperature")
"""The sampling fields of eval.py's requests besides ``model`` and ``messages`` (its
``client.chat.completions.create`` calls in ``run_inference`` and ``run_judge``): no ``top_p``,
no ``seed``, no ``chat_template_kwargs`` (the served template's own thinking default applies)."""
EVAL_PY_TIMEOUT_S = 600.0
"""eval.py builds ``OpenAI(base_url, api_key)`` with no timeout: the SDK's default, 600 s a request."""
EVAL_PY_HTTP_RETRIES = 2
"""... and no ``max_retries``: the SDK's default, 2 retries of a connection error, 408/409/429 or 5xx."""


def normalise(raw: float) -> float:
    """A 1-5 judge score on eval.py's reporting scale: ``(raw - 1) / 4 * 100``."""
    return (raw - 1.0) / 4.0 * 100.0


@dataclass(frozen=True)
class OfficialDefaults:
    """eval.py's defaults, read from the signatures of its ``run_inference`` and ``run_judge``."""

    infer_max_tokens: int
    infer_temperature: float
    judge_max_tokens: int
    judge_temperature: float
    judge_max_retries: int
    request_fields: tuple[str, ...] = EVAL_PY_REQUEST_FIELDS
    """The keyword arguments of eval.py's ``chat.completions.create`` calls besides model and messages
    (read from its source; :data:`EVAL_PY_REQUEST_FIELDS` is what the checkout we know has)."""


@dataclass
class AgentWorldCheckout:
    """A loaded checkout: the imported eval.py and what it reads from the checkout's files."""

    root: Path
    eval_module: ModuleType
    judge_system_prompts: dict[str, str]
    commit: str | None = None
    """``git rev-parse HEAD`` of the checkout (None: not a git work tree)."""
    fingerprint: str = ""
    """sha256 over :data:`CHECKOUT_FILES` and the judge prompt files, for the results."""
    defaults: OfficialDefaults = field(default=None)  # type: ignore[assignment]

    @property
    def dimensions(self) -> list[str]:
        return list(self.eval_module.SCORE_DIMENSIONS)

    def subtask(self, job: dict[str, Any]) -> str:
        return self.eval_module.get_subtask(job)

    def task_config(self, subtask: str) -> dict[str, Any]:
        configs = self.eval_module.TASK_CONFIGS
        return configs.get(subtask, configs["mcp"])  # eval.py's run_judge falls back the same way

    def parse_prediction(self, gen: str, subtask: str) -> str:
        """The prediction eval.py hands its judge (its ``parse_model_output``)."""
        tag = self.task_config(subtask).get("response_tag", "predicted_observation")
        return self.eval_module.parse_model_output(gen, tag)

    def judge_messages(self, job: dict[str, Any], model_output: str) -> list[dict[str, str]]:
        """eval.py's ``build_judge_messages`` for one job (a record's fields)."""
        return self.eval_module.build_judge_messages(job, model_output, self.judge_system_prompts)

    def parse_judge(self, raw: str, subtask: str) -> dict[str, Any]:
        """eval.py's ``parse_judge_output`` (``success``, ``scores``, ``total_score``, ...)."""
        tag = self.task_config(subtask).get("judge_response_tag", "final_evaluation")
        return self.eval_module.parse_judge_output(raw, response_tag=tag)

    def describe(self) -> str:
        return f"QwenLM/Qwen-AgentWorld eval/eval.py at {self.root} (commit {self.commit or 'unknown'})"


_LOADED: dict[str, AgentWorldCheckout] = {}
_LOCK = threading.Lock()


def checkout_root(root: str | os.PathLike[str] | None = None) -> Path | None:
    """``root``, else ``$AGENTWORLD_ROOT``, else None."""
    raw = str(root) if root else os.environ.get(ROOT_ENV, "")
    return Path(raw).expanduser().resolve() if raw else None


def load_checkout(root: str | os.PathLike[str] | None = None, *, required: bool = False) -> AgentWorldCheckout | None:
    """The checkout at ``root`` (else ``$AGENTWORLD_ROOT``), loaded once per process; None without one
    (an error when ``required``). A path that is not a checkout is an error naming the missing file."""
    path = checkout_root(root)
    if path is None:
        if required:
            raise FileNotFoundError(f"no Qwen-AgentWorld checkout: set ${ROOT_ENV} (or agentworld_root) to a clone of "
                                    "https://github.com/QwenLM/Qwen-AgentWorld")
        return None
    with _LOCK:
        if str(path) not in _LOADED:
            _LOADED[str(path)] = _load(path)
        return _LOADED[str(path)]


def _load(root: Path) -> AgentWorldCheckout:
    missing = [f for f in CHECKOUT_FILES if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{root} is not a Qwen-AgentWorld checkout: {missing[0]} is missing "
                                f"(git clone https://github.com/QwenLM/Qwen-AgentWorld and point ${ROOT_ENV} at it)")
    module = _import_eval_script(root)
    prompts = dict(module.load_judge_system_prompts())
    empty = sorted(d for d, text in prompts.items() if not text.strip())
    if empty:
        raise FileNotFoundError(f"{root}: no judge system prompt for {', '.join(empty)} "
                                "(prompts/<domain>/judge_system_prompt.txt)")
    digest = hashlib.sha256()
    for name in CHECKOUT_FILES:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes())
    for domain in sorted(prompts):
        digest.update(domain.encode() + b"\0" + prompts[domain].encode())
    return AgentWorldCheckout(root=root, eval_module=module, judge_system_prompts=prompts, commit=_git_commit(root),
                              fingerprint=digest.hexdigest(), defaults=_defaults(module, root))


def _import_eval_script(root: Path) -> ModuleType:
    """Import ``eval/eval.py`` as a private module; its ``logging.basicConfig`` is undone."""
    eval_dir = str(root / "eval")
    name = "_agentworld_eval_" + hashlib.sha256(str(root).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, root / EVAL_SCRIPT)
    if spec is None or spec.loader is None:
        raise ImportError(f"{root / EVAL_SCRIPT}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    logger = logging.getLogger()
    handlers, level = list(logger.handlers), logger.level
    for loaded in [m for m in sys.modules if m == "lwm_eval_utils" or m.startswith("lwm_eval_utils.")]:
        del sys.modules[loaded]  # another checkout's helpers: this eval.py must import its own
    sys.path.insert(0, eval_dir)  # eval.py imports its helpers as the top-level package lwm_eval_utils
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise ImportError(f"{root / EVAL_SCRIPT}: {exc} (eval.py needs the `openai` package: pip install openai)") \
            from exc
    finally:
        sys.path.remove(eval_dir)
        logger.handlers[:], logger.level = handlers, level
    for needed in ("build_judge_messages", "get_subtask", "run_judge", "run_inference", "parse_judge_output",
                   "parse_model_output", "load_judge_system_prompts", "TASK_CONFIGS", "SCORE_DIMENSIONS"):
        if not hasattr(module, needed):
            raise ImportError(f"{root / EVAL_SCRIPT}: no {needed} (an eval.py this library does not know)")
    return module


def _defaults(module: ModuleType, root: Path) -> OfficialDefaults:
    def default(function: str, parameter: str) -> Any:
        value = inspect.signature(getattr(module, function)).parameters[parameter].default
        if value is inspect.Parameter.empty:
            raise ValueError(f"{root / EVAL_SCRIPT}: {function}({parameter}) has no default")
        return value

    return OfficialDefaults(infer_max_tokens=int(default("run_inference", "max_tokens")),
                            infer_temperature=float(default("run_inference", "temperature")),
                            judge_max_tokens=int(default("run_judge", "max_tokens")),
                            judge_temperature=float(default("run_judge", "temperature")),
                            judge_max_retries=int(default("run_judge", "max_retries")),
                            request_fields=_request_fields(root))


def _request_fields(root: Path) -> tuple[str, ...]:
    """The keyword names of every ``....create(...)`` call in eval.py, without model and messages: the
    body its OpenAI client sends (one set for all calls, else an error naming them)."""
    tree = ast.parse((root / EVAL_SCRIPT).read_text(encoding="utf-8"))
    found = {tuple(sorted(k.arg for k in node.keywords if k.arg not in ("model", "messages")))
             for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "create"}
    if len(found) != 1:
        raise ValueError(f"{root / EVAL_SCRIPT}: expected one request body in its .create() calls, found "
                         f"{sorted(found) or 'none'} (an eval.py this library does not know)")
    return found.pop()


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != root:
        return None  # not a work tree of its own (an unpacked archive, or a folder inside another repository)
    return lines[1]


class RawJudge(Judge):
    """A :class:`Judge` whose answers keep their reasoning (the official parser removes think tags itself)."""

    def answer(self, requests: list[list[dict[str, str]]]) -> list[str | Exception]:
        batch = [PolicyRequest(messages=list(m), max_new_tokens=self.max_tokens, temperature=self.temperature,
                               thinking=self.thinking) for m in requests]
        outputs = self.model.generate(batch) if batch else []
        return [o if isinstance(o, Exception) else o.prefix + o.text for o in outputs]


@dataclass
class OfficialVerdict:
    """One sample's judgement after up to ``max_retries`` attempts."""

    success: bool
    parsed: dict[str, Any]
    """The last parse of eval.py's ``parse_judge_output`` (empty when no attempt got an answer)."""
    attempts: int
    error: str = ""

    @property
    def total_score(self) -> float:
        return float(self.parsed.get("total_score", 0.0)) if self.success else 0.0


def judge_with_retries(checkout: AgentWorldCheckout, judge: Judge, requests: list[tuple[list[dict[str, str]], str]],
                       *, max_retries: int) -> tuple[list[OfficialVerdict], int]:
    """Judge ``(messages, subtask)`` requests as eval.py's ``run_judge`` does; returns the verdicts and
    how many requests reached the model (cache misses)."""
    verdicts = [OfficialVerdict(success=False, parsed={}, attempts=0, error="no attempt") for _ in requests]
    pending, calls = list(range(len(requests))), 0
    for attempt in range(max_retries):
        if not pending:
            break
        asked = RawJudge(judge.model, name=f"{judge.name}|agentworld-raw|attempt={attempt + 1}",
                         max_tokens=judge.max_tokens, temperature=judge.temperature, thinking=judge.thinking,
                         cache=judge.cache)
        answers = asked.complete([requests[i][0] for i in pending])
        calls += asked.calls
        still = []
        for i, (answer, _cached) in zip(pending, answers):
            verdict = verdicts[i]
            verdict.attempts = attempt + 1
            if isinstance(answer, Exception):
                verdict.error = f"judge call failed: {type(answer).__name__}: {answer}"[:500]
                still.append(i)
                continue
            verdict.parsed = checkout.parse_judge(answer, requests[i][1])
            verdict.success = bool(verdict.parsed.get("success"))
            verdict.error = "" if verdict.success else str(verdict.parsed.get("error_message", "unparseable"))[:500]
            if not verdict.success:
                still.append(i)
        pending = still
    return verdicts, calls


def job_from_prompt(prompt: Any, reference: str, domain: str) -> dict[str, Any]:
    """An eval.py job (``task``, ``prompt``, ``response``, ``turn_idx``, ``current_prompt``) from a warmup
    row's chat prompt (system, history pairs, current action) and its reference observation."""
    history, action = _prompt_parts(prompt)
    return {"task": domain, "prompt": [a for a, _ in history] + [action],
            "response": [o for _, o in history] + [reference], "turn_idx": len(history) + 1,
            "current_prompt": action}


class AgentWorldJudgeReward(RewardFunction):
    """The official AgentWorldBench judge as a reward: ``5 * total_score`` in [5, 25], 0 when it failed."""

    __name__ = "agentworld_rubric"

    def __init__(self, judge: Judge, checkout: AgentWorldCheckout, *, max_retries: int = 3) -> None:
        self.judge, self.checkout, self.max_retries = judge, checkout, max_retries

    def breakdowns(self, prompts, completions, **columns) -> list[RewardBreakdown]:
        n = len(completions)
        references, domains = _column(columns, "reference", n, ""), _column(columns, "domain", n, "")
        prompts = list(prompts) if prompts is not None else [""] * n
        requests, where = [], []
        out: list[RewardBreakdown | None] = [None] * n
        for i, (prompt, completion, reference, domain) in enumerate(zip(prompts, completions, references, domains)):
            gen = completion_text(completion)
            if not gen:
                out[i] = RewardBreakdown(total=0.0, components={self.__name__: 0.0}, source=self.__name__,
                                         parsed=False, detail="No model generation")
                continue
            job = job_from_prompt(prompt, str(reference), str(domain))
            subtask = self.checkout.subtask(job)
            requests.append((self.checkout.judge_messages(job, self.checkout.parse_prediction(gen, subtask)), subtask))
            where.append(i)
        try:
            verdicts, _ = judge_with_retries(self.checkout, self.judge, requests, max_retries=self.max_retries)
        except Exception as exc:  # a reward never raises into the trainer
            verdicts = [OfficialVerdict(False, {}, 0, f"{type(exc).__name__}: {exc}") for _ in requests]
        for i, verdict in zip(where, verdicts):
            if not verdict.success:
                out[i] = RewardBreakdown(total=0.0, components={self.__name__: 0.0, "attempts": float(verdict.attempts)},
                                         source=self.__name__, parsed=False, detail=verdict.error[:1000])
                continue
            total = verdict.total_score
            components = {**{k: float(v) for k, v in verdict.parsed.get("scores", {}).items()},
                          self.__name__: 5.0 * total, "score_0_100": normalise(total) if total else 0.0,
                          "attempts": float(verdict.attempts)}
            out[i] = RewardBreakdown(total=5.0 * total, components=components, source=self.__name__, parsed=True,
                                     detail=str(verdict.parsed.get("judge_raw_output", ""))[:1000])
        return out  # type: ignore[return-value]


__all__ = ["ROOT_ENV", "AgentWorldCheckout", "AgentWorldJudgeReward", "OfficialDefaults",
           "OfficialVerdict", "RawJudge", "checkout_root", "job_from_prompt", "judge_with_retries", "load_checkout",
           "normalise"]
