"""Mosaic-gym's envs and credit inside other trainers: TRL's ``GRPOTrainer`` and verl's advantage registry.

Each bridge imports its trainer only when imported itself (``import algos.bridges.trl`` needs ``trl``,
``import algos.bridges.verl`` needs ``verl``), so the core packages require neither. Install them with
``pip install -e ".[trl]"`` and ``".[verl]"`` (``scripts/setup.sh`` does both; verl itself goes in with
``--no-deps``, see ``docs/verl.md``).

- :mod:`algos.bridges.trl`: :class:`~algos.bridges.trl.MosaicGRPOTrainer`, a ``GRPOTrainer`` whose rollouts are
  episodes of our envs, one training row per session, broadcast or Mosaic advantages from :mod:`algos.credit.advantages`.
- :mod:`algos.bridges.verl`: the ``"mosaic"`` advantage estimator, registered with verl's ``register_adv_est``.
"""
