"""SWE-bench Verified's known test flaws are noted in the summary (issue 52): what a Verified delta
can and cannot mean, beside the score, only for a run that scored."""

from __future__ import annotations

from dataclasses import replace

from evaluators.swe_bench import SWEBenchVerifiedAdapter
from unified.benchmarks.contract import Task
from unified.eval.report import benchmark_entry, build_summary, render_markdown
from unified.types import EpisodeResult


def test_the_summary_says_what_a_verified_delta_can_and_cannot_mean():
    adapter = SWEBenchVerifiedAdapter()
    tasks = [Task(id=i, benchmark="swe_bench_verified") for i in ("django-1", "astropy-2")]
    results = [EpisodeResult(benchmark="swe_bench_verified", task_id=t.id, trial=r, score=float(r == 0),
                             passed=r == 0, details={"backend": "docker"}) for t in tasks for r in range(3)]
    agg = adapter.aggregate(results)
    assert "59.4% of 138" in agg["caveat"] and "cannot" in agg["caveat"]
    entry = replace(benchmark_entry(tasks=tasks, results=results, runs=3, runs_protocol=3, aggregate=agg),
                    paper_reference=adapter.paper_reference)
    md = render_markdown(build_summary(model="m", prompting="native", benchmarks={"swe_bench_verified": entry}))
    note = next(line for line in md.splitlines() if line.startswith("- **swe_bench_verified** caveat:"))
    assert "0.2 points" in note
    # nothing ran: no score, and no note beside a score that is not there
    empty = benchmark_entry(tasks=tasks, results=[], runs=3, runs_protocol=3, aggregate=adapter.aggregate([]))
    md = render_markdown(build_summary(model="m", prompting="native", benchmarks={"swe_bench_verified": empty}))
    assert "caveat:" not in md
