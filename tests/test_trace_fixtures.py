"""Hand-written episodes with known predictions and answers (``fixture_*``), shared by the
trace and predict tests, plus checks that the fixtures themselves are well-formed records.

The episodes are written in the library's own Episode format (as ``python -m unified.eval``
saves them), with the Qwen3.5 tool-call markup of ``unified.models.templates``.
"""

from __future__ import annotations

import json

from unified.types import Episode, EpisodeResult, Observation, Step, ToolCall


def fixture_call(name: str, index: int, **arguments) -> ToolCall:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
    raw = f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    return ToolCall(name=name, arguments=dict(arguments), id=f"call_{index}", raw=raw)


def fixture_step(index: int, reasoning: str, body: str, calls: list[ToolCall], answers: list[tuple[str, bool]],
                 content: str = "") -> Step:
    """A step whose raw completion is ``reasoning</think>`` + ``body`` (body holds blocks and calls)."""
    completion = f"{reasoning}\n</think>\n\n{body}"
    return Step(index=index, prompt=f"<prompt {index}>", completion=completion, reasoning=reasoning.strip(),
                content=content, tool_calls=calls,
                observations=[Observation(call_id=c.id, content=text, is_error=err)
                              for c, (text, err) in zip(calls, answers)])


WEATHER_JSON = '{"city": "Paris", "temperature": 18, "unit": "celsius"}'


def fixture_weather_episode(trial: int = 0) -> Episode:
    """Three steps; known answers:

    step 0: explicit JSON block (correct, rule:json, 1.0); implicit "get_weather should return
            ... probably 18." (correct: 18 found); one "Wait".
    step 1: two calls. Block ``call="convert"`` predicting 65 (wrong: 64.4 came back);
            block before the 2nd call predicting the 'Atlantis' not-found error (correct);
            implicit "The result should be 65 degrees fahrenheit." (wrong, aligned to convert);
            "I will call convert next." is an action, not a prediction.
    step 2: final answer, no calls, "I will return the answer" (not a prediction), one "Actually".
    Totals: 5 predictions (3 explicit, 2 implicit), 3 correct, 2 self-corrections, 3 steps.
    """
    c0 = fixture_call("get_weather", 0, city="Paris")
    step0 = fixture_step(
        0,
        "The user wants the weather in Paris. get_weather should return the temperature in celsius, "
        "probably 18. Wait, I am not sure about the unit.",
        f"<predicted_observation>\n{WEATHER_JSON}\n</predicted_observation>\n{c0.raw}",
        [c0], [(WEATHER_JSON, False)])
    c1 = fixture_call("convert", 1, value=18, to="fahrenheit")
    c2 = fixture_call("get_weather", 2, city="Atlantis")
    step1 = fixture_step(
        1,
        "I will call convert next. The result should be 65 degrees fahrenheit.",
        f"<predicted_observation call=\"convert\">65</predicted_observation>\n{c1.raw}\n"
        f"<prediction>Error: city 'Atlantis' not found</prediction>\n{c2.raw}",
        [c1, c2], [("64.4", False), ("Error: city 'Atlantis' not found (code 404)", True)])
    step2 = fixture_step(2, "I will return the answer to the user now.",
                         "It is 18°C in Paris. Actually, that is 64.4°F.", [], [],
                         content="It is 18°C in Paris. Actually, that is 64.4°F.")
    return Episode(benchmark="fixture_bench", task_id="weather", trial=trial, model="fixture",
                   steps=[step0, step1, step2], stop_reason="answer",
                   metadata={"prompting": "predict_then_act"})


def fixture_act_episode(task_id: str, predicted: str, observed: str, *, reasoning_prediction: bool = True) -> Episode:
    """One tool step with no explicit block; the reasoning predicts ``predicted`` (when asked to)."""
    call = fixture_call("read_file", 0, path="notes.txt")
    reasoning = ("I need the notes. " + (f"I expect the file to contain '{predicted}'." if reasoning_prediction
                                          else "Let me look."))
    step = fixture_step(0, reasoning, call.raw, [call], [(observed, False)])
    final = fixture_step(1, "Done.", "The notes are read.", [], [], content="The notes are read.")
    return Episode(benchmark="fixture_bench", task_id=task_id, steps=[step, final], stop_reason="answer",
                   metadata={"prompting": "act"})


def fixture_result(episode: Episode, score: float, passed: bool | None = None) -> EpisodeResult:
    return EpisodeResult(benchmark=episode.benchmark, task_id=episode.task_id, trial=episode.trial, score=score,
                         passed=passed)


def fixture_write_run(directory, episodes: list[Episode], results: list[EpisodeResult], summary=None) -> None:
    """Write a run directory the way an eval run lays it out (episodes and results as JSONL)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "episodes.jsonl", "w", encoding="utf-8") as fh:
        for e in episodes:
            fh.write(json.dumps(e.to_dict()) + "\n")
    with open(directory / "results.jsonl", "w", encoding="utf-8") as fh:
        for r in results:
            fh.write(json.dumps(r.to_dict()) + "\n")
    if summary is not None:
        (directory / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


def test_fixture_episodes_round_trip():
    for episode in (fixture_weather_episode(), fixture_act_episode("a", "x", "y")):
        again = Episode.from_dict(json.loads(json.dumps(episode.to_dict())))
        assert again == episode


def test_fixture_calls_are_inside_their_completions():
    for step in fixture_weather_episode().steps:
        for call in step.tool_calls:
            assert call.raw in step.completion
