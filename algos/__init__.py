"""Learners: credit assignment across sessions, policy gradient, BudgetMix and Pass@(K,T).

- :mod:`algos.advantages`: ``broadcast`` and ``mosaic`` as pure functions (one advantage per session).
- :class:`algos.PolicyGradient`: clipped token-level policy gradient on an ``LLMAgent``'s model.
- :mod:`algos.budgets`: BudgetMix samplers, one budget per group.
- :mod:`algos.evaluate`: Pass@(K,T) with the unbiased estimator, as a table and a heatmap.

Example:
    >>> from algos import advantages
    >>> advantages.broadcast([1.0, 0.0], [0, 0, 1]).round(3).tolist()
    [1.0, 1.0, -1.0]
"""

from __future__ import annotations

from . import advantages, budgets
from .config import PGConfig, TrainConfig

__all__ = ["PGConfig", "PolicyGradient", "TrainConfig", "TrainSequence", "advantages", "budgets"]


def __getattr__(name: str):
    # The learner imports torch: load it only when asked for, so `mosaic site ...` starts fast.
    if name == "PolicyGradient":
        from .pg import PolicyGradient

        return PolicyGradient
    if name == "TrainSequence":  # the one sequence type, the agents' records'
        from agents.records import TrainSequence

        return TrainSequence
    raise AttributeError(f"module 'algos' has no attribute {name!r}")
