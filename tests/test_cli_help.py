"""The last CLI gaps of a first hour (issue 53): ``unified.plot`` and ``unified.view`` answer a mistyped or
abbreviated flag with one line that says "did you mean" and write nothing; ``python -m unified.eval --help``
names the ``lwm`` subcommand; ``python -m unified.eval lwm --help`` is plain text (no reStructuredText markup)
and shows its defaults."""

from __future__ import annotations

import importlib

import pytest

from unified.config.cli import plain_text

RST_MARKUP = ("``", ":mod:`", ":class:`", ":func:`", "**")


@pytest.mark.parametrize("module, argv, flag", [
    ("unified.plot", ["--comp", "RUN_A", "RUN_B"], "--compare"),
    ("unified.plot", ["WARMUP", "--ou", "OUT"], "--out"),
    ("unified.plot", ["--compare", "RUN_A", "RUN_B", "--lables", "A", "B"], "--labels"),
    ("unified.view", ["RUN", "--ou", "OUT"], "--out"),
    ("unified.view", ["--compar", "RUN_A", "RUN_B"], "--compare"),
])
def test_plot_and_view_say_did_you_mean_in_one_line_and_write_nothing(module, argv, flag, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    argv = [str(run / "x.png") if a == "OUT" else str(run) if a.isupper() and a not in ("A", "B") else a
            for a in argv]
    with pytest.raises(SystemExit) as exc:
        importlib.import_module(module).main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err  # no usage block before the one useful line
    assert f"did you mean {flag}?" in lines[0] and "--help" in lines[0], lines[0]
    assert not captured.out
    assert list(run.iterdir()) == []


def test_eval_help_names_the_lwm_subcommand_in_plain_text(capsys):
    from unified.eval.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    head = text.split("\noptions:", 1)[0]  # named before the long list of options, where a reader looks first
    assert "python -m unified.eval lwm" in head and "python -m unified.eval lwm --help" in head, head
    assert not [m for m in RST_MARKUP if m in text], text


def test_lwm_help_is_plain_text_with_its_defaults(capsys):
    from unified.eval.cli import main
    from unified.lwm import official

    with pytest.raises(SystemExit) as exc:
        main(["lwm", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m unified.eval lwm")
    assert not [m for m in RST_MARKUP if m in text], text
    flat = " ".join(text.split())  # argparse wraps the help column
    for flag, default in [("--batch-size BATCH_SIZE", 8), ("--seed SEED", 0),
                          ("--max-new-tokens MAX_NEW_TOKENS", official.INFER_MAX_TOKENS),
                          ("--judge-attempts JUDGE_ATTEMPTS", official.JUDGE_ATTEMPTS),
                          ("--temperature TEMPERATURE", official.INFER_TEMPERATURE)]:
        after = flat.split(f" {flag} ", 1)[1].split(" --", 1)[0]
        assert f"(default: {default})" in after, (flag, after)
    assert "(default: None)" not in flat
    assert "Two protocols:" in text  # the module's reference, not only its first line


def test_plain_text_drops_rst_markup_and_keeps_the_words():
    doc = ("The eval (``python -m unified.eval lwm``) of :mod:`unified.lwm.official` and :class:`~x.Y`;\n"
           "- **official**: as eval.py::\n\n      a = b\n")
    assert plain_text(doc) == ("The eval (python -m unified.eval lwm) of unified.lwm.official and x.Y;\n"
                               "- official: as eval.py:\n\n      a = b\n")
