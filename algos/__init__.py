"""Learners: credit assignment across sessions, policy gradient, BudgetMix and Pass@(K,T).

Rooms:

- :mod:`algos.credit`: which advantage each session gets: the formulas (``broadcast``, ``mosaic``), Mosaic's
  contribution estimators, and the comparison of the two on a run's logs.
- :mod:`algos.learn`: the settings (:class:`TrainConfig`, :class:`PGConfig`), the update
  (:class:`PolicyGradient`), the warm start, BudgetMix budgets, checkpoints and ``train(config)``.
- :mod:`algos.evaluate`: Pass@(K,T), session metrics, probes.
- :mod:`algos.study`: presets, claims, their runs and their summaries.
- Shared by the rooms: :mod:`algos.rollout` (collecting trajectories, every session its own sequence),
  :mod:`algos.logprobs` (the one scorer of the policy's own actions), :mod:`algos.logs` (trajectory logs) and
  :mod:`algos.plots`.
- :mod:`algos.bridges`: TRL and verl.

``algos.advantages``, ``algos.budgets``, ``algos.PolicyGradient``, ``algos.train`` and ``algos.TrainSequence`` are
here for short imports.

Example:
    >>> from algos import advantages
    >>> advantages.broadcast([1.0, 0.0], [0, 0, 1]).round(3).tolist()
    [1.0, 1.0, -1.0]
"""

from __future__ import annotations

from algos.credit import advantages
from algos.learn import budgets
from algos.learn.config import PGConfig, TrainConfig

__all__ = ["PGConfig", "PolicyGradient", "TrainConfig", "TrainSequence", "advantages", "budgets", "train"]


def __getattr__(name: str):
    # The learner imports torch: load it only when asked for, so `mosaic site ...` starts fast.
    if name == "PolicyGradient":
        from algos.learn.pg import PolicyGradient

        return PolicyGradient
    if name == "train":
        from algos.learn.train import train

        return train
    if name == "TrainSequence":  # the one sequence type, the agents' records'
        from agents.records import TrainSequence

        return TrainSequence
    raise AttributeError(f"module 'algos' has no attribute {name!r}")
