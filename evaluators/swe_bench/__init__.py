"""SWE-bench Verified and SWE-bench Pro adapters (3 rollouts an instance, % resolved).

Config keys (``--set benchmarks.swe_bench_verified.KEY=VALUE``, same for ``swe_bench_pro``):

``dataset``         local file/dir or hub id (default ``$SWE_BENCH_VERIFIED_DATA`` /
                    ``$SWE_BENCH_PRO_DATA``, else the fixtures under ``$UNIFIED_FIXTURES_DIR``;
                    see :mod:`.data`)
``split``           dataset split for directories and hub ids (default ``test``)
``backend``         ``local``/``docker``/``podman``/``apptainer``/``auto`` (:mod:`unified.execution`)
``repos_dir``       local backend only: ``<owner>__<name>`` copies of the repositories (default
                    ``$SWE_BENCH_REPOS``, else ``repos/`` next to a local dataset file)
``scripts_dir``     Pro only: ``run_scripts`` of a SWE-bench Pro checkout (default
                    ``$SWE_BENCH_PRO_SCRIPTS``, else ``fixture_pro_run_scripts/`` next to the data file)
``task_repo``       Verified: a checkout of SWE-bench/swe-bench-tasks (default ``$SWE_BENCH_TASK_REPO``);
                    a classic-schema row (no eval script) takes its image and eval script from it
``instances``       only these instance ids (comma-separated)
``exec_timeout_s``  limit of one tool call (default 180); ``eval_timeout_s`` of grading (1800)
``memory_mb``       memory of the environment (default 4096)
``network``         network during rollouts (default off); ``grading_network`` during grading
                    (default on: the official harnesses' containers have it, and some Pro run
                    scripts fetch packages)

Rollouts run in the instance's environment (its official image, fully qualified: see
:func:`.data.image_for`); grading runs in a *fresh* one (as the official harnesses do), so
nothing but the patch carries over. Whether an instance can be graded here is decided before
its first rollout: one that cannot (a classic-schema row without a swebench that builds its
test spec, a Pro instance without run scripts) is skipped for every trial with the reason, and
never scores 0 on some. Results record the backend, image and patch; the aggregate says what
separates the run from the published protocol (``comparable``, ``not_comparable_because``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unified.benchmarks import bounded
from unified.benchmarks.contract import Adapter, BenchmarkUnavailable, Environment, PaperReference, RunContext, Task
from unified.benchmarks.helpers import config_list, limit_runnable, require_execution_backend
from unified.benchmarks.aggregate import avg_at_k, partition, per_trial, scores_by_task
from unified.execution.infra import NOT_REPRODUCED, InfrastructureBaselines, infrastructure_error
from unified.types import Episode, EpisodeResult, ToolCall

from evaluators.swe_bench.data import check_rows, image_for, load_rows, resolve_source, row_schema
from evaluators.swe_bench.environment import SWEEnvironment, environment_spec, open_repository, repo_source
from evaluators.swe_bench.grading import complete_from_task_repo, grade_pro, grade_verified, grading_problem

__all__ = ["SWEBenchProAdapter", "SWEBenchVerifiedAdapter", "aggregate_resolved"]




def aggregate_resolved(results: list[EpisodeResult]) -> dict[str, Any]:
    """% resolved: per instance the mean over its rollouts, then the mean over instances.

    ``score = 100 * mean_i( mean_r resolved[i, r] )``; ``per_rollout[r]`` is the % resolved of
    rollout ``r`` alone. Skipped and crashed episodes are counted apart, never as unresolved.
    """
    parts = partition(results)
    scored = parts.scored
    by_task = scores_by_task(scored)
    backends = sorted({str(r.details.get("backend")) for r in scored if r.details.get("backend")})
    skipped, errored = parts.skipped_tasks, parts.errored
    reasons = []
    if "local" in backends:
        reasons.append("local sandbox instead of the instance's image")
    if any(r.details.get("grading_network") is False for r in scored):
        reasons.append("network off while grading")
    # skipped/errored instances and fewer rollouts than the protocol are added by the report (unified.eval.report)
    return {"score": avg_at_k(by_task), "metric": "% resolved, mean over rollouts",
            "n_instances": len(by_task), "n_episodes": len(scored),
            "skipped": len(parts.skipped), "skipped_instances": skipped,
            "errored": len(errored),
            "per_rollout": per_trial(scored),
            "backends": backends, "comparable": not reasons, "not_comparable_because": reasons}


@dataclass
class SWEBenchConfig:
    """Settings of the SWE-bench adapters (``--set benchmarks.swe_bench_verified.KEY=VALUE``, same for
    ``swe_bench_pro``; module docstring)."""

    dataset: str | None = None
    """Local file/dir or hub id (None: ``$SWE_BENCH_VERIFIED_DATA``/``$SWE_BENCH_PRO_DATA``, else the fixtures)."""
    split: str = "test"
    """Dataset split for directories and hub ids."""
    backend: str | None = None
    """``local``/``docker``/``podman``/``apptainer``/``auto`` (:mod:`unified.execution`; None: auto)."""
    repos_dir: str | None = None
    """Local backend only: ``<owner>__<name>`` copies of the repositories (None: ``$SWE_BENCH_REPOS``,
    else ``repos/`` next to a local dataset file)."""
    scripts_dir: str | None = None
    """Pro only: ``run_scripts`` of a SWE-bench Pro checkout (None: ``$SWE_BENCH_PRO_SCRIPTS``, else the
    fixture scripts next to the data file)."""
    task_repo: str | None = None
    """Verified: a checkout of SWE-bench/swe-bench-tasks (None: ``$SWE_BENCH_TASK_REPO``)."""
    instances: list[str] | str | None = None
    """Only these instance ids (a list or comma-separated; None: all)."""
    exec_timeout_s: float = bounded(180.0, gt=0)
    """Wall time of one tool call."""
    eval_timeout_s: float = bounded(1800.0, gt=0)
    """Wall time of grading one patch."""
    memory_mb: int = bounded(4096, ge=1)
    """Memory of the environment."""
    network: bool = False
    """Network during rollouts."""
    grading_network: bool = True
    """Network during grading (the official harnesses' containers have it; never on the ``local`` backend)."""

    def __post_init__(self) -> None:
        self.instances = config_list(self.instances)


class _SWEBenchAdapter(Adapter):
    variant = "verified"
    workdir = "/testbed"
    suites = ("in_domain",)
    world_model_domain = "swe"
    runs_default = 3
    Config = SWEBenchConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.repos_dir = self.settings.repos_dir or os.environ.get("SWE_BENCH_REPOS")
        """Where the local backend finds repository copies (the setting, else the environment's)."""
        self.scripts_dir = self.settings.scripts_dir or os.environ.get("SWE_BENCH_PRO_SCRIPTS")
        self.task_repo = self.settings.task_repo or os.environ.get("SWE_BENCH_TASK_REPO")
        self.infrastructure_baselines = InfrastructureBaselines()
        """Each instance graded with its reference patch when a patch's grading shows an infrastructure failure."""

    def _backend(self):
        return require_execution_backend(self.settings.backend)

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        source = resolve_source(self.variant, self.settings.dataset)
        rows = load_rows(source, self.settings.split)
        backend = self._backend()
        local_dir = Path(source).parent if Path(source).is_file() else None
        repos = Path(self.repos_dir) if self.repos_dir else (local_dir / "repos" if local_dir else None)
        scripts = Path(self.scripts_dir) if self.scripts_dir else (
            local_dir / "fixture_pro_run_scripts" if local_dir else None)
        out = []
        for row, problem in check_rows(rows, self.variant, source):
            iid = str(row.get("instance_id"))
            if self.settings.instances and iid not in self.settings.instances:
                continue
            skip = problem
            schema = row_schema(row) if self.variant == "verified" else "pro"
            if skip is None and schema == "classic" and self.task_repo:
                completed = complete_from_task_repo(row, Path(self.task_repo))
                if isinstance(completed, str):
                    skip = f"cannot grade: {completed}"
                else:
                    row, schema = completed, "classic, eval script and image from the task repository"
            if skip is None:  # decided once for every trial: never graded on some and skipped on others
                skip = grading_problem(row, self.variant, scripts if scripts and scripts.is_dir() else None)
                skip = f"cannot grade: {skip}" if skip else None
            if skip is None and backend.name == "local" and repo_source(repos, str(row["repo"])) is None:
                skip = (f"the local backend needs a copy of {row['repo']} under repos_dir ({repos}); "
                        "use a container engine (--set benchmarks.NAME.backend=docker) for the real instances")
            payload = {"row": row, "repos_dir": str(repos) if repos else None,
                       "scripts_dir": str(scripts) if scripts else None,
                       "dataset_schema": schema}
            out.append(Task(id=iid, benchmark=self.name, split=self.variant, group=str(row.get("repo", "")),
                            payload=payload, skip_reason=skip))
        if not out:
            raise BenchmarkUnavailable(f"no instances in {source}" + (f" matching {self.settings.instances}" if self.settings.instances else ""))
        return limit_runnable(out, limit)

    def _spec(self, row: dict[str, Any], network: bool = False):
        spec = environment_spec(self.workdir, image_for(row, self.variant), self.settings.exec_timeout_s, self.settings.memory_mb,
                                str(row["instance_id"]))
        spec.network = network
        return spec

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        row = task.payload["row"]
        repos = task.payload.get("repos_dir")
        return SWEEnvironment(row, self.variant, self._backend(), self._spec(row, self.settings.network),
                              repo_source(Path(repos) if repos else None, str(row["repo"])),
                              log_dir=run.work_dir / "logs" if run.work_dir else None)

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        assert isinstance(env, SWEEnvironment)
        patch = env.final_patch()
        backend = self._backend()
        # the local backend never has the network (it would share the host's loopback): grade offline there
        grading_network = self.settings.grading_network and backend.name != "local"
        details: dict[str, Any] = {"backend": env.session.backend if env.session else None, "model_patch": patch,
                                   "image": env.spec.image, "grading_network": grading_network,
                                   "dataset_schema": task.payload.get("dataset_schema")}
        if grading_network != self.settings.grading_network:
            details["grading_network_cut"] = "the local backend has no network"
        if not patch.strip():
            details.update({"resolved": False, "reason": "empty patch"})
            return EpisodeResult(self.name, task.id, episode.trial, 0.0, passed=False, details=details)
        graded = self._grade(task, patch, grading_network, env.log_dir)
        details.update(graded)
        resolved = bool(graded.get("resolved"))
        evidence = details.get("infrastructure")
        if evidence and not resolved:  # the tests never ran; the output that says why is the patch's to shape
            image = env.session.image_digest() if env.session is not None else str(env.spec.image or "")
            env.stop()  # closed first: nothing of the episode's weighs on the baseline (issue 42, R4)
            error = self.infrastructure_baselines.confirm(
                task.id, infrastructure_error("grading could not run the tests", evidence),
                lambda: self._grading_without_agent(task, grading_network), image=image)
            if error is not None:
                return EpisodeResult(self.name, task.id, episode.trial, 0.0, details=details, error=error)
            details["infrastructure_unconfirmed"] = f"{NOT_REPRODUCED}\n" + "\n".join(evidence)
        return EpisodeResult(self.name, task.id, episode.trial, 1.0 if resolved else 0.0, passed=resolved,
                             details=details)

    def _grade(self, task: Task, patch: str, grading_network: bool, log_dir) -> dict[str, Any]:
        """Grade ``patch`` on a fresh checkout of the instance (the official steps, :mod:`.grading`)."""
        row, repos = task.payload["row"], task.payload.get("repos_dir")
        with open_repository(self._backend(), self._spec(row, grading_network), row["base_commit"],
                             repo_source(Path(repos) if repos else None, str(row["repo"]))) as fresh:
            if self.variant == "verified":
                return grade_verified(fresh, row, patch, self.settings.eval_timeout_s, log_dir=log_dir)
            return grade_pro(fresh, row, patch, Path(task.payload["scripts_dir"]), self.settings.eval_timeout_s)

    def _grading_without_agent(self, task: Task, grading_network: bool) -> str | None:
        """The instance's reference patch graded the same way: its infrastructure error (the agent had no part in it)."""
        graded = self._grade(task, task.payload["row"]["patch"], grading_network, None)
        evidence = graded.get("infrastructure")
        return infrastructure_error("grading could not run the tests", evidence) if evidence else None

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        return aggregate_resolved(results)

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        patch = task.payload["row"]["patch"]
        marker = "UNIFIED_GOLD_PATCH"
        body = patch if patch.endswith("\n") else patch + "\n"  # context lines may be a lone space: keep them
        command = f"git apply --verbose - <<'{marker}'\n{body}{marker}"
        return [[ToolCall(name="bash", arguments={"command": command}, id="gold_0")]]

    def gold_answer(self, task: Task) -> str | None:
        return "Applied the reference patch."


class SWEBenchVerifiedAdapter(_SWEBenchAdapter):
    """SWE-bench Verified (500 human-validated instances; repository in /testbed)."""

    name = "swe_bench_verified"
    variant = "verified"
    workdir = "/testbed"
    suite_position = 2
    paper_reference = PaperReference("SWE-bench Verified (3 rollouts)", 64.47, 67.86)

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        """:func:`aggregate_resolved` plus :data:`VERIFIED_CAVEAT` (what a Verified delta can mean)."""
        out = super().aggregate(results, run=run)
        out["caveat"] = VERIFIED_CAVEAT
        return out


VERIFIED_CAVEAT = (
    "SWE-bench Verified's own tests are known to be flawed: its sponsor no longer reports it after an audit found "
    "flawed tests in 59.4% of 138 audited hard tasks (tests that reject a correct fix or accept an incomplete one). "
    "A Verified delta between two checkpoints run on the same instances, harness and rollouts says the two pass "
    "this fixed test set differently; it cannot by itself say that one fixes more real issues, and one instance "
    "of 500 is 0.2 points, so a delta of a few points is within what flawed tests and 3-rollout noise can move. "
    "SWE-bench Pro is the cross-check.")
"""The summary's note on Verified (issue 52)."""


class SWEBenchProAdapter(_SWEBenchAdapter):
    """SWE-bench Pro (public set; repository in /app)."""

    name = "swe_bench_pro"
    variant = "pro"
    workdir = "/app"
    suite_position = 3
    paper_reference = PaperReference("SWE-bench Pro (3 rollouts)", 42.18, 47.42)
