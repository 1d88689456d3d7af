"""The cost table is the one source of costs: the docs' blocks are rendered from it, the plan line's estimate
reads its seconds per episode, and ``--preset quick`` is a recorded set of flags that explicit flags beat."""

from __future__ import annotations

import re
from argparse import Namespace
from pathlib import Path

from unified.eval.cli import build_parser, load_eval_config
from unified.eval.costs import EpisodeSettings, duration, estimate_line, read_costs, render_table

REPO = Path(__file__).resolve().parents[1]
TABLE = {"machine": {"cpus": 2, "memory_gib": 23.4, "cpu_model": "x"},
         "rows": [{"name": "demo", "command": "make demo", "wall_s": 1186.0, "cpu_s": 1500.2, "peak_rss_gib": 7.41,
                   "disk_mb": 4300.0, "load": [3.1, 4.0], "measured_at": "2026-12-04T13:00:00Z"}],
         "per_episode": {"bfcl_v4": {"seconds": 80.0, "episodes": 1, "model": "embedded", "max_new_tokens": 512,
                                     "max_turns": 40}}}


def test_the_docs_quote_the_table_verbatim():
    """README and quickstart carry the block `python -m measurements.costs --render` writes from the table."""
    from measurements.costs import BEGIN, BLOCKS, END

    for doc, names in BLOCKS.items():
        text = (REPO / doc).read_text(encoding="utf-8")
        found = re.findall(re.escape(BEGIN) + "\n(.*?)\n" + re.escape(END), text, flags=re.S)
        assert found == [render_table(names, read_costs())], f"{doc}: rerun python -m measurements.costs --render"


def test_estimate_from_the_calibrated_estimator():
    assert duration(1186) == "19 min 46 s" and duration(None) == "not measured" and duration(7300) == "2 h 1 min"
    table = {**TABLE, "estimator": {"load_s": 20, "tokens_per_s": {"hf": 8.0}, "fill": {"thinking": 0.5},
                                    "prompting": {"act": {"calls": 1.0}}, "benchmarks": {"bfcl_v4": {"calls": 1.0}}}}
    line = estimate_line({"bfcl_v4": 3, "claw_eval": 2}, EpisodeSettings(engine="hf", max_new_tokens=512), table)
    assert line.startswith("estimate: about 1 min 56 s on a 2-CPU machine like the cost table's")  # 20 + 3 x 32
    assert "bfcl_v4 3 x 32 s (policy 1 calls x 256 tokens at 8 tokens/s = 32 s)" in line
    assert "claw_eval: no measurement for this setting" in line
    assert "| `make demo` | 19 min 46 s | 25 min 0 s | 7.41 GiB | 4.2 GB | 3.1–4.0 | 2026-12-04 |" in render_table(table=TABLE)


def test_preset_quick_sets_a_laptop_look_and_explicit_flags_win():
    parser = build_parser()
    cfg = load_eval_config(parser.parse_args(["--suite", "ood", "--preset", "quick"]))
    assert (cfg.limit, cfg.runs, cfg.sampling.max_new_tokens, cfg.sampling.thinking, cfg.limits.max_turns) == \
        (1, 1, 128, False, 4)
    cfg = load_eval_config(parser.parse_args(["--suite", "ood", "--preset", "quick", "--limit", "3", "--thinking",
                                              "--set", "sampling.max_new_tokens=256"]))
    assert (cfg.limit, cfg.sampling.thinking, cfg.sampling.max_new_tokens) == (3, True, 256)
    assert isinstance(parser.parse_args(["--preset", "quick"]), Namespace)
