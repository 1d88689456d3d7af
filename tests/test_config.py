from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from unified.config import ConfigError, apply_overrides, dump_yaml, from_dict, load_config, to_dict
from unified.registry import UnknownNameError


@dataclass
class Optim:
    learning_rate: float = 1e-6
    clip: tuple[float, float] = (3e-4, 4e-4)


@dataclass
class Recipe:
    model: str
    steps: int = 10
    bf16: bool = False
    mode: Literal["server", "colocate"] = "colocate"
    optim: Optim = field(default_factory=Optim)
    suites: list[str] = field(default_factory=lambda: ["ood"])
    output: Path | None = None


def write(tmp_path, text):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_load_types_and_nested(tmp_path):
    path = write(tmp_path, "model: embedded\nsteps: 3\noptim:\n  learning_rate: 3e-4\n  clip: [0.1, 0.2]\n"
                           "output: runs/x\n")
    cfg = load_config(Recipe, path)
    assert cfg.steps == 3 and cfg.optim.learning_rate == pytest.approx(3e-4)
    assert cfg.optim.clip == (0.1, 0.2) and cfg.output == Path("runs/x")
    assert to_dict(cfg)["output"] == "runs/x"


def test_unknown_key_names_file_line_and_valid_keys(tmp_path):
    path = write(tmp_path, "model: embedded\noptim:\n  learning_rat: 1.0\n")
    with pytest.raises(UnknownNameError) as info:
        load_config(Recipe, path)
    msg = str(info.value)
    assert f"{path}:3" in msg and "optim" in msg
    assert "Did you mean 'learning_rate'" in msg and "clip, learning_rate" in msg


def test_wrong_type_names_field_and_line(tmp_path):
    path = write(tmp_path, "model: embedded\nsteps: many\n")
    with pytest.raises(ConfigError, match=r"recipe.yaml:2: steps: expected an integer, got 'many'"):
        load_config(Recipe, path)


def test_literal_choice_is_checked():
    with pytest.raises(UnknownNameError, match="unknown value 'sever'.*Did you mean 'server'"):
        from_dict(Recipe, {"model": "m", "mode": "sever"})


def test_missing_required_key():
    with pytest.raises(ConfigError, match="missing required key.*model"):
        from_dict(Recipe, {})


def test_overrides_parse_yaml_values(tmp_path):
    path = write(tmp_path, "model: embedded\n")
    cfg = load_config(Recipe, path, ["optim.learning_rate=2e-6", "bf16=true", "suites=[ood, in_domain]",
                                     "mode=server"])
    assert cfg.optim.learning_rate == pytest.approx(2e-6) and cfg.bf16 is True
    assert cfg.suites == ["ood", "in_domain"] and cfg.mode == "server"
    with pytest.raises(UnknownNameError, match="unknown key 'stepz'"):
        load_config(Recipe, path, ["stepz=3"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_overrides({}, ["steps"])
    with pytest.raises(ConfigError, match="is a value, not a section"):
        apply_overrides({"model": "x"}, ["model.name=3"])


def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(Recipe, write(tmp_path, "model: [unclosed\n"))
    with pytest.raises(ConfigError, match="not found"):
        load_config(Recipe, tmp_path / "nope.yaml")


def test_dump_round_trip(tmp_path):
    cfg = from_dict(Recipe, {"model": "embedded", "steps": 7})
    again = load_config(Recipe, write(tmp_path, dump_yaml(cfg)))
    assert to_dict(again) == to_dict(cfg)
    assert again.steps == 7 and again.optim.clip == (3e-4, 4e-4)


def test_on_off_stay_strings_for_string_settings_and_still_mean_booleans_for_boolean_ones(tmp_path):
    """YAML 1.1 reads on/off/yes/no as booleans, so ``--set benchmarks.X.network=off`` reached a string
    setting as False and was rejected; the loader uses YAML 1.2 booleans (true/false only)."""
    from dataclasses import dataclass

    from unified.config import apply_overrides, from_dict, read_yaml

    @dataclass
    class Section:
        network: str = "on"
        verbose: bool = False

    data = apply_overrides({}, ["network=off", "verbose=on"])
    assert data == {"network": "off", "verbose": "on"}
    assert from_dict(Section, data) == Section(network="off", verbose=True)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("network: off\nverbose: yes\n")
    assert from_dict(Section, read_yaml(recipe)[0]) == Section(network="off", verbose=True)
    assert apply_overrides({}, ["flag=true", "other=False"]) == {"flag": True, "other": False}
