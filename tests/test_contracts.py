"""The contracts of unified.benchmarks.contract as the agent loop honours them: the assistant message reaches
``step``, a greeting opens the conversation, stop reasons are the enum's values, and an episode's
token ids form a verl-style trajectory with a loss mask."""

from __future__ import annotations

import dataclasses
import json

import pytest

from unified.agent.loop import AgentLoop, Job
from unified.benchmarks.contract import Adapter, AgentLimits, Environment, StopReason, Task
from unified.inference.base import ChatModel, PolicyOutput
from unified.types import Episode, EpisodeResult, Message, Observation, Step, ToolSpec


class RecordingEnv(Environment):
    def __init__(self) -> None:
        super().__init__()
        self.tools = [ToolSpec(name="note")]
        self.first_user_message = "Take a note."
        self.assistant_greeting = "Hello, how can I help?"
        self.messages_seen: list[Message | None] = []

    def step(self, tool_calls, message=None):
        self.messages_seen.append(message)
        return [Observation(call_id=c.id, content="noted") for c in tool_calls]


class RecordingAdapter(Adapter):
    name = "recording_fixture"

    def __init__(self) -> None:
        super().__init__()
        self.envs: list[RecordingEnv] = []

    def tasks(self, split=None, limit=None):
        return [Task(id="t0", benchmark=self.name)]

    def open(self, task, *, run=None):
        self.envs.append(RecordingEnv())
        return self.envs[-1]

    def score(self, task, episode, env):
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=1.0)


class TwoTurnPolicy(ChatModel):
    """A note call with some visible text, then an answer; prompt ids grow as a real template's would."""

    name = "two_turn_fixture"

    def __init__(self) -> None:
        super().__init__("two_turn_fixture")
        self.prompts: list[list[dict]] = []

    def generate(self, requests):
        outs = []
        for request in requests:
            self.prompts.append(request.messages)
            first = sum(m["role"] == "assistant" for m in request.messages) == 1  # the greeting only
            if first:
                outs.append(PolicyOutput(text='I will note it.<tool_call>{"name": "note", "arguments": {}}</tool_call>',
                                         token_ids=[7, 8, 9], prompt_token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3]))
            else:
                outs.append(PolicyOutput(text="Done.", token_ids=[11, 12], prompt_token_ids=[1, 2, 3, 7, 8, 9, 4, 5],
                                         logprobs=[-0.5, -0.6]))
        return outs


def test_step_receives_the_assistant_message_and_the_greeting_opens_the_conversation():
    adapter, policy = RecordingAdapter(), TwoTurnPolicy()
    episodes = []
    AgentLoop(adapter, policy, on_result=lambda r, e: episodes.append(e)).run([Job(adapter.tasks()[0])])
    (env,), (episode,) = adapter.envs, episodes
    (message,) = env.messages_seen
    assert message.role == "assistant" and message.content == "I will note it."
    assert [c.name for c in message.tool_calls] == ["note"]
    assert [m["role"] for m in policy.prompts[0]] == ["assistant", "user"]
    assert policy.prompts[0][0]["content"] == "Hello, how can I help?"
    assert episode.stop_reason == StopReason.ANSWER
    assert json.loads(json.dumps(episode.to_dict()))["stop_reason"] == "answer"
    assert episode.steps[0].prompt_token_ids == [1, 2, 3] and episode.steps[0].completion_logprobs == [-0.1, -0.2, -0.3]

    trajectory = episode.token_trajectory()
    assert trajectory.prompt_ids == [1, 2, 3]
    assert trajectory.response_ids == [7, 8, 9, 4, 5, 11, 12]
    assert trajectory.response_mask == [1, 1, 1, 0, 0, 1, 1]
    assert trajectory.response_logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.5, -0.6]
    assert [s.response_mask for s in episode.turn_samples()] == [[1, 1, 1], [1, 1]]


def test_token_trajectory_names_the_step_whose_prompt_rewrote_history():
    episode = Episode(benchmark="b", task_id="t", steps=[
        Step(index=0, prompt="", completion="", prompt_token_ids=[1, 2], completion_token_ids=[3]),
        Step(index=1, prompt="", completion="", prompt_token_ids=[1, 9, 3, 4], completion_token_ids=[5]),
    ])
    with pytest.raises(ValueError, match="step 1's prompt does not extend step 0's.*token 1"):
        episode.token_trajectory()
    assert episode.turn_samples()[1].prompt_ids == [1, 9, 3, 4]
    assert episode.token_trajectory.__doc__ and "turn_samples" in str(episode.token_trajectory.__doc__)


def test_token_views_need_ids():
    episode = Episode(benchmark="b", task_id="t", steps=[Step(index=0, prompt="p", completion="c")])
    with pytest.raises(ValueError, match="step 0 has no prompt/completion token ids"):
        episode.turn_samples()


def test_stop_reasons_are_documented_once_and_round_trip_as_strings():
    assert {r.value for r in StopReason} == {"answer", "env_done", "max_turns", "max_steps_per_turn",
                                             "max_episode_tokens", "timeout", "context_full", "error",
                                             "skipped"}
    assert StopReason("max_tokens") is StopReason.MAX_EPISODE_TOKENS  # stored by older runs
    assert StopReason("timeout") is StopReason.TIMEOUT and str(StopReason.TIMEOUT) == "timeout"


def test_each_limit_has_one_name_and_old_keys_still_load(capsys):
    """AgentLimits keys = StopReason values = eval flags; a recipe with the old keys loads with a note."""
    from unified import config
    from unified.config import deprecations

    deprecations._warned_notes.clear()
    with pytest.warns(DeprecationWarning):
        limits = config.from_dict(AgentLimits, {"max_steps_per_user_turn": 3, "max_completion_tokens": 99},
                                  where="limits", source="recipe.yaml")
    assert (limits.max_steps_per_turn, limits.max_episode_tokens) == (3, 99)
    err = capsys.readouterr().err
    assert "deprecated: recipe.yaml: limits.max_completion_tokens is now limits.max_episode_tokens" in err
    names = {f.name for f in dataclasses.fields(AgentLimits)}
    assert names - {"max_seconds"} <= {r.value for r in StopReason}
    with pytest.raises(ValueError, match="both 'max_completion_tokens'"):
        config.from_dict(AgentLimits, {"max_completion_tokens": 5, "max_episode_tokens": 6})
