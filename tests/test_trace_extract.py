"""Extraction and alignment of predictions on hand-written episodes with known answers."""

from __future__ import annotations

import pytest

from test_trace_fixtures import WEATHER_JSON, fixture_act_episode, fixture_weather_episode
from unified.predict.blocks import find_blocks, strip_blocks
from unified.trace import episode_predictions, implicit_predictions, self_corrections


def test_blocks_found_with_positions_tags_and_call_attribute():
    text = "a <prediction>one</prediction> b <predicted_observation call=\"f\">\ntwo\n</predicted_observation> c"
    blocks = find_blocks(text)
    assert [b.text for b in blocks] == ["one", "two"]
    assert [b.tag for b in blocks] == ["prediction", "predicted_observation"]
    assert blocks[1].call == "f"
    assert text[blocks[0].start:blocks[0].end] == "<prediction>one</prediction>"
    assert text[blocks[1].end:] == " c"
    assert strip_blocks(text) == "a  b  c"


def test_unclosed_block_stops_at_tool_call_or_blank_line():
    text = "<predicted_observation>\n42\n<tool_call>\n<function=f>\n</function>\n</tool_call>"
    (block,) = find_blocks(text)
    assert block.text == "42" and not block.closed
    assert strip_blocks(text).startswith("<tool_call>")
    text2 = "<prediction>it fails\n\nThe answer is 3."
    (block2,) = find_blocks(text2)
    assert block2.text == "it fails"
    assert strip_blocks(text2).strip() == "The answer is 3."


def test_second_open_before_close_makes_first_unclosed():
    text = "<prediction>a <prediction>b</prediction>"
    blocks = find_blocks(text)
    assert [b.text for b in blocks] == ["a", "b"]
    assert [b.closed for b in blocks] == [False, True]


def test_explicit_predictions_positions_and_alignment():
    episode = fixture_weather_episode()
    preds = episode_predictions(episode)
    explicit = [p for p in preds if p.kind == "explicit"]
    assert [(p.step, p.text) for p in explicit] == [
        (0, WEATHER_JSON), (1, "65"), (1, "Error: city 'Atlantis' not found")]
    for p in explicit:
        completion = episode.steps[p.step].completion
        assert p.source == "completion"
        assert completion[p.start:p.end].startswith("<predict")
        assert 0 <= p.position < 1
    assert [(p.call_index, p.call_id, p.call_name) for p in explicit] == [
        (0, "call_0", "get_weather"), (0, "call_1", "convert"), (1, "call_2", "get_weather")]
    assert explicit[1].observation == "64.4"
    assert explicit[2].observation_is_error is True


def test_call_attribute_wins_over_position():
    episode = fixture_weather_episode()
    step = episode.steps[1]
    # Put the convert block *after* both calls: the attribute still aligns it with convert.
    block = "<predicted_observation call=\"convert\">65</predicted_observation>"
    step.completion = step.completion.replace(block + "\n", "") + "\n" + block
    preds = [p for p in episode_predictions(episode) if p.kind == "explicit" and p.step == 1]
    assert {p.text: p.call_name for p in preds} == {"65": "convert", "Error: city 'Atlantis' not found": "get_weather"}


def test_implicit_predictions_in_reasoning():
    episode = fixture_weather_episode()
    implicit = [p for p in episode_predictions(episode) if p.kind == "implicit"]
    assert [(p.step, p.text) for p in implicit] == [
        (0, "get_weather should return the temperature in celsius, probably 18."),
        (1, "The result should be 65 degrees fahrenheit."),
    ]
    for p in implicit:
        reasoning = episode.steps[p.step].reasoning
        assert p.source == "reasoning" and reasoning[p.start:p.end] == p.text
        assert p.position == pytest.approx(p.start / len(reasoning))
    assert implicit[0].claim == "the temperature in celsius, probably 18."
    assert (implicit[0].call_index, implicit[1].call_index) == (0, 0)
    assert implicit[1].observation == "64.4"


@pytest.mark.parametrize("sentence, is_prediction", [
    ("This should return the list of files.", True),
    ("I expect an error since the file is missing.", True),
    ("The output will be 42.", True),
    ("It'll print hello world.", True),
    ("The call will probably fail with a permission error.", True),
    ("I will return the answer to the user.", False),
    ("I will call get_weather next.", False),
    ("Let me list the directory.", False),
    ("We should give the user a summary.", False),
    ("The user asked for the weather.", False),
])
def test_implicit_cues(sentence, is_prediction):
    assert bool(implicit_predictions(sentence)) is is_prediction


def test_implicit_skips_text_inside_explicit_blocks():
    text = "<prediction>This should return 3.</prediction> The output will be 4."
    found = implicit_predictions(text)
    assert len(found) == 1 and text[found[0][0]:found[0][1]] == "The output will be 4."


def test_prediction_in_step_without_calls_is_unaligned():
    episode = fixture_weather_episode()
    episode.steps[2].reasoning = "The answer should be 18 degrees."
    preds = [p for p in episode_predictions(episode) if p.step == 2]
    assert len(preds) == 1 and preds[0].call_index is None and preds[0].observation is None


def test_act_episode_has_no_explicit_predictions():
    episode = fixture_act_episode("a", "hello", "hello world")
    preds = episode_predictions(episode)
    assert [p.kind for p in preds] == ["implicit"]
    assert preds[0].claim == "the file to contain 'hello'."


def test_self_corrections_counted_per_step():
    episode = fixture_weather_episode()
    assert [self_corrections(s) for s in episode.steps] == [1, 0, 1]


def test_empty_block_is_not_a_prediction():
    episode = fixture_weather_episode()
    step = episode.steps[0]
    step.completion = step.completion.replace(WEATHER_JSON, "")
    assert [p.kind for p in episode_predictions(episode) if p.step == 0] == ["implicit"]


def test_unaligned_and_unverifiable_predictions_say_why():
    from test_trace_fixtures import fixture_call, fixture_step
    from unified.trace import score_prediction
    from unified.types import Episode, Observation

    # a turn without a call: unaligned, reason "no tool call"
    no_call = fixture_step(0, "", "<predicted_observation>42</predicted_observation>\nThe answer is 42.", [], [])
    # parallel calls (block, block, call, call): aligned in order; a block after the calls goes to
    # the last call before it
    a, b = fixture_call("ls", 0), fixture_call("cat", 1, path="x")
    parallel = fixture_step(1, "", "<prediction>a.txt</prediction>\n<prediction>hello</prediction>\n"
                            f"{a.raw}\n{b.raw}\n<prediction>planet</prediction>", [a, b],
                            [("a.txt b.txt", False), ("hello world", False)])
    # calls not written in the completion (structured tool calls): blocks take them in order,
    # a block beyond them has no call left
    s1, s2 = fixture_call("ls", 0), fixture_call("cat", 1, path="x")
    s1.raw = s2.raw = ""
    structured = fixture_step(4, "", "<prediction>a.txt</prediction><prediction>hello</prediction>"
                              "<prediction>extra</prediction>", [s1, s2], [("a.txt", False), ("hello", False)])
    # a call the environment recorded but did not execute (BFCL single-turn categories)
    c = fixture_call("get_weather", 0, city="Paris")
    not_run = fixture_step(2, "", f"<prediction>18</prediction>\n{c.raw}", [c], [])
    not_run.observations = [Observation(call_id=c.id, content="(recorded; not executed)",
                                        metadata={"executed": False})]
    # a call whose observation never came (the environment step failed)
    lost = fixture_step(3, "", f"<prediction>18</prediction>\n{c.raw}", [c], [])
    episode = Episode(benchmark="fixture", task_id="t", trial=0, steps=[no_call, parallel, not_run, lost, structured])
    preds = [score_prediction(p) for p in episode_predictions(episode)]
    got = [(p.step, p.text, p.call_index, p.method, p.correct) for p in preds]
    assert got == [(0, "42", None, "unaligned", None),
                   (1, "a.txt", 0, "rule:facts", True), (1, "hello", 1, "rule:words", True),
                   (1, "planet", 1, "rule:words", False),
                   (2, "18", 0, "unverifiable", None), (3, "18", 0, "unverifiable", None),
                   (4, "a.txt", 0, "rule:facts", True), (4, "hello", 1, "rule:words", True),
                   (4, "extra", None, "unaligned", None)]
    reasons = [p.reason for p in preds]
    assert reasons[0] == "no tool call in this turn" and reasons[1] == reasons[2] == reasons[3] == ""
    assert reasons[4].startswith("the environment did not execute call 0 (get_weather)")
    assert reasons[5] == "no observation came back for call 0 (get_weather)"
    assert reasons[8] == "every call of this turn already has a prediction"
    assert all(p.detail == p.reason for p in preds if p.correct is None)
