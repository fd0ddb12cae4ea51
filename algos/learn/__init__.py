"""Learning: the settings, the policy-gradient update, the warm start, checkpoints and the training loop.

- :mod:`algos.learn.config`: ``TrainConfig`` and ``PGConfig``, every setting with its documented line.
- :mod:`algos.learn.pg`: ``PolicyGradient``, the clipped PPO-style update (eqs. 12-15) and what it measures.
- :mod:`algos.learn.bc`: the warm start, behaviour cloning on oracle demonstrations.
- :mod:`algos.learn.budgets`: BudgetMix samplers, one step budget per group.
- :mod:`algos.learn.checkpoint`: checkpoints that a killed run resumes from, checked before they are trusted.
- :mod:`algos.learn.lora`: LoRA adapters; :mod:`algos.learn.reporting`: TensorBoard and W&B.
- :mod:`algos.learn.train`: ``train(config)``, the whole loop.
"""
