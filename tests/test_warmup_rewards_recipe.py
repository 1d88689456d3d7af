"""A recipe's rewards as one list of entries: the shipped recipes in the older form (three weight
fields + a ``shaping`` section) and in today's form build the same functions, weights and rewards;
the older form loads with one deprecation line; ``--set`` addresses an entry by name or position;
dotted paths load TRL reward functions; recorded identities of the older form still compare."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from trl.rewards import get_repetition_penalty_reward

from unified.config import ConfigError, dump_yaml, to_dict
from unified.inference.judge import Judge
from unified.rewards import CRITERIA, RubricReward, RuleReward, SimilarityReward, build_rewards
from unified.warmup.config import load_warmup_config
from unified.warmup.identity import IDENTITY_FILE, WarmupIdentityMismatch, check_output_dir, recipe_fields, \
    warmup_identity
from unified.warmup.preflight import problems

REPO = Path(__file__).resolve().parents[1]
CPU = REPO / "recipes/warmup/embedded_cpu.yaml"
PAPER = REPO / "recipes/warmup/qwen35_35b_a3b.yaml"

# the shipped recipes' reward settings as they were written in the older form
OLD_FORM = {
    "embedded_cpu.yaml": {
        "rewards": {"rubric_weight": 0.0, "rule_weight": 0.0, "similarity_weight": 1.0, "similarity_metric": "lcs_f1"},
        "shaping": {"repetition_weight": 5.0, "repetition_ngram": 3},
    },
    "qwen35_35b_a3b.yaml": {
        "rewards": {"judge_endpoint": "", "rubric_weight": 0.9, "rule_weight": 0.1, "judge_max_concurrency": 64,
                    "judge_timeout_s": 120.0, "judge_max_retries": 2},  # 300 s x 5 is refused now (test_warmup_judge_failures)
    },
}


class ContentJudge(Judge):
    """A judge with no model whose 1-5 scores depend on the request text (distinct rewards per completion)."""

    def __init__(self) -> None:
        super().__init__(model=None, name="content-judge")

    def answer(self, requests):
        out = []
        for request in requests:
            digest = hashlib.sha256(request[-1]["content"].encode()).digest()
            out.append("<scores>\n" + "\n".join(f"{c}: {1 + digest[i] % 5}" for i, c in enumerate(CRITERIA))
                       + "\n</scores>")
        return out


def _old_form_recipe(recipe: Path, tmp_path: Path) -> Path:
    data = yaml.safe_load(recipe.read_text())
    data.pop("rewards")
    data.update(OLD_FORM[recipe.name])
    path = tmp_path / f"old_{recipe.name}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _old_build(recipe_name: str, judge: Judge, *, training: bool):
    """What the older code built for each shipped recipe (its fixed order rubric, rule, similarity, shaping)."""
    if recipe_name == "embedded_cpu.yaml":
        funcs, weights = [SimilarityReward("lcs_f1")], [1.0]
        if training:
            funcs.append(get_repetition_penalty_reward(ngram_size=3, max_penalty=-1.0))
            weights.append(5.0)
        return funcs, weights
    return [RubricReward(judge, max_chars=3000, max_history=4), RuleReward()], [0.9, 0.1]


def _batch():
    prompts = [[{"role": "system", "content": "terminal"}, {"role": "user", "content": f"cat f{i}"}] for i in range(4)]
    completions = ["hello 0 world", "<observation>hello world 1</observation>", "``` ``` ``` ``` ```", '{"a": 1}']
    columns = {"reference": ["hello 0 world", "hello 1 world", "x", '{"a": 1}'], "domain": ["terminal"] * 4,
               "completion_ids": [[1, 2, 3, 4], [5, 6, 7, 8, 9], [7, 8, 7, 8, 7, 8, 7], [1, 1, 1, 1, 2]]}
    return prompts, completions, columns


def _mixed(funcs, weights) -> list[float]:
    """TRL's R_i = sum_k w_k r_k,i over one batch."""
    prompts, completions, columns = _batch()
    per_func = [f(prompts=prompts, completions=completions, **columns) for f in funcs]  # as TRL calls them
    return [sum(w * values[i] for w, values in zip(weights, per_func)) for i in range(len(completions))]


NO_OLD_FORM = {"agentic_cpu.yaml"}
"""Shipped recipes the older form cannot express (a ``benchmark`` entry came after it)."""


@pytest.mark.parametrize("recipe", [CPU, PAPER], ids=lambda p: p.name)
def test_old_and_new_form_of_each_shipped_recipe_are_the_same_rewards(recipe, tmp_path, capsys):
    shipped = {p.name for p in (REPO / "recipes/warmup").glob("*.yaml")} - NO_OLD_FORM
    assert set(OLD_FORM) == shipped  # every shipped recipe that the older form can express
    old_path = _old_form_recipe(recipe, tmp_path)
    new, old = load_warmup_config(recipe), load_warmup_config(old_path)
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "deprecated" in line]
    assert len(notes) == 1 and str(old_path) in notes[0] and "rewards: [{name:" in notes[0], err
    assert to_dict(old) == to_dict(new) and recipe_fields(old) == recipe_fields(new)
    judge = ContentJudge()
    for training in (True, False):
        funcs, weights = build_rewards(new.rewards, training=training, judge=judge)
        old_funcs, old_weights = build_rewards(old.rewards, training=training, judge=judge)
        before_funcs, before_weights = _old_build(recipe.name, judge, training=training)
        names = [f.__name__ for f in funcs]
        assert names == [f.__name__ for f in old_funcs] == [f.__name__ for f in before_funcs]
        assert weights == old_weights == before_weights
        assert _mixed(funcs, weights) == _mixed(old_funcs, old_weights) == _mixed(before_funcs, before_weights)
    if recipe == CPU:  # the shaping term changes the training reward of the loop, not the held-out score
        train = _mixed(*build_rewards(new.rewards, judge=judge))
        heldout = _mixed(*build_rewards(new.rewards, training=False, judge=judge))
        assert train[0] == heldout[0] == 25.0 and train[2] < heldout[2]
    # the resolved recipe (recipe.resolved.yaml) reads back to the same list, without a note
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(dump_yaml(new))
    assert to_dict(load_warmup_config(resolved)) == to_dict(new) and "deprecated" not in capsys.readouterr().err


def test_set_addresses_an_entry_by_name_or_position_and_adds_a_new_name():
    cfg = load_warmup_config(CPU, ["rewards.similarity.weight=0.5", "rewards.1.ngram=2",
                                   "rewards.rule.weight=0.1"])
    assert [(e.name, e.weight) for e in cfg.rewards] == [("similarity", 0.5), ("repetition", 5.0), ("rule", 0.1)]
    assert cfg.rewards[1].ngram == 2 and cfg.rewards[1].training_only and not cfg.rewards[2].training_only
    # without a recipe, the default list (rubric 0.9, rule 0.1) is the one edited
    cfg = load_warmup_config(None, ["rewards.rule.weight=1", "rewards.rubric.judge_model=embedded"])
    assert [(e.name, e.weight) for e in cfg.rewards] == [("rubric", 0.9), ("rule", 1.0)]
    assert cfg.rewards[0].judge_model == "embedded"
    # an option alone adds an entry of weight 0, which builds nothing (a judge given to a recipe without a rubric)
    cfg = load_warmup_config(CPU, ["rewards.rubric.judge_endpoint=openai:http://judge:8001/v1#judge"])
    assert [(e.name, e.weight) for e in cfg.rewards] == [("similarity", 1.0), ("repetition", 5.0), ("rubric", 0.0)]
    assert [f.__name__ for f in build_rewards(cfg.rewards)[0]] == ["similarity", "repetition_penalty_reward"]
    # a whole list
    cfg = load_warmup_config(CPU, ["rewards=[{name: rule, weight: 1}]"])
    assert [(e.name, e.weight) for e in cfg.rewards] == [("rule", 1.0)]


def test_the_older_set_keys_still_work_with_a_deprecation_line(capsys):
    cfg = load_warmup_config(CPU, ["shaping.repetition_weight=2", "rewards.similarity_metric=token_f1"])
    assert [(e.name, e.weight) for e in cfg.rewards] == [("similarity", 1.0), ("repetition", 2.0)]
    assert cfg.rewards[0].metric == "token_f1"
    err = capsys.readouterr().err
    assert "--set shaping.repetition_weight is now --set rewards.repetition.weight" in err


@pytest.mark.parametrize(("overrides", "message"), [
    (["rewards.similarty.weight=1"], "--set rewards.similarty.weight=1: rewards[2].name: unknown reward 'similarty'. "
                                     "Did you mean 'similarity'?"),
    (["rewards.similarity.metrc=x"], "--set rewards.similarity.metrc=x: rewards[0]: unknown key 'metrc'. "
                                     "Did you mean 'metric'?"),
    (["rewards.similarity.metric=lcs"], "--set rewards.similarity.metric=lcs: rewards[0].metric: unknown "
                                        "similarity metric 'lcs'"),
    (["rewards.repetition.weight=-1"], "--set rewards.repetition.weight=-1: rewards[1].weight: expected a value >= 0"),
    (["rewards.weight=1"], "rewards is a list of entries: set a key of one entry, by name or position"),
    (["rewards.7.weight=1"], "rewards has 2 entries, no entry 7"),
    (["rewards.similarity.weight=0"], "rewards: no entry with a weight > 0 outside training_only"),
    (["rewards=[{name: rule, weight: 1}, {name: rule, weight: 2}]"], "'rule' is listed twice"),
])
def test_bad_entries_are_one_line_naming_the_flag_or_file(overrides, message):
    with pytest.raises(ConfigError) as exc:
        load_warmup_config(CPU, overrides)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_bad_entries_in_a_file_name_its_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("rewards:\n  - {name: rule, weight: 1}\n  - name: simlarity\n    weight: 1\n")
    with pytest.raises(ConfigError, match=rf"^{recipe}:3: rewards\[1\]\.name: unknown reward 'simlarity'"):
        load_warmup_config(recipe)
    recipe.write_text("rewards:\n  - name: similarity\n    weight: 1\n    metrc: lcs_f1\n")
    with pytest.raises(ConfigError, match=rf"^{recipe}:4: rewards\[0\]: unknown key 'metrc'"):
        load_warmup_config(recipe)
    recipe.write_text("rewards:\n  rubric_wieght: 1\n")  # a typo in the older form: its own keys listed
    with pytest.raises(ConfigError, match=rf"^{recipe}: rewards: unknown key 'rubric_wieght'. Did you mean "
                                          "'rubric_weight'"):
        load_warmup_config(recipe)


def test_a_dotted_path_loads_a_trl_reward_function_or_a_factory(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"rewards": [
        {"name": "similarity", "weight": 1.0},
        {"name": "_warmup_support:token_f1", "weight": 0.5},
        {"name": "trl.rewards:get_repetition_penalty_reward", "weight": 5.0, "training_only": True,
         "args": {"ngram_size": 3, "max_penalty": -1.0}},
    ]}))
    cfg = load_warmup_config(recipe)
    funcs, weights = build_rewards(cfg.rewards)
    assert [f.__name__ for f in funcs] == ["similarity", "token_f1", "repetition_penalty_reward"]
    assert weights == [1.0, 0.5, 5.0]
    assert [f.__name__ for f in build_rewards(cfg.rewards, training=False)[0]] == ["similarity", "token_f1"]
    # the factory's function is TRL's repetition term: the same values as the registered entry
    shipped = build_rewards(load_warmup_config(CPU).rewards)
    assert _mixed(funcs[:1] + funcs[2:], [1.0, 5.0]) == _mixed(*shipped)
    assert problems(cfg) == [] or all("data." in p for p in problems(cfg))
    broken = load_warmup_config(recipe, ["rewards=[{name: similarity, weight: 1}, {name: 'no_such_pkg.m:f', "
                                         "weight: 1}]"])
    lines = [p for p in problems(broken) if p.startswith("rewards")]
    assert len(lines) == 1 and "no_such_pkg.m:f" in lines[0] and "ModuleNotFoundError" in lines[0]


def test_a_recorded_identity_of_the_older_form_compares_in_todays_keys(tmp_path):
    cfg = load_warmup_config(CPU, [f"output_dir={tmp_path}"])
    fields = {k: v for k, v in warmup_identity(cfg)["fields"].items() if not k.startswith("rewards.")}
    fields.update({"rewards.judge_endpoint": "", "rewards.judge_model": "", "rewards.rubric_weight": 0.0,
                   "rewards.rule_weight": 0.0, "rewards.similarity_weight": 1.0, "rewards.similarity_metric": "lcs_f1",
                   "rewards.judge_max_tokens": 256, "rewards.judge_temperature": 0.0, "rewards.judge_thinking": False,
                   "rewards.judge_max_chars": 3000, "rewards.judge_max_history": 4,
                   "shaping.repetition_weight": 5.0, "shaping.repetition_ngram": 3})
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / IDENTITY_FILE).write_text(json.dumps({"fields": fields}))
    assert check_output_dir(cfg) == []  # the same recipe: resumes
    other = load_warmup_config(CPU, [f"output_dir={tmp_path}", "rewards.repetition.weight=2"])
    with pytest.raises(WarmupIdentityMismatch, match=r"rewards\.repetition\.weight 5\.0 -> 2\.0"):
        check_output_dir(other)
