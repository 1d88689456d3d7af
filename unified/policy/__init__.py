"""Generation backends behind one interface (see :mod:`unified.policy.base`)."""

from unified.policy.base import Policy, PolicyOutput, PolicyRequest, SamplingConfig, make_policy

__all__ = ["Policy", "PolicyOutput", "PolicyRequest", "SamplingConfig", "make_policy"]
