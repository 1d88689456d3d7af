"""Official grading of a SWE-bench patch, in a fresh environment on any execution backend.

SWE-bench Verified, with the ``swebench`` package's harness pieces: its ``TestSpec``
(``make_test_spec``: eval script, log parser, eval type), its patch-apply commands, its log
grading (``get_eval_report``). The harness's own runner talks to a Docker daemon only; running
the same steps through :mod:`unified.execution` lets podman, apptainer and the local sandbox
grade too. Resolved = every FAIL_TO_PASS and PASS_TO_PASS test passes (``RESOLVED_FULL``).

SWE-bench Pro, as its ``swe_bench_pro_eval.py`` does: reset to ``base_commit``, ``git apply``
the patch, the last line of ``before_repo_set_cmd``, the instance's ``run_script.sh`` on
``selected_test_files_to_run``, its ``parser.py`` into ``output.json``; resolved = every test of
``fail_to_pass`` and ``pass_to_pass`` is PASSED. The per-instance scripts come from a checkout
of the SWE-bench Pro repository (``run_scripts/<instance_id>/``).

Score of an episode: 1.0 resolved, else 0.0.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from unified.execution import ExecutionSession

from evaluators.swe_bench.data import selected_tests, test_lists


def swebench_unavailable() -> str | None:
    """None when the swebench package can grade, else why not."""
    try:
        import swebench.harness.grading  # noqa: F401
        from swebench.harness.utils import make_test_spec  # noqa: F401
    except ImportError as exc:
        return f"the swebench package is missing or too old ({exc}); pip install 'swebench>=5.0.2'"
    return None


def grade_verified(session: ExecutionSession, row: dict[str, Any], patch: str, timeout_s: float,
                   log_dir: Path | None = None) -> dict[str, Any]:
    """Apply ``patch`` and run the instance's eval script in ``session``; swebench grades the log."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS, TESTS_TIMEOUT
    from swebench.harness.grading import get_eval_report
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS
    from swebench.harness.utils import make_test_spec

    missing = [k for k in ("image", "eval_script", "log_parser", "eval_type") if not row.get(k)]
    if missing:
        return {"resolved": False, "grading_skipped": f"instance lacks {missing} (the swebench>=5 dataset "
                f"schema carries them); cannot grade"}
    spec = make_test_spec(row)
    details: dict[str, Any] = {"backend": session.backend, "patch_lines": patch.count("\n")}
    log = []
    session.write_file("/tmp/unified-eval/patch.diff", patch)
    applied = False
    for attempt, cmd in enumerate(GIT_APPLY_CMDS):
        if attempt:
            session.exec("git checkout -- . ; git clean -fd", timeout_s=120)
        res = session.exec(f"{cmd} /tmp/unified-eval/patch.diff", timeout_s=120)
        if res.exit_code == 0:
            applied = True
            log.append(f"{APPLY_PATCH_PASS}:\n{res.output()}")
            break
    if not applied:
        log.append(f"{APPLY_PATCH_FAIL}")
    else:
        session.write_file("/tmp/unified-eval/eval.sh", spec.eval_script, mode=0o755)
        res = session.exec("bash /tmp/unified-eval/eval.sh 2>&1", timeout_s=timeout_s)
        log.append(res.stdout)
        if res.timed_out:
            log.append(f"\n{TESTS_TIMEOUT}\n")
    text = "\n".join(log)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(log_dir or tmp) / f"{row['instance_id']}.test_output.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        report = get_eval_report(spec, {"instance_id": row["instance_id"], "model_patch": patch,
                                        "model_name_or_path": "unified"}, str(path), include_tests_status=True)
        if log_dir:
            details["log_path"] = str(path)
    entry = report[row["instance_id"]]
    details.update({"resolved": bool(entry.get("resolved")), "patch_applied": applied,
                    "tests_status": entry.get("tests_status"), "log_tail": text[-3000:]})
    return details


def grade_pro(session: ExecutionSession, row: dict[str, Any], patch: str, scripts_dir: Path,
              timeout_s: float) -> dict[str, Any]:
    """SWE-bench Pro's entry script in ``session``; resolved iff F2P and P2P tests all PASSED."""
    iid = row["instance_id"]
    folder = Path(scripts_dir) / iid
    if not (folder / "run_script.sh").is_file() or not (folder / "parser.py").is_file():
        return {"resolved": False, "grading_skipped": f"no run_script.sh/parser.py for {iid} under {scripts_dir}"}
    work = "/tmp/unified-eval"
    session.write_file(f"{work}/patch.diff", _strip_binary_hunks(patch))
    session.write_file(f"{work}/test_patch.diff", row.get("test_patch") or "")
    session.copy_in(folder / "run_script.sh", f"{work}/run_script.sh")
    session.copy_in(folder / "parser.py", f"{work}/parser.py")
    before = str(row.get("before_repo_set_cmd") or "").strip().split("\n")[-1]
    tests = ",".join(selected_tests(row))
    base = row["base_commit"]
    script = "\n".join([f"cd {session.workdir}", f"git reset --hard {base}", f"git checkout {base}",
                        f"git apply -v {work}/patch.diff", before,
                        f"bash {work}/run_script.sh {tests} > {work}/stdout.log 2> {work}/stderr.log",
                        f"python3 {work}/parser.py {work}/stdout.log {work}/stderr.log {work}/output.json"])
    session.write_file(f"{work}/entryscript.sh", script + "\n")
    res = session.exec(["bash", f"{work}/entryscript.sh"], timeout_s=timeout_s)
    details: dict[str, Any] = {"backend": session.backend, "entryscript_exit_code": res.exit_code,
                               "timed_out": res.timed_out, "entryscript_output": res.output()[-3000:]}
    try:
        output = json.loads(session.read_file(f"{work}/output.json"))
    except (FileNotFoundError, ValueError):
        details.update({"resolved": False, "error": "no output.json (see entryscript_output)"})
        return details
    passed = {t["name"] for t in output.get("tests", []) if t.get("status") == "PASSED"}
    f2p, p2p = test_lists(row, "pro")
    details.update({"resolved": (set(f2p) | set(p2p)) <= passed, "tests_passed": sorted(passed),
                    "missing": sorted((set(f2p) | set(p2p)) - passed)})
    return details


def _strip_binary_hunks(patch: str) -> str:
    """Drop ``diff --git`` sections that are binary (Pro's evaluator does the same)."""
    import re

    sections = re.split(r"(?=^diff --git )", patch, flags=re.M)
    keep = [s for s in sections if s.strip() and not re.search(r"^(Binary files .* differ|GIT binary patch)$", s, re.M)]
    return "".join(keep)
