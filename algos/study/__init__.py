"""The study this project exists for: Mosaic against broadcast where the policy chooses its sessions.

A *claim* (:data:`CLAIMS`) is a set of *arms*, each a :class:`~algos.learn.config.TrainConfig` made from a
*preset* (:data:`PRESETS`: an env where sessions are the policy's choice and a varied warm start) and the
arm's own settings, run with several seeds. Every (arm, seed) is one ``mosaic train`` run in its own folder,
``OUT/<preset>/<arm>/seed<k>``, so:

- a claim can be stopped at any point and resumed (each run resumes from its last checkpoint; a finished run
  is never run again);
- claims share runs: ``recovery`` reads the ``compaction`` runs, and ``budgets`` adds one arm beside them;
- the summary (:func:`summarize`) is rebuilt from whatever runs have finished.

Seed ``k`` of every arm of a preset starts from the same warm start (the same demonstrations, the same
cloned model: nothing before RL depends on the arm), computed once in ``OUT/<preset>/warm-start/seed<k>`` and
taken by each arm's run (``TrainConfig.warm_start_from``: bit for bit the run that computed its own). So arms
are compared *paired*: per seed, the mean over
test tasks of the difference between the arms' held-out success (both evaluated on the same tasks with the
same reset seeds). Results are the mean over seeds with a 95% t-interval over seeds.

Rooms: :mod:`algos.study.presets` (presets, arms, claims, configurations), :mod:`algos.study.run` (running a
claim's runs) and :mod:`algos.study.summary` (results, intervals, power, markdown).
"""

from algos.study.presets import CLAIMS, PRESETS, Arm, Claim, run_configs, warm_start_configs
from algos.study.run import run_claim
from algos.study.summary import interval, markdown, summarize

__all__ = ["CLAIMS", "PRESETS", "Arm", "Claim", "interval", "markdown", "run_claim", "run_configs", "summarize",
           "warm_start_configs"]
