"""Function-calling (MCP-like) trajectories executed against bfcl-eval's executable backends.

The backends are the stateful Python classes BFCL v4's multi-turn category executes calls
against (``bfcl_eval.eval_checker.multi_turn_eval.func_source_code``): a file system,
messaging, tickets, trading, vehicle control, math. We instantiate them directly, load a
scenario written here (never BFCL's test data, so the warmup cannot learn the benchmark's
answers), and call their public methods by name with keyword arguments — the name is checked
against the class's public methods and nothing is ever evaluated.

The call sequences come from seeded generators of plausible agent behaviour: mostly valid
calls that build on earlier ones (create then read, log in then act), plus occasional
mistakes (a missing file, a wrong id) whose error responses are also real.

Action text: one JSON object ``{"name": ..., "arguments": {...}}``. Observation: the JSON
of the return value (or ``{"error": "..."}`` when the call raised).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from typing import Any

from unified.lwm.prompts import build_system_prompt
from unified.lwm.records import AWBRecord, trajectory_records
from unified.benchmarks.helpers import process_temp_dir

_BASE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
BACKENDS = {
    "file_system": ("gorilla_file_system", "GorillaFileSystem"),
    "message": ("message_api", "MessageAPI"),
    "ticket": ("ticket_api", "TicketAPI"),
    "trading": ("trading_bot", "TradingBot"),
    "vehicle": ("vehicle_control", "VehicleControlAPI"),
    "math": ("math_api", "MathAPI"),
}
_WORDS = ("report", "budget", "draft", "summary", "agenda", "invoice", "plan", "memo", "notes", "roadmap")
_TEXT = ("quarterly numbers look good", "meeting moved to friday", "remember to water the plants",
         "deploy after the review", "call the supplier", "the server restarts at noon", "todo: refactor parser")


def load_backend(kind: str, scenario: dict[str, Any]):
    """A fresh backend instance with ``scenario`` loaded (BFCL_PROJECT_ROOT points at a temp dir)."""
    import importlib

    if "BFCL_PROJECT_ROOT" not in os.environ:  # removed at exit: nothing left in /tmp
        os.environ["BFCL_PROJECT_ROOT"] = str(process_temp_dir("unified-bfcl-"))
    module_name, class_name = BACKENDS[kind]
    cls = getattr(importlib.import_module(f"{_BASE}.{module_name}"), class_name)
    instance = cls()
    if hasattr(instance, "_load_scenario"):
        instance._load_scenario(json.loads(json.dumps(scenario)), long_context=False)
    return instance


def public_methods(instance) -> list[str]:
    return sorted(n for n in dir(type(instance)) if not n.startswith("_") and callable(getattr(type(instance), n)))


def execute_call(instance, name: str, arguments: dict[str, Any]) -> str:
    """Run one call by name (public methods only, keyword arguments only) -> observation text."""
    if name not in public_methods(instance):
        return json.dumps({"error": f"unknown function {name!r}"})
    try:
        result = getattr(instance, name)(**arguments)
    except Exception as exc:  # the backend's own failure is a real observation
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"}, ensure_ascii=False)
    return json.dumps(result, ensure_ascii=False, default=str)


def _call(function: str, **arguments: Any) -> dict[str, Any]:
    return {"name": function, "arguments": arguments}


# -- generators: (scenario, task, calls) ----------------------------------------------------


def _file_system(rng: random.Random):
    files = {f"{w}.txt": {"type": "file", "content": " ".join(rng.sample(_TEXT, 2))}
             for w in rng.sample(_WORDS, 3)}
    folder = rng.choice(("work", "documents", "projects"))
    scenario = {"root": {"alex": {"type": "directory", "contents": {
        folder: {"type": "directory", "contents": files}, "archive": {"type": "directory", "contents": {}}}}}}
    names = list(files)
    new = f"{rng.choice(_WORDS)}_{rng.randint(1, 99)}.txt"
    pool = [
        _call("cat", file_name=names[0]), _call("wc", file_name=names[1], mode=rng.choice(["l", "w", "c"])),
        _call("grep", file_name=names[0], pattern=rng.choice(_TEXT).split()[0]),
        _call("touch", file_name=new), _call("echo", content=rng.choice(_TEXT), file_name=new),
        _call("cat", file_name=new), _call("mkdir", dir_name="backup"), _call("cp", source=names[1],
                                                                               destination="backup"),
        _call("find", path=".", name=rng.choice(_WORDS)), _call("sort", file_name=names[2]),
        _call("tail", file_name=names[2], lines=1), _call("diff", file_name1=names[0], file_name2=names[1]),
        _call("mv", source=names[2], destination=f"old_{names[2]}"), _call("ls", a=False),
        _call("cat", file_name="missing.txt"), _call("rm", file_name=names[0]), _call("pwd"),
    ]
    calls = [_call("ls", a=rng.random() < 0.3), _call("cd", folder=folder)] + _subset(rng, pool, 3, 5)
    return scenario, f"Organise the files in the {folder} folder.", calls


def _message(rng: random.Random):
    users = {"Alice": "USR001", "Bob": "USR002", "Catherine": "USR003", "Daniel": "USR004"}
    me = rng.choice(list(users))
    other = rng.choice([u for u in users if u != me])
    scenario = {"random_seed": rng.randint(1, 10**6), "user_count": 4, "user_map": users,
                "inbox": [{users[other]: rng.choice(_TEXT)}], "message_count": 1, "current_user": None}
    pool = [
        _call("list_users"), _call("get_user_id", user=other), _call("send_message", receiver_id=users[other],
                                                                    message=rng.choice(_TEXT)),
        _call("view_messages_sent"), _call("search_messages", keyword=rng.choice(_TEXT).split()[-1]),
        _call("add_contact", user_name=rng.choice(("Eve", "Frank", "Grace"))), _call("get_message_stats"),
        _call("get_user_id", user="Zed"), _call("delete_message", receiver_id=users[other]),
    ]
    calls = [_call("message_login", user_id=users[me])] + _subset(rng, pool, 3, 5)
    return scenario, f"As {me}, message {other} and review the conversation.", calls


def _ticket(rng: random.Random):
    scenario = {"ticket_queue": [], "ticket_counter": rng.randint(1, 50), "current_user": None}
    first = scenario["ticket_counter"]
    title = f"{rng.choice(_WORDS)} {rng.choice(('broken', 'slow', 'missing', 'wrong'))}"
    pool = [
        _call("get_ticket", ticket_id=first), _call("edit_ticket", ticket_id=first, updates={"priority": 4}),
        _call("create_ticket", title=f"follow-up on {title}", description=rng.choice(_TEXT), priority=2),
        _call("get_user_tickets", status="Open"), _call("resolve_ticket", ticket_id=first, resolution="fixed"),
        _call("close_ticket", ticket_id=first + 1), _call("get_ticket", ticket_id=first + 7),
        _call("ticket_get_login_status"),
    ]
    calls = [_call("ticket_login", username=rng.choice(("sam", "kim", "lee")), password="hunter2"),
             _call("create_ticket", title=title, description=rng.choice(_TEXT), priority=rng.randint(1, 5))]
    return scenario, f"File and follow a support ticket about '{title}'.", calls + _subset(rng, pool, 2, 4)


def _trading(rng: random.Random):
    scenario = {"random_seed": rng.randint(1, 10**6)}
    symbol = rng.choice(("AAPL", "GOOG", "TSLA", "MSFT", "NVDA", "AMZN"))
    pool = [
        _call("get_stock_info", symbol=symbol), _call("add_to_watchlist", stock=symbol), _call("get_watchlist"),
        _call("place_order", order_type=rng.choice(("Buy", "Sell")), symbol=symbol,
              price=float(rng.randint(100, 400)), amount=rng.randint(1, 20)),
        _call("get_order_history"), _call("get_account_info"), _call("fund_account", amount=float(rng.randint(5, 50)
                                                                                                  * 100)),
        _call("get_available_stocks", sector=rng.choice(("Technology", "Automobile"))),
        _call("get_symbol_by_name", name=rng.choice(("Apple", "Tesla", "Zeta Corp"))),
        _call("remove_stock_from_watchlist", symbol=symbol), _call("get_stock_info", symbol="ZZZZ"),
    ]
    calls = [_call("get_symbol_by_name", name=rng.choice(("Apple", "Nvidia", "Microsoft")))] + _subset(rng, pool, 3, 5)
    return scenario, f"Check {symbol} and manage the trading account.", calls


def _vehicle(rng: random.Random):
    scenario = {"random_seed": rng.randint(1, 10**6), "fuelLevel": float(rng.randint(2, 14)),
                "engine_state": "stopped"}
    pool = [
        _call("lockDoors", unlock=False, door=["driver", "passenger", "rear_left", "rear_right"]),
        _call("pressBrakePedal", pedalPosition=1.0), _call("startEngine", ignitionMode="START"),
        _call("fillFuelTank", fuelAmount=float(rng.randint(5, 40))), _call("displayCarStatus", option="fuel"),
        _call("check_tire_pressure"), _call("setHeadlights", mode=rng.choice(("on", "off", "auto"))),
        _call("estimate_distance", cityA="83214", cityB=rng.choice(("74532", "56108", "62947"))),
        _call("adjustClimateControl", temperature=float(rng.randint(16, 26)), unit="celsius"),
        _call("get_zipcode_based_on_city", city=rng.choice(("Rivermist", "Stonebrook", "Atlantis"))),
        _call("liter_to_gallon", liter=float(rng.randint(10, 60))),
    ]
    return scenario, "Prepare the car for a trip.", [_call("displayCarStatus", option="doors")] + _subset(rng, pool, 3, 5)


def _math(rng: random.Random):
    nums = [float(rng.randint(1, 99)) for _ in range(rng.randint(3, 6))]
    pool = [
        _call("mean", numbers=nums), _call("standard_deviation", numbers=nums), _call("max_value", numbers=nums),
        _call("add", a=nums[0], b=nums[1]), _call("divide", a=nums[0], b=0.0), _call("power", base=nums[2],
                                                                                   exponent=2.0),
        _call("square_root", number=nums[1], precision=3), _call("percentage", part=nums[0], whole=sum(nums)),
        _call("round_number", number=sum(nums) / 7, decimal_places=2),
        _call("si_unit_conversion", value=nums[0], unit_in="km", unit_out="m"),
    ]
    return {}, f"Compute statistics of the numbers {nums}.", [_call("sum_values", numbers=nums)] + _subset(rng, pool, 3, 5)


def _subset(rng: random.Random, pool: list, lo: int, hi: int) -> list:
    k = min(len(pool), rng.randint(lo, hi))
    return [pool[i] for i in sorted(rng.sample(range(len(pool)), k))]


GENERATORS: dict[str, Callable[[random.Random], tuple[dict, str, list[dict]]]] = {
    "file_system": _file_system, "message": _message, "ticket": _ticket, "trading": _trading, "vehicle": _vehicle,
    "math": _math,
}


def _tool_list(instance) -> str:
    return ", ".join(public_methods(instance))


def run_calls(kind: str, scenario: dict, calls: list[dict]) -> tuple[list[str], list[str], Any]:
    """Execute ``calls`` on a fresh backend: (action texts, observation texts, backend)."""
    instance = load_backend(kind, scenario)
    actions, observations = [], []
    for call in calls:
        actions.append(json.dumps(call, ensure_ascii=False, sort_keys=False))
        observations.append(execute_call(instance, call["name"], call.get("arguments") or {}))
    return actions, observations, instance


def harvest_mcp(n_trajectories: int, seed: int) -> list[AWBRecord]:
    """``n_trajectories`` seeded call sequences spread over the backends, every turn a record."""
    import time

    os.environ["TZ"] = "UTC"  # the trading backend formats timestamps in local time
    time.tzset()
    kinds = list(GENERATORS)
    records: list[AWBRecord] = []
    for i in range(n_trajectories):
        kind = kinds[i % len(kinds)]
        rng = random.Random(f"mcp:{seed}:{i}")
        scenario, task, calls = GENERATORS[kind](rng)
        actions, observations, instance = run_calls(kind, scenario, calls)
        system = build_system_prompt(
            "mcp", task=task,
            action_space=f"One function call per turn, written as JSON {{\"name\": ..., \"arguments\": {{...}}}}. "
                         f"Functions of the {kind.replace('_', ' ')} server: {_tool_list(instance)}.",
            initial_state=f"Server state: {json.dumps(scenario, sort_keys=True)}" if scenario else
            "A stateless calculator.")
        records += trajectory_records("mcp", f"mcp-{kind}-{seed}-{i:04d}", system, actions, observations)
    return records
