"""``python -m unified.eval``: the runner, the run directory, summaries and ``--compare``.

The runner is one client of the adapter SDK (:mod:`unified.benchmarks`: the contract, discovery,
aggregates); ``docs/adapters.md`` walks through an outside adapter package.
"""
