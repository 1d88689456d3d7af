"""Prompting modules: act / predict_then_act / predict_then_act_reflect, alone and inside the agent loop.

The loop tests run the real :class:`unified.agent.loop.AgentLoop` on a small weather
environment written for the test (``fixture_*``) and a policy that replays the hand-written
completions of ``fixture_weather_episode`` (so the predictions and their verdicts are known).
"""

from __future__ import annotations

import copy

import pytest

from test_trace_fixtures import fixture_weather_episode
from unified.chatformat.toolcalls import parse_completion
from unified.agent.prompting import PROMPTING, make_prompting, prompting_names
from unified.predict import PREDICTION_TAG, PredictThenAct, PredictThenActReflect
from unified.types import EpisodeResult, Message, Observation, ToolSpec


def test_modules_registered():
    assert {"act", "predict_then_act", "predict_then_act_reflect"} <= set(prompting_names())
    assert isinstance(make_prompting("predict_then_act"), PredictThenAct)
    assert isinstance(make_prompting("predict_then_act_reflect", reflection_chars=40), PredictThenActReflect)
    with pytest.raises(KeyError, match="Did you mean 'predict_then_act'"):
        PROMPTING.get("predict_then_akt")


def test_system_prompt_asks_for_the_block():
    module = PredictThenAct()
    prompt = module.system_prompt("You are an agent.")
    assert prompt.startswith("You are an agent.") and f"<{PREDICTION_TAG}>" in prompt
    assert make_prompting("act").system_prompt("You are an agent.") == "You are an agent."
    assert "<reflection>" in PredictThenActReflect().system_prompt("x")


def test_parse_strips_blocks_before_tool_parsing():
    step = fixture_weather_episode().steps[1]
    visible, extras = PredictThenAct().parse(step.completion)
    assert "predicted_observation" not in visible and "<prediction>" not in visible
    assert extras["prediction_blocks"] == 2
    parsed = parse_completion(visible)
    assert [c.name for c in parsed.tool_calls] == ["convert", "get_weather"]
    assert all(c.parse_error is None for c in parsed.tool_calls)
    assert "Atlantis' not found" not in parsed.content
    # act leaves the completion alone
    assert make_prompting("act").parse(step.completion) == (step.completion, {})


def test_after_observations_records_scored_predictions():
    episode = fixture_weather_episode()
    module = PredictThenAct()
    step = episode.steps[1]
    module.after_observations(step, step.observations)
    records = step.extras["predictions"]
    assert [(r["kind"], r["text"][:6], r["correct"]) for r in records] == [
        ("explicit", "65", False), ("explicit", "Error:", True), ("implicit", "The re", False)]
    assert records[0]["call_name"] == "convert" and records[0]["method"] == "rule:facts"
    assert step.extras["prediction_blocks"] == 2


def test_reflect_comparison_enters_the_next_prompt_only():
    episode = fixture_weather_episode()
    module = PredictThenActReflect()
    step = episode.steps[1]
    module.after_observations(step, step.observations)
    assert "did not match" in step.extras["reflection"] and "'64.4'" in step.extras["reflection"]
    messages = [Message(role="user", content="weather?"), Message(role="assistant", content=""),
                Message(role="tool", content="64.4", name="convert")]
    original = copy.deepcopy(messages)
    view = module.before_policy(messages)
    assert messages == original  # the recorded conversation is untouched
    assert view[-1].content.startswith("64.4\n<reflection>") and "you predicted '65'" in view[-1].content
    # no reflection on a turn that does not follow tool answers
    assert module.before_policy(messages[:1]) == messages[:1]


def test_reflect_says_when_no_prediction_was_made():
    episode = fixture_weather_episode()
    step = episode.steps[1]
    step.completion = step.completion.split("<predicted_observation", 1)[0]  # no block at all
    module = PredictThenActReflect()
    module.after_observations(step, step.observations)
    assert "no prediction" in step.extras["reflection"]


# ---------------------------------------------------------------------------------------------
# inside the real agent loop


def _fixture_adapter():
    from unified.benchmarks.contract import Adapter, Environment, Task

    class FixtureWeatherEnv(Environment):
        def __init__(self):
            super().__init__()
            self.tools = [
                ToolSpec("get_weather", "Weather of a city", {"type": "object", "properties": {"city": {"type": "string"}}}),
                ToolSpec("convert", "Convert celsius", {"type": "object", "properties": {
                    "value": {"type": "number"}, "to": {"type": "string"}}}),
            ]
            self.system_prompt = "You answer weather questions with tools."
            self.first_user_message = "How warm is it in Paris, in fahrenheit? And in Atlantis?"

        def step(self, tool_calls, message=None):
            out = []
            for call in tool_calls:
                if call.name == "convert":
                    out.append(Observation(call.id, f"{float(call.arguments['value']) * 9 / 5 + 32:g}"))
                elif call.arguments.get("city") == "Paris":
                    out.append(Observation(call.id, '{"city": "Paris", "temperature": 18, "unit": "celsius"}'))
                else:
                    out.append(Observation(call.id, f"Error: city '{call.arguments.get('city')}' not found (code 404)",
                                           is_error=True))
            return out

    class FixtureWeatherAdapter(Adapter):
        name = "fixture_weather"

        def tasks(self, split=None, limit=None):
            return [Task(id="weather", benchmark=self.name)]

        def open(self, task, *, run=None):
            return FixtureWeatherEnv()

        def score(self, task, episode, env):
            answer = episode.steps[-1].content if episode.steps else ""
            return EpisodeResult(self.name, task.id, 0, score=float("64.4" in answer), passed="64.4" in answer)

    return FixtureWeatherAdapter()


def _fixture_replay_policy(completions):
    """Answers turn k of an episode with ``completions[k]`` (counted from the request's assistant turns)."""
    from unified.inference.base import ChatModel, PolicyOutput

    class FixtureReplayPolicy(ChatModel):
        name = "fixture_replay"

        def generate(self, requests):
            out = []
            for request in requests:
                turn = sum(1 for m in request.messages if m["role"] == "assistant")
                out.append(PolicyOutput(text=completions[turn], prompt=str(request.messages), completion_tokens=10,
                                        finish_reason="stop"))
            return out

    return FixtureReplayPolicy(model="fixture")


def _run(prompting):
    from unified.agent.loop import AgentLoop, Job

    adapter = _fixture_adapter()
    completions = [s.completion for s in fixture_weather_episode().steps]
    recorded = []
    loop = AgentLoop(adapter, _fixture_replay_policy(completions), prompting=prompting,
                     on_result=lambda r, e: recorded.append((r, e)))
    results = loop.run([Job(task) for task in adapter.tasks()])
    assert len(results) == 1 and len(recorded) == 1
    return recorded[0]


def test_loop_predict_then_act_records_scored_predictions():
    result, episode = _run("predict_then_act")
    assert episode.error is None, episode.error
    assert episode.metadata["prompting"] == "predict_then_act"
    assert [len(s.tool_calls) for s in episode.steps] == [1, 2, 0]
    explicit = [(s.index, r["text"][:6], r["correct"]) for s in episode.steps
                for r in s.extras.get("predictions", []) if r["kind"] == "explicit"]
    assert explicit == [(0, '{"city', True), (1, "65", False), (1, "Error:", True)]
    # the blocks never reached the recorded conversation, the tools or the scorer
    for message in episode.messages[1:]:  # (the system prompt names the tag)
        assert "predicted_observation" not in (message.content or "") + (message.reasoning or "")
    assert result.passed is True
    assert "<predicted_observation>" in episode.steps[0].completion  # the raw completion keeps them


def test_loop_act_records_no_explicit_predictions_and_same_calls():
    _, act = _run("act")
    _, predict = _run("predict_then_act")
    assert all("predictions" not in s.extras for s in act.steps)
    assert [[(c.name, c.arguments) for c in s.tool_calls] for s in act.steps] == \
        [[(c.name, c.arguments) for c in s.tool_calls] for s in predict.steps]


def test_loop_reflect_puts_the_comparison_into_the_next_prompt():
    _, episode = _run("predict_then_act_reflect")
    def reflections(prompt):
        return prompt.count("\\n<reflection>\\n")  # the replay policy's prompt is the repr of the messages

    assert [reflections(s.prompt) for s in episode.steps] == [0, 1, 1]
    assert "matched" in episode.steps[1].prompt and "did not match" in episode.steps[2].prompt
    assert all("<reflection>" not in m.content for m in episode.messages[1:])


def test_prefill_opens_the_block_with_a_real_model(tiny_checkpoint):
    """hf policy + tiny model: the completion starts with the opened block; act has no prefix."""
    from unified.benchmarks.contract import AgentLimits
    from unified.agent.loop import AgentLoop, Job
    from unified.inference import SamplingConfig, make_chat_model

    policy = make_chat_model(str(tiny_checkpoint), SamplingConfig(max_new_tokens=6))
    adapter = _fixture_adapter()
    for name in ("predict_then_act", "act"):
        recorded = []
        AgentLoop(adapter, policy, prompting=name, limits=AgentLimits(max_turns=1),
                  on_result=lambda r, e: recorded.append(e)).run([Job(t) for t in adapter.tasks()])
        (step,) = recorded[0].steps
        if name == "act":
            assert "response_prefix" not in step.extras and not step.completion.startswith("<predicted")
        else:
            assert step.completion.startswith(f"<{PREDICTION_TAG}>\n")
            assert step.prompt.endswith(f"<{PREDICTION_TAG}>\n")
            assert step.extras["response_prefix"] == f"<{PREDICTION_TAG}>\n"
            assert len(step.completion_token_ids) == step.completion_tokens <= 6
    assert PredictThenAct(prefill="false").response_prefix() == ""


def test_parse_records_blocks_of_a_turn_without_calls():
    _, extras = PredictThenAct().parse("<predicted_observation>\n42\n\nThe answer is 42.")
    assert extras["prediction_blocks"] == 1
    (record,) = extras["predictions"]
    assert (record["text"], record["method"], record["correct"], record["start"]) == ("42", "unaligned", None, 0)


def test_unscored_and_scored_records_have_the_same_fields():
    step = fixture_weather_episode().steps[0]
    _, extras = PredictThenAct().parse(step.completion)
    module = PredictThenAct()
    module.after_observations(step, step.observations)
    assert set(extras["predictions"][0]) == set(step.extras["predictions"][0])


def test_parse_records_why_a_block_is_unaligned():
    _, extras = PredictThenAct().parse("<predicted_observation>\n42\n\nThe answer is 42.")
    assert extras["predictions"][0]["reason"] == "no tool call in this turn"
    call = "<tool_call>\n<function=ls>\n</function>\n</tool_call>"
    _, extras = PredictThenAct().parse(f"<predicted_observation>\na.txt\n</predicted_observation>\n{call}")
    assert "got no observation" in extras["predictions"][0]["reason"]
