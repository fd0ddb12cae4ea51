"""Credit across sessions: which advantage each session of a trajectory gets.

- :mod:`algos.credit.advantages`: the formulas, pure numpy: ``broadcast`` (eq. 1) and ``mosaic`` (eq. 5), and
  :data:`~algos.credit.advantages.ALGORITHMS`, where the algorithm names are listed once.
- :mod:`algos.credit.estimators`: Mosaic's contributions D from collected trajectories (``rollout`` or
  ``likelihood``), and the run's credit object, chosen once from the config (:func:`credit_for`).
- :mod:`algos.credit.compare`: where Mosaic's credit departs from broadcast's, read from a run's logs.

Example:
    >>> from algos.credit import advantages
    >>> advantages.ALGORITHMS
    ('broadcast', 'mosaic')
"""

from __future__ import annotations

from algos.credit import advantages, compare

__all__ = ["Credit", "MosaicCredit", "advantages", "compare", "credit_for", "likelihood_contributions",
           "rollout_contributions"]

_ESTIMATORS = ("Credit", "MosaicCredit", "credit_for", "likelihood_contributions", "rollout_contributions")


def __getattr__(name: str):
    # The estimators import torch: load them only when asked for, so `import algos` stays light.
    if name in _ESTIMATORS:
        from algos.credit import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module 'algos.credit' has no attribute {name!r}")
