"""Benchmark adapters, one package per benchmark (bfcl_v4, claw_eval, qwenclawbench, terminal_bench,
swe_bench, widesearch). Each implements the adapter contract of ARCHITECTURE.md:
``tasks(split, limit)``, ``open(task)``, ``score(task, episode, env)``, ``aggregate(scores)``."""
