"""BFCL v4 (Berkeley Function-Calling Leaderboard) over the ``bfcl-eval`` package's data,
executable backends and checkers. See :mod:`evaluators.bfcl_v4.adapter`."""

from evaluators.bfcl_v4.adapter import BFCLAdapter

__all__ = ["BFCLAdapter"]
