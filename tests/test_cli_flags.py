"""Every command-line entry point refuses an abbreviated flag (``--suit ood`` is not ``--suite ood``), and a
refused eval command writes nothing into ``--out``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter contract's format (tests/)


def test_every_argument_parser_in_the_project_refuses_abbreviations():
    """A static check over the source, so a new CLI cannot bring prefix matching back: each
    ``argparse.ArgumentParser(`` call passes ``allow_abbrev=False`` (the project's own
    ``unified.config.ArgumentParser`` sets it by default)."""
    offenders = []
    for path in [*REPO.glob("unified/**/*.py"), *REPO.glob("scripts/*.py"), *REPO.glob("measurements/*.py"),
                 *REPO.glob("evaluators/**/*.py")]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"argparse\.ArgumentParser\(", line) and "allow_abbrev=False" not in line \
                    and not line.lstrip().startswith("class "):
                offenders.append(f"{path.relative_to(REPO)}:{number}")
    assert not offenders, offenders


@pytest.mark.parametrize("module, argv, flag", [
    ("unified.eval.cli", ["--suit", "ood"], "--suite"),
    ("unified.warmup.__main__", ["--dry", "--recipe", "x.yaml"], "--dry-run"),
    ("unified.demo", ["--warmup-step", "1"], "--warmup-steps"),
    ("unified.plot", ["--comp", "a", "b"], None),
    ("unified.view", ["x", "--ou", "y.html"], None),
    ("unified.trace.report", ["x", "--ou", "y"], None),
])
def test_an_abbreviated_flag_is_a_usage_error(module, argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        importlib.import_module(module).main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    abbreviated = next(word for word in argv if word.startswith("--"))
    assert "unrecognized arguments" in err and abbreviated in err, err
    if flag:  # the project's parser points at the flag meant
        assert f"did you mean {flag}?" in err, err


def test_a_refused_eval_command_writes_nothing_into_out(tmp_path, capsys):
    from unified.eval.cli import main

    out = tmp_path / "run"
    for argv in (["--benchmarks", "bfcl_v5", "--model", "gold", "--limit", "1"],
                 ["--suit", "ood", "--model", "gold"],
                 ["--benchmarks", FIXTURE, "--model", "gold", "--set", f"benchmarks.{FIXTURE}.no_such_key=1"]):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--out", str(out)])
        assert exc.value.code == 2
        assert not out.exists(), (argv, sorted(p.name for p in out.iterdir()))
    assert "did you mean 'bfcl_v4'" in capsys.readouterr().err.lower()
