"""``unified.trace.report.caller_path``: the notebooks' relative ``UNIFIED_*`` paths are read from the
directory the user ran the command in (``$PWD``), not from the kernel's working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from unified.trace.report import caller_path, main


def test_relative_path_is_read_from_the_callers_directory(tmp_path: Path, monkeypatch):
    caller, kernel = tmp_path / "repo", tmp_path / "repo" / "notebooks"
    (caller / "runs" / "pta").mkdir(parents=True)
    kernel.mkdir()
    monkeypatch.chdir(kernel)  # where jupyter execute starts the kernel
    monkeypatch.setenv("PWD", str(caller))  # what the shell that ran it exported
    assert caller_path("runs/pta", must_exist=True) == caller / "runs" / "pta"
    assert caller_path("runs/new-figures") == caller / "runs" / "new-figures"  # outputs too
    assert caller_path(str(kernel)) == kernel


def test_found_from_the_cwd_when_not_from_pwd_and_error_names_both(tmp_path: Path, monkeypatch):
    (tmp_path / "here" / "run").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")  # e.g. a Jupyter server started in another directory
    monkeypatch.setenv("PWD", str(tmp_path / "elsewhere"))
    assert caller_path("run", must_exist=True) == tmp_path / "here" / "run"
    with pytest.raises(FileNotFoundError) as err:
        caller_path("missing", must_exist=True, what="UNIFIED_RUN_DIR")
    message = str(err.value)
    assert "UNIFIED_RUN_DIR missing" in message and str(tmp_path / "elsewhere" / "missing") in message
    assert str(tmp_path / "here" / "missing") in message and "\n" not in message


def test_stale_or_relative_pwd_falls_back_to_the_cwd(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path / "gone"))
    assert caller_path("x") == tmp_path / "x"
    monkeypatch.setenv("PWD", "relative")
    assert caller_path("x") == tmp_path / "x"


def test_cli_usage_errors_are_one_line(tmp_path: Path, capsys):
    assert main([]) == 2
    assert main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("unified.trace: error:") for line in err)
