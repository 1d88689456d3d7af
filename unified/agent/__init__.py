"""The multi-turn agent loop, its worker threads and the prompting hooks (model output is read by
:mod:`unified.chatformat`).

Prompting modules (``--prompting``) plug in through :mod:`unified.agent.prompting`.
"""

from unified.agent.prompting import PROMPTING, PromptingModule, make_prompting, prompting_names

__all__ = ["PROMPTING", "PromptingModule", "make_prompting", "prompting_names"]
