"""One BFCL v4 task as an Environment: bfcl's executable backends, privately instantiated.

Single-turn categories (non-live, live, relevance/irrelevance) have no execution in bfcl:
only the first answer is scored, so the environment ends after the first turn.

Multi-turn, memory and web-search categories run bfcl's backend classes
(``bfcl_eval/eval_checker/multi_turn_eval/func_source_code``), loaded the way
``multi_turn_utils.execute_multi_turn_func_call`` loads them (``_load_scenario`` with a deep
copy of the task's ``initial_config``, ``long_context`` for the long-context category), but
held by this environment rather than in module globals, and called directly:
a call runs only if its name is a public method of an involved class *and* a tool offered in
this turn; arguments are the parsed JSON values, never text evaluated as code, and a call runs
under :mod:`evaluators.bfcl_v4.guard` (bounded numeric arguments, ``decimal``/mpmath state
restored, no fetches of loopback/private/link-local URLs). Results are
formatted as bfcl formats them (strings as is, dicts as JSON, others ``str``), errors as
``"Error during execution: ..."``.

Follow-up user turns come from the task's question list; a ``miss_func`` turn adds the held-out
functions to the tools and asks with bfcl's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``
(``base_handler.inference_multi_turn_FC``).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from pathlib import Path
from typing import Any

from evaluators.bfcl_v4.guard import call_guarded
from evaluators.bfcl_v4.isolation import import_bfcl, import_memory_vector
from unified.benchmarks.contract import Environment, Task
from unified.types import Episode, Message, Observation, ToolCall, ToolSpec


def tool_specs(functions: list[dict[str, Any]]) -> list[ToolSpec]:
    """bfcl function docs -> ToolSpecs (the schema kept as bfcl writes it)."""
    return [ToolSpec(name=f["name"], description=f.get("description", ""),
                     parameters=f.get("parameters") or {"type": "dict", "properties": {}}) for f in functions]


def _format_result(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _turn_messages(turn: list[dict[str, Any]]) -> tuple[list[str], str]:
    systems = [m["content"] for m in turn if m.get("role") == "system"]
    users = [m["content"] for m in turn if m.get("role") != "system"]
    return systems, "\n\n".join(users)


BFCL_REFUSED_NAMES = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")
"""Names ``multi_turn_utils.execute_multi_turn_func_call`` refuses before evaluating a call."""


def import_backend_modules(tasks: list[Task]) -> None:
    """Import the backend modules the tasks' involved classes live in (and what they import, e.g.
    mpmath for MathAPI) on the calling thread, before the agent loop's worker threads open
    environments. The vector memory backend (an encoder) stays lazy: :func:`import_memory_vector`."""
    backend_config = import_bfcl("bfcl_eval.constants.executable_backend_config")
    names = {c for t in tasks for c in (t.payload.get("entry") or {}).get("involved_classes") or ()}
    for class_name in sorted(names - {"MemoryAPI_vector"}):
        module_name = backend_config.CLASS_FILE_PATH_MAPPING.get(class_name)
        if module_name:
            importlib.import_module(module_name)


class BFCLEnvironment(Environment):
    def __init__(self, task: Task, work_dir: Path | None, bfcl_inference: bool = True) -> None:
        super().__init__()
        self.bfcl_inference = bfcl_inference
        # bfcl's handler: nothing decodable ends the turn; every decoded call is executed
        self.malformed_call_ends_turn = self.steps_unoffered_calls = bfcl_inference  # type: ignore[misc]
        self.task = task
        self.category: str = task.payload["category"]
        self.entry: dict[str, Any] = copy.deepcopy(task.payload["entry"])
        self.work_dir = work_dir
        self.turn = 0
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        utils = import_bfcl("bfcl_eval.utils")
        self.executable = utils.contain_multi_turn_interaction(self.category)
        self.is_memory = utils.is_memory(self.category)
        self.questions: list[list[dict[str, Any]]] = self.entry["question"]
        self.holdout: dict[str, list[dict[str, Any]]] = self.entry.get("missed_function", {}) or {}
        self.metadata = {"bfcl_category": self.category, "executable": self.executable}

    # ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self.executable:
            self._load_backends()
        if self.is_memory:
            handler_utils = import_bfcl("bfcl_eval.model_handler.utils")
            instance = next(iter(self.instances.values()))
            self.questions = handler_utils.add_memory_instruction_system_prompt(
                self.questions, self.category, self.entry["scenario"], instance)
        self.tools = tool_specs(self.entry.get("function", []))
        systems, first = _turn_messages(self.questions[0])
        self.system_prompt = "\n\n".join(systems)
        self.first_user_message = first

    def _initial_config(self) -> dict[str, Any]:
        config = copy.deepcopy(self.entry.get("initial_config", {}))
        utils = import_bfcl("bfcl_eval.utils")
        if self.is_memory:
            if self.work_dir is None:
                raise RuntimeError("BFCL memory tasks need the run's work_dir (open(task, run=RunContext(work_dir=...)))")
            cls = self.entry["involved_classes"][0]
            config = {cls: {"model_result_dir": Path(self.work_dir) / "memory", "scenario": self.entry["scenario"],
                            "test_id": self.entry["id"],
                            "test_category": utils.extract_test_category_from_id(self.entry["id"])}}
        elif utils.is_web_search(self.category):
            cls = self.entry["involved_classes"][0]
            config = {cls: {"show_snippet": "no_snippet" not in self.entry["id"]}}
        return config

    def _load_backends(self) -> None:
        backend_config = import_bfcl("bfcl_eval.constants.executable_backend_config")
        config = self._initial_config()
        long_context = "long_context" in self.category or "composite" in self.category
        for class_name in self.entry["involved_classes"]:
            module_name = backend_config.CLASS_FILE_PATH_MAPPING[class_name]
            module = import_memory_vector() if class_name == "MemoryAPI_vector" else importlib.import_module(module_name)
            instance = getattr(module, class_name)()
            if class_name not in backend_config.STATELESS_CLASSES:
                instance._load_scenario(copy.deepcopy(config.get(class_name, {})), long_context=long_context)
            self.instances[class_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = method

    # ----------------------------------------------------------------------------------
    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        if not self.executable:
            self.done = True  # bfcl scores the first answer of single-turn categories; nothing runs
            return [Observation(call_id=c.id, content="(recorded; single-turn BFCL categories are not executed)",
                                metadata={"executed": False}) for c in tool_calls]
        offered = {t.name for t in self.tools}
        observations = []
        for call in tool_calls:
            method = self.methods.get(call.name)
            if self.bfcl_inference and call.name in BFCL_REFUSED_NAMES:
                observations.append(Observation(call_id=call.id, is_error=True, content=(
                    f"Error during execution: Function call {call.name} is not allowed.")))
                continue
            # bfcl executes any public method of the involved classes, offered in this turn or not
            if method is None or (call.name not in offered and not self.bfcl_inference):
                observations.append(Observation(call_id=call.id, is_error=True,
                                                content=f"Error during execution: name '{call.name}' is not defined"))
                continue
            try:
                # backends mutate args; guarded: bounded arguments, decimal/mpmath state restored, no loopback fetches
                content = _format_result(call_guarded(method, call.name, copy.deepcopy(call.arguments)))
                is_error = False
            except Exception as exc:  # bfcl's wording (multi_turn_utils.execute_multi_turn_func_call)
                content, is_error = f"Error during execution: {exc}", True
            observations.append(Observation(call_id=call.id, content=content, is_error=is_error))
        return observations

    def next_user_turn(self, episode: Episode) -> str | None:
        if not self.executable:
            return None
        self.turn += 1
        if self.turn >= len(self.questions):
            return None
        if str(self.turn) in self.holdout:
            defaults = import_bfcl("bfcl_eval.constants.default_prompts")
            self.tools = self.tools + tool_specs(self.holdout[str(self.turn)])
            return defaults.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
        return _turn_messages(self.questions[self.turn])[1]

    def flush_memory(self) -> None:
        """Write the memory snapshot a prerequisite conversation leaves (bfcl does it after inference)."""
        for instance in self.instances.values():
            if hasattr(instance, "_flush_memory_to_local_file"):
                instance._flush_memory_to_local_file()

    def stop(self) -> None:
        self.instances.clear()
        self.methods.clear()
