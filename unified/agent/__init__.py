"""The multi-turn agent loop, tool-call parsing/rendering, reasoning handling, prompting hooks.

Prompting modules (``--prompting``) plug in through :mod:`unified.agent.prompting`.
"""

from unified.agent.prompting import PROMPTING, PromptingModule, make_prompting, prompting_names

__all__ = ["PROMPTING", "PromptingModule", "make_prompting", "prompting_names"]
