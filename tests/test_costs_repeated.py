"""A command measured several times (``measurements.costs --repeat N``) is one row that keeps each run: the table
shows min / median / max with each run's load, and the demo's banner quotes the largest peak and the longest wall
time (issue 53: a single lucky run understated the demo 2-4x)."""

from __future__ import annotations

import json

from unified import demo
from unified.eval.costs import cost_rows, render_table, spread

RUNS = [{"wall_s": 400.0, "cpu_s": 500.0, "peak_rss_gib": 5.1, "peak_tree_rss_gib": 5.3, "load": [2.0, 3.0]},
        {"wall_s": 700.0, "cpu_s": 650.0, "peak_rss_gib": 5.6, "peak_tree_rss_gib": 6.4, "load": [4.1, 5.2]},
        {"wall_s": 500.0, "cpu_s": 560.0, "peak_rss_gib": 5.3, "peak_tree_rss_gib": 5.5, "load": [3.0, 3.5]}]
TABLE = {"machine": {"cpus": 2, "memory_gib": 23.5, "cpu_model": "x"},
         "rows": [{"name": "demo", "command": "make demo", "wall_s": 700.0, "cpu_s": 650.0, "peak_rss_gib": 5.6,
                   "peak_tree_rss_gib": 6.4, "disk_mb": 4300.0, "load": [2.0, 3.5],
                   "measured_at": "2026-12-07T22:00:00Z", "note": "shared with other jobs", "runs": RUNS}]}


def test_spread_is_min_median_max():
    assert spread([3.0, 1.0, 2.0]) == (1.0, 2.0, 3.0) and spread([4.0, 1.0, 2.0, 3.0]) == (1.0, 2.5, 4.0)


def test_a_repeated_row_shows_min_median_max_and_each_runs_load():
    table = render_table(table=TABLE)
    assert ("| `make demo` | 6 min 40 s / 8 min 20 s / 11 min 40 s (min / median / max of 3 runs) | "
            "8 min 20 s / 9 min 20 s / 10 min 50 s | 5.30 / 5.50 / 6.40 GiB in all (5.10 / 5.30 / 5.60 GiB the "
            "largest process) | 4.2 GB | 2.0–3.0, 4.1–5.2, 3.0–3.5 | 2026-12-07 | shared with other jobs |") in table


def test_the_demo_banner_quotes_the_largest_of_the_runs(tmp_path, monkeypatch):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(TABLE))
    monkeypatch.setattr(demo, "read_costs", lambda: json.loads(path.read_text()))
    need, words = demo.demo_cost()
    assert need == 7.0  # 6.40 GiB rounded up
    assert "up to 6.40 GiB peak RSS of its process tree and up to 11 min 40 s, the most of 3 runs" in words, words
    assert cost_rows(TABLE)["demo"].runs == RUNS
