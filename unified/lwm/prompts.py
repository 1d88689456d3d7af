"""System prompts of the seven world-model domains (written for this library).

A world-model system prompt has four parts: what the environment is (task description),
what the agent can do (action space), what the world looks like before turn 1 (initial
state), and optionally how to simulate (e.g. "answer only with the observation"). The
per-domain text below supplies the environment description and the answer format; a
harvester fills in the rest with :func:`build_system_prompt`.

GUI domains (web, os, android) answer inside ``<predicted_observation>`` tags, because their
observations (accessibility trees, screen descriptions) are long and free-form; text domains
answer with the bare observation.
"""

from __future__ import annotations

from unified.lwm.records import DOMAINS

GUI_DOMAINS = frozenset({"web", "os", "android"})
"""Domains whose answers go inside ``<predicted_observation>`` tags."""

OBSERVATION_TAG = "predicted_observation"

_ROLE = ("You are a world model: you simulate an environment that an AI agent is acting in. Each user turn "
         "is one action of the agent; you answer with exactly what the environment returns for that action, "
         "consistent with everything that happened earlier in the conversation.")

_DOMAIN_TEXT = {
    "mcp": ("The environment is a set of tool servers (MCP-style function calling). An action is one or more "
            "function calls with JSON arguments; the observation is what each tool returns, usually JSON, "
            "in call order. Tools keep state between calls (files created, messages sent, orders placed)."),
    "search": ("The environment is a web search and browsing service. An action is a search query or a request "
               "to open a URL; the observation is a ranked list of results (title, URL, snippet) or the "
               "extracted text of the page."),
    "terminal": ("The environment is a Linux shell (POSIX sh, GNU coreutils) in a fresh working directory "
                 "/workspace, without network access. An action is one shell command line; the observation "
                 "is its combined output followed by a line '[exit code: N]'."),
    "swe": ("The environment is a software repository checked out in /workspace with Python and git. An action "
            "is a shell command that inspects, edits or tests the code; the observation is the command's output "
            "followed by a line '[exit code: N]'."),
    "web": ("The environment is a web browser. An action is a browser operation (click, type, scroll, goto, "
            "back) on an element of the current page; the observation is the new page as an accessibility tree "
            "with element ids, plus the URL."),
    "os": ("The environment is a desktop operating system. An action is a mouse, keyboard or application "
           "operation; the observation describes the resulting screen: focused window, visible elements, "
           "dialogs and their text."),
    "android": ("The environment is an Android phone. An action is a tap, swipe, text input, key press or app "
                "launch; the observation is the resulting screen as a view hierarchy (element, text, bounds)."),
}

_ANSWER_TEXT = {
    True: ("Write only the observation, inside <predicted_observation> and </predicted_observation> tags; "
           "you may think first, but nothing outside the tags is read."),
    False: "Write only the observation, exactly as the environment would print it, with no commentary.",
}


def is_gui(domain: str) -> bool:
    """Whether ``domain`` answers inside ``<predicted_observation>`` tags."""
    return domain in GUI_DOMAINS


def domain_prompt(domain: str) -> str:
    """The default system prompt of ``domain`` (no task-specific parts)."""
    if domain not in _DOMAIN_TEXT:
        raise ValueError(f"unknown domain {domain!r}; valid domains: {', '.join(DOMAINS)}")
    return "\n\n".join([_ROLE, _DOMAIN_TEXT[domain], _ANSWER_TEXT[is_gui(domain)]])


def build_system_prompt(domain: str, *, task: str = "", action_space: str = "", initial_state: str = "",
                        simulation: str = "") -> str:
    """The full system prompt of one trajectory: domain text + task, action space, initial state, simulation."""
    parts = [domain_prompt(domain)]
    for title, text in (("Task of the agent", task), ("Action space", action_space),
                        ("Initial state", initial_state), ("Simulation instructions", simulation)):
        if text.strip():
            parts.append(f"## {title}\n{text.strip()}")
    return "\n\n".join(parts)


def format_observation(domain: str, observation: str) -> str:
    """How an observation appears as an assistant turn (tagged for GUI domains)."""
    if is_gui(domain):
        return f"<{OBSERVATION_TAG}>\n{observation}\n</{OBSERVATION_TAG}>"
    return observation


SYSTEM_PROMPTS = {d: domain_prompt(d) for d in DOMAINS}
"""Default system prompt of each of the seven domains."""
