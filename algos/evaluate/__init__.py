"""Evaluation: Pass@(K,T), how trajectories use their sessions, and probes of the policy.

- :mod:`algos.evaluate.passkt`: Pass@(K,T) with the unbiased estimator (eqs. 10-11), run on an env's tasks
  (:func:`pass_at_kt`), as a table, CSV, Markdown and a heatmap.
- :mod:`algos.evaluate.session_metrics`: the study's session, error and recovery metrics of trajectories.
- :mod:`algos.evaluate.probes`: the policy's exact probability of the right session decision at fixed states.

Example:
    >>> pass_at_k(n=4, c=1, k=2)
    0.5
"""

from __future__ import annotations

from algos.evaluate.passkt import (PROTOCOLS, PassAtKTResult, Sample, pass_at_k, pass_at_kt, pass_at_kt_table,
                                   plot_heatmap, table_markdown, write_table_csv)

__all__ = ["PROTOCOLS", "PassAtKTResult", "Sample", "pass_at_k", "pass_at_kt", "pass_at_kt_table", "plot_heatmap",
           "table_markdown", "write_table_csv"]
