"""Official grading of a SWE-bench patch, in a fresh environment on any execution backend.

SWE-bench Verified, with the ``swebench`` package's harness pieces: its ``TestSpec``
(``make_test_spec``: eval script, log parser, eval type), its patch-apply commands and the
"already applied" reverse check of its ``run_evaluation`` (when every apply command fails,
``git apply --check --reverse`` passing means the patch is in), its log grading
(``get_eval_report``). A row in the swebench>=5 schema is built with swebench>=5's
``swebench.harness.utils.make_test_spec``; a classic row either gets those fields from a swebench
task repository (``task_repo``: a checkout of SWE-bench/swe-bench-tasks, read with
``swebench.task.repo.load_task_repo``) and is then built the same way, or is built with swebench<5's
``swebench.harness.test_spec.test_spec.make_test_spec`` (swebench 5 dropped the per-repository
specs that build a classic row's eval script). Which of the two an instance needs, and whether
the installed swebench has it, is decided before any rollout (:func:`grading_problem`), so an
instance that cannot be graded is skipped for every trial. The harness's own runner talks to a
Docker daemon only; running the same steps through :mod:`unified.execution` lets podman,
apptainer and the local sandbox grade too. Resolved = every FAIL_TO_PASS and PASS_TO_PASS test
passes (``RESOLVED_FULL``). Grading has the network, as the official harnesses' containers do.

SWE-bench Pro, as its ``swe_bench_pro_eval.py`` does: reset to ``base_commit``, ``git apply``
the patch, the last line of ``before_repo_set_cmd``, the instance's ``run_script.sh`` on
``selected_test_files_to_run``, its ``parser.py`` (run as ``python``, as the official entry script
does) into ``output.json``; resolved = every test of
``fail_to_pass`` and ``pass_to_pass`` is PASSED. The per-instance scripts come from a checkout
of the SWE-bench Pro repository (``run_scripts/<instance_id>/``).

Score of an episode: 1.0 resolved, else 0.0. When the tests never ran (swebench's log parser
finds no test status; Pro: no ``output.json`` or no test in it) and the output shows a download,
DNS, package-index or interpreter failure (:mod:`unified.execution.infra`), ``details
["infrastructure"]`` holds that evidence and the adapter records ``error: infrastructure``
instead of a 0, but only when the instance's reference patch, graded the same way on a fresh
checkout, fails the same way (once per instance and run: the model's patch shapes the output that
shows the failure, :class:`unified.execution.infra.InfrastructureBaselines`); otherwise the 0 stands.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from unified.execution import ExecutionSession
from unified.execution.infra import infrastructure_evidence

from evaluators.swe_bench.data import SWEBENCH5_FIELDS, row_schema, selected_tests, test_lists


def swebench_unavailable() -> str | None:
    """None when the swebench package can grade, else why not."""
    try:
        import swebench.harness.grading  # noqa: F401
    except ImportError as exc:
        return f"the swebench package is missing ({exc}); pip install 'swebench>=5.0.2'"
    return None


def spec_builder(schema: str):
    """swebench's ``make_test_spec`` for rows of ``schema`` (``swebench5``/``classic``), or a string: why none."""
    problem = swebench_unavailable()
    if problem:
        return problem
    if schema == "swebench5":
        try:
            from swebench.harness.utils import make_test_spec
        except ImportError:
            return ("this row is in the swebench>=5 dataset schema (image/eval_script/log_parser/eval_type) but the "
                    "installed swebench is older; pip install 'swebench>=5.0.2'")
        return make_test_spec
    try:
        from swebench.harness.test_spec.test_spec import make_test_spec as legacy
    except ImportError:
        import swebench

        return (f"this row is in the classic dataset schema (no eval_script/image), whose test spec only swebench<5 "
                f"can build (installed: {getattr(swebench, '__version__', '?')}); point task_repo/$SWE_BENCH_TASK_REPO "
                "at a checkout of SWE-bench/swe-bench-tasks, use the current SWE-bench/SWE-bench_Verified dataset (it "
                "carries eval_script) or pip install 'swebench==4.1.0'")
    return lambda row: legacy(row, namespace="swebench")


def complete_from_task_repo(row: dict[str, Any], task_repo: Path) -> dict[str, Any] | str:
    """A classic row with ``image, eval_script, log_parser, eval_type`` taken from a swebench task repository
    (a checkout of SWE-bench/swe-bench-tasks, read with ``swebench.task.repo.load_task_repo``), or why not."""
    try:
        from swebench.task.repo import load_task_repo
    except ImportError:
        return "reading a task repository needs swebench>=5 (pip install 'swebench>=5.0.2')"
    iid = str(row["instance_id"])
    try:
        task = load_task_repo(task_repo, [iid])[0]
    except (KeyError, FileNotFoundError) as exc:
        return f"{iid} is not in the task repository {task_repo}: {exc}"
    if str(task.get("base_commit")) != str(row["base_commit"]):
        return f"{task_repo}/tasks/{iid}: base_commit {task.get('base_commit')} != the row's {row['base_commit']}"
    missing = [k for k in SWEBENCH5_FIELDS if not task.get(k)]
    if missing:
        return f"{task_repo}/tasks/{iid} lacks {missing}"
    return {**row, **{k: task[k] for k in SWEBENCH5_FIELDS}}


def grading_problem(row: dict[str, Any], variant: str, scripts_dir: Path | None) -> str | None:
    """Why this instance cannot be graded here (None: it can); checked before any rollout."""
    if variant == "verified":
        builder = spec_builder(row_schema(row))
        return builder if isinstance(builder, str) else None
    iid = str(row["instance_id"])
    if scripts_dir is None:
        return "no SWE-bench Pro run_scripts (set $SWE_BENCH_PRO_SCRIPTS to run_scripts/ of a SWE-bench_Pro-os checkout)"
    folder = Path(scripts_dir) / iid
    if not (folder / "run_script.sh").is_file() or not (folder / "parser.py").is_file():
        return f"no run_script.sh/parser.py for {iid} under {scripts_dir}"
    return None


def grade_verified(session: ExecutionSession, row: dict[str, Any], patch: str, timeout_s: float,
                   log_dir: Path | None = None) -> dict[str, Any]:
    """Apply ``patch`` and run the instance's eval script in ``session``; swebench grades the log."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS, TESTS_TIMEOUT
    from swebench.harness.grading import get_eval_report, get_logs_eval
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    builder = spec_builder(row_schema(row))
    if isinstance(builder, str):
        raise RuntimeError(f"cannot grade {row['instance_id']}: {builder}")
    spec = builder(row)
    details: dict[str, Any] = {"backend": session.backend, "patch_lines": patch.count("\n"),
                               "dataset_schema": row_schema(row)}
    log = []
    session.write_file("/tmp/unified-eval/patch.diff", patch)
    applied = False
    res = None
    for attempt, cmd in enumerate(GIT_APPLY_CMDS):
        if attempt:
            session.exec("git checkout -- . ; git clean -fd", timeout_s=120)
        res = session.exec(f"{cmd} /tmp/unified-eval/patch.diff", timeout_s=120)
        if res.exit_code == 0:
            applied = True
            log.append(f"{APPLY_PATCH_PASS}:\n{res.output()}")
            break
    if not applied:  # the official "already applied" check: the chain can leave the patch in place
        if session.exec("git apply --check --reverse /tmp/unified-eval/patch.diff", timeout_s=120).exit_code == 0:
            applied = True
            details["patch_already_applied"] = True
            log.append(f"{APPLY_PATCH_PASS}: verified already applied")
    if not applied:
        log.append(f"{APPLY_PATCH_FAIL}:\n{res.output() if res is not None else ''}")
    else:
        session.write_file("/tmp/unified-eval/eval.sh", spec.eval_script, mode=0o755)
        res = session.exec("/bin/bash /tmp/unified-eval/eval.sh 2>&1", timeout_s=timeout_s,
                           env=session.verifier_env(safe_path=False))  # a fresh HOME: the patch may add files to the repo
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
        status_map, found = get_logs_eval(spec, str(path))
        if applied and not (found and status_map):  # the tests never ran: the machine's fault?
            details["infrastructure"] = infrastructure_evidence(text)
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
    problem = grading_problem(row, "pro", scripts_dir)
    if problem:
        raise RuntimeError(f"cannot grade {iid}: {problem}")
    work = "/tmp/unified-eval"
    session.write_file(f"{work}/patch.diff", _strip_binary_hunks(patch))
    session.write_file(f"{work}/test_patch.diff", row.get("test_patch") or "")
    session.copy_in(folder / "run_script.sh", f"{work}/run_script.sh")
    session.copy_in(folder / "parser.py", f"{work}/parser.py")
    before = str(row.get("before_repo_set_cmd") or "").strip().split("\n")[-1]
    tests = ",".join(selected_tests(row))
    base = row["base_commit"]
    # the official entry script runs `python`; where an environment has only python3 (the local sandbox on
    # some hosts) a function stands in for it, so the official line itself stays unchanged
    shim = "command -v python >/dev/null 2>&1 || python() { python3 \"$@\"; }"
    script = "\n".join([shim, f"cd {session.workdir}", f"git reset --hard {base}", f"git checkout {base}",
                        f"git apply -v {work}/patch.diff", before,
                        f"bash {work}/run_script.sh {tests} > {work}/stdout.log 2> {work}/stderr.log",
                        f"python {work}/parser.py {work}/stdout.log {work}/stderr.log {work}/output.json"])
    session.write_file(f"{work}/entryscript.sh", script + "\n")
    res = session.exec(["bash", f"{work}/entryscript.sh"], timeout_s=timeout_s, env=session.verifier_env(safe_path=False))
    details: dict[str, Any] = {"backend": session.backend, "entryscript": script, "entryscript_exit_code": res.exit_code,
                               "timed_out": res.timed_out, "entryscript_output": res.output()[-3000:]}
    try:
        output = json.loads(session.read_file(f"{work}/output.json"))
    except (FileNotFoundError, ValueError):
        details.update({"resolved": False, "error": "no output.json (see entryscript_output)",
                        "infrastructure": _pro_evidence(session, work, res.output())})
        return details
    if not output.get("tests"):
        details["infrastructure"] = _pro_evidence(session, work, res.output())
    passed = {t["name"] for t in output.get("tests", []) if t.get("status") == "PASSED"}
    f2p, p2p = test_lists(row, "pro")
    details.update({"resolved": (set(f2p) | set(p2p)) <= passed, "tests_passed": sorted(passed),
                    "missing": sorted((set(f2p) | set(p2p)) - passed)})
    return details


def _pro_evidence(session: ExecutionSession, work: str, output: str) -> list[str]:
    """Infrastructure evidence from the entry script's output and the run script's logs (no test ran)."""
    texts = [output]
    for name in ("stdout.log", "stderr.log"):
        try:
            texts.append(session.read_file(f"{work}/{name}").decode(errors="replace")[-20000:])
        except (FileNotFoundError, RuntimeError):
            pass
    return infrastructure_evidence("\n".join(texts))


def _strip_binary_hunks(patch: str) -> str:
    """Drop ``diff --git`` sections that are binary (Pro's evaluator does the same)."""
    import re

    sections = re.split(r"(?=^diff --git )", patch, flags=re.M)
    keep = [s for s in sections if s.strip() and not re.search(r"^(Binary files .* differ|GIT binary patch)$", s, re.M)]
    return "".join(keep)
