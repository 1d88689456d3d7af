"""SWE-bench Verified and SWE-bench Pro instances, read with the ``datasets`` loader.

Sources, first that is set:

- the adapter's ``dataset`` config: a local file (``.json``/``.jsonl``/``.parquet``), a
  directory (``save_to_disk`` output, or parquet/json files) or, on a cluster with hub
  access, a hub id (``princeton-nlp/SWE-bench_Verified``, ``ScaleAI/SWE-bench_Pro``);
- ``$SWE_BENCH_VERIFIED_DATA`` / ``$SWE_BENCH_PRO_DATA``;
- ``$UNIFIED_FIXTURES_DIR/swe_bench/fixture_{verified,pro}.jsonl`` (our fixture instances).

Fields used (Verified): ``instance_id, repo, base_commit, problem_statement, patch,
test_patch, FAIL_TO_PASS, PASS_TO_PASS``, and for grading either the swebench>=5 dataset schema
(the row carries ``image, eval_script, log_parser, eval_type``: ``SWE-bench/SWE-bench_Verified``
today) or the classic one (``version``, ``environment_setup_commit``, no eval script:
``princeton-nlp/SWE-bench_Verified``), whose test spec only swebench<5 can build
(:func:`row_schema`, :mod:`.grading`). Pro: ``instance_id, repo, base_commit,
problem_statement, requirements, interface, patch, test_patch, fail_to_pass, pass_to_pass``
(Python-literal lists), ``before_repo_set_cmd, selected_test_files_to_run, dockerhub_tag``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

from unified.benchmarks.contract import BenchmarkUnavailable

HUB_IDS = {"verified": "princeton-nlp/SWE-bench_Verified", "pro": "ScaleAI/SWE-bench_Pro"}
DATA_ENV = {"verified": "SWE_BENCH_VERIFIED_DATA", "pro": "SWE_BENCH_PRO_DATA"}
FIXTURES_ENV = "UNIFIED_FIXTURES_DIR"
REQUIRED = {
    "verified": ["instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS",
                 "PASS_TO_PASS"],
    "pro": ["instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "fail_to_pass",
            "pass_to_pass", "before_repo_set_cmd", "selected_test_files_to_run"],
}


class InstanceFormatError(ValueError):
    """An instance missing a field or holding an unreadable one (names source, row and field)."""


def resolve_source(variant: str, dataset: str | None) -> str:
    """Where the instances come from (see the module docstring)."""
    if dataset:
        return str(dataset)
    if os.environ.get(DATA_ENV[variant]):
        return os.environ[DATA_ENV[variant]]
    if os.environ.get(FIXTURES_ENV):
        return str(Path(os.environ[FIXTURES_ENV]) / "swe_bench" / f"fixture_{variant}.jsonl")
    raise BenchmarkUnavailable(
        f"no SWE-bench {variant} dataset configured",
        f"set ${DATA_ENV[variant]} to a local copy (jsonl/parquet/save_to_disk dir) or to the hub id "
        f"{HUB_IDS[variant]} on a node with hub access; for the fixtures set {FIXTURES_ENV}=tests/fixtures")


def load_rows(source: str, split: str = "test") -> list[dict[str, Any]]:
    """Rows of ``source`` through ``datasets`` (local file or directory, else a hub id)."""
    import datasets

    path = Path(source)
    try:
        if path.is_file():
            kind = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(path.suffix)
            if kind is None:
                raise BenchmarkUnavailable(f"{path}: unsupported file type", "give a .jsonl, .json or .parquet file")
            ds = datasets.load_dataset(kind, data_files=str(path), split="train")
        elif path.is_dir():
            if (path / "dataset_info.json").exists() or (path / "state.json").exists():
                ds = datasets.load_from_disk(str(path))
                if isinstance(ds, datasets.DatasetDict):
                    ds = ds[split]
            else:
                ds = datasets.load_dataset(str(path), split=split)
        elif "/" in source and not source.startswith((".", "/")):
            ds = datasets.load_dataset(source, split=split)
        else:
            raise BenchmarkUnavailable(f"dataset {source} does not exist", "check the path")
    except BenchmarkUnavailable:
        raise
    except Exception as exc:  # offline hub, corrupt file ...
        raise BenchmarkUnavailable(f"cannot load {source}: {type(exc).__name__}: {str(exc)[:300]}",
                                   "use a local copy of the dataset (the hub is unreachable here?)") from None
    return [dict(row) for row in ds]


def check_rows(rows: list[dict[str, Any]], variant: str, source: str) -> list[tuple[dict[str, Any], str | None]]:
    """Each row with None, or with the reason it cannot be used (missing/unreadable field)."""
    out = []
    for i, row in enumerate(rows, start=1):
        missing = [k for k in REQUIRED[variant] if row.get(k) in (None, "") and k not in ("PASS_TO_PASS", "pass_to_pass")]
        problem = f"{source}: row {i} ({row.get('instance_id', '?')}): missing field(s) {missing}" if missing else None
        if problem is None:
            try:
                test_lists(row, variant)
            except InstanceFormatError as exc:
                problem = f"{source}: row {i}: {exc}"
        out.append((row, problem))
    return out


def _as_list(value: Any, field: str, iid: str) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if value in (None, ""):
        return []
    text = str(value)
    for parse in (json.loads, ast.literal_eval):  # safe: Pro stores Python literals; literal_eval only
        try:
            parsed = parse(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(parsed, list):
            return [str(v) for v in parsed]
    raise InstanceFormatError(f"{iid}: field {field} is not a list: {text[:80]!r}")


def test_lists(row: dict[str, Any], variant: str) -> tuple[list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS) of an instance as lists."""
    iid = str(row.get("instance_id"))
    if variant == "verified":
        return _as_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", iid), _as_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", iid)
    return _as_list(row.get("fail_to_pass"), "fail_to_pass", iid), _as_list(row.get("pass_to_pass"), "pass_to_pass", iid)


def selected_tests(row: dict[str, Any]) -> list[str]:
    return _as_list(row.get("selected_test_files_to_run"), "selected_test_files_to_run", str(row.get("instance_id")))


SWEBENCH5_FIELDS = ("image", "eval_script", "log_parser", "eval_type")


def row_schema(row: dict[str, Any]) -> str:
    """``swebench5`` when the row carries its own eval script and image, else ``classic``."""
    return "swebench5" if all(row.get(k) for k in SWEBENCH5_FIELDS) else "classic"


def image_for(row: dict[str, Any], variant: str) -> str:
    """The instance's official evaluation image, fully qualified (``docker.io/...``) so podman pulls it.

    Verified: the row's ``image`` (swebench>=5 schema), else the name swebench derives for the
    instance (``swebench.task.checks.expected_image``: ``swebench/sweb.eval.x86_64.<id>:latest``
    with ``__`` spelled ``_1776_``). Pro: ``jefzda/sweap-images:<dockerhub_tag>``.
    """
    from unified.execution.containers import qualify_image

    if row.get("image"):
        return qualify_image(str(row["image"]))
    if variant == "pro" and row.get("dockerhub_tag"):
        return qualify_image(f"jefzda/sweap-images:{row['dockerhub_tag']}")
    try:
        from swebench.task.checks import expected_image
    except ImportError:  # swebench<5 or none: the same rule, spelled out
        key = f"sweb.eval.x86_64.{row['instance_id']}:latest".lower()
        return qualify_image(f"swebench/{key}".replace("__", "_1776_"))
    return qualify_image(expected_image(str(row["instance_id"])))
