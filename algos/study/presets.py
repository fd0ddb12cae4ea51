"""The study's presets, arms and claims, and the run configurations they make.

A *claim* (:data:`CLAIMS`) is a set of *arms*, each a :class:`~algos.learn.config.TrainConfig` made from a
*preset* (:data:`PRESETS`: an env where sessions are the policy's choice and a varied warm start) and the
arm's own settings, run with several seeds (:func:`run_configs`); seed ``k`` of every arm of a preset starts from
the same warm start (:func:`warm_start_configs`).

Example:
    >>> sorted(CLAIMS)
    ['budgets', 'compaction', 'fork', 'recovery', 'summary']
    >>> [arm.name for arm in CLAIMS["compaction"].arms]
    ['broadcast', 'mosaic']
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from algos.learn.config import PGConfig, TrainConfig


# The oracle styles of the varied warm start: compact early, late or only when asked; a nonzero error rate so
# that the demonstrations hold recoveries (the policy clones them).
COMPACTION_STYLES = [
    {"compact_at": None, "error_rate": 0.0},
    {"compact_at": 0.45, "error_rate": 0.15},
    {"compact_at": 0.8, "error_rate": 0.0},
    {"compact_at": None, "error_rate": 0.15},
]
FORK_STYLES = [
    {"fork": True, "error_rate": 0.0},
    {"fork": False, "error_rate": 0.15},
    {"fork": True, "error_rate": 0.15},
    {"fork": False, "error_rate": 0.0},
]

# The summary preset's learner: PPO with 2 epochs of 2 minibatches and a target KL (measured on this preset: the
# probe rose 0.43 -> 0.85 in 6 broadcast iterations at KL 0.02-0.04 per update; one epoch of one step at lr 1e-3
# had no trust region, docs/findings.md).
SUMMARY_PG = {"lr": 1e-3, "epochs": 2, "minibatches": 2, "target_kl": 0.03}

PRESETS: dict[str, dict[str, Any]] = {
    # The session decision is the lever: every episode's first session fills its window (search, open), and the
    # forced compaction offers the complete summary and a lossy one (summary_choices). At T=5 the complete one is
    # needed (search, open, compact, answer; a lossy one leaves no steps to read again), so what the session hands
    # on decides the reward. The warm start clones demonstrations that take the lossy summary half the time and
    # then read again (at a budget of 12, so they succeed and are cloned): the policy starts near P(complete) =
    # 0.4-0.5, and the probe measures that probability exactly at 32 fixed compaction states after every update.
    "summary": {
        "env_id": "mosaic/WebQA-v0",
        "env_kwargs": {"site_size": 600, "hops": 1, "max_steps": 5, "candidates": True, "session_max_tokens": 600,
                       "summary_choices": True},
        "bc_styles": [{"lossy_summary": 0.5}], "bc_max_steps": 12, "length_normalize": True, "probe": "summary",
        "iterations": 15, "tasks_per_iter": 6, "group_size": 8, "eval_episodes": 4, "eval_greedy": True,
        "num_envs": 24, "pg": SUMMARY_PG,
    },
    # One-hop tasks fit one window; two-hop (chain, long, inverted) tasks fill it: compaction is optional on
    # the first and needed on the second. compact(...) is among the candidates at every step.
    "compaction": {
        "env_id": "mosaic/WebQA-Compact-v0",
        "env_kwargs": {"site_size": 600, "hops": [1, 2], "max_steps": 12, "candidates": True,
                       "session_max_tokens": 1000},
        "bc_styles": COMPACTION_STYLES, "bc_episodes": 64, "eval_budgets": [4, 8],  # and 12, the env's
        "bc_max_steps": None, "length_normalize": False, "eval_greedy": False,  # (as when its runs were made)
    },
    # Compare tasks of three items, each a one-hop sub-question: fork each to a subagent, or do all three in one
    # session (the window holds them). They ask for the winning year: asked for the winner, every name to guess
    # from is in the question, and a policy that answers one unread is right a third of the time. 3,000
    # entities give 10 test tasks. Candidates are scored by their mean token log-prob: summed, a fork's
    # sub-question (15-20 tokens) against a search (5-8) left the warm start forking with p < 0.001 although
    # half its demonstrations forked (p 0.6-0.7 at the first step when mean-scored, the same weights).
    "fork": {
        "env_id": "mosaic/WebQA-Fork-v0",
        "env_kwargs": {"site_size": 3000, "hops": 2, "families": ["compare"], "compare_answer": "year",
                       "max_steps": 16, "candidates": True, "session_max_tokens": 2400},
        "bc_styles": FORK_STYLES, "bc_episodes": 64, "length_normalize": True, "bc_max_steps": None,
        "eval_greedy": False,
        "eval_episodes": 4,  # success is near 0.1 here: 4 runs of each of the 10 test tasks, not 1
    },
}
# --quick: the same presets on a small site with tiny runs of the smallest model (what the tests run; the numbers
# mean nothing).
QUICK = {"model": "tiny-100k", "bc_episodes": 4, "bc_epochs": 1, "iterations": 1, "tasks_per_iter": 1, "probe_states": 4,
         "group_size": 2, "eval_episodes": 1, "eval_tasks": 3, "num_envs": 4, "continuations": 1}
QUICK_ENV = {"compaction": {"site_size": 120, "hops": 1, "session_max_tokens": 700, "max_steps": 8},
             "summary": {"site_size": 120, "hops": 1, "session_max_tokens": 600, "max_steps": 5},
             "fork": {"site_size": 120, "hops": 2, "max_steps": 12, "session_max_tokens": 1600}}
# Sized to fit a working session: the compaction claim (3 warm starts, 6 RL runs) took 51 minutes with --jobs 2 on
# 2 cores shared with other work.
FULL = {"iterations": 5, "tasks_per_iter": 4, "group_size": 8, "eval_episodes": 1, "num_envs": 32,
        "temperature": 1.0}


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: its name (its run folder) and the settings it changes."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """What a claim runs (a preset, its arms) and what it reports (``kind``, with the two arms compared)."""

    preset: str
    arms: tuple[Arm, ...]
    kind: str  # "credit", "budgets" or "recovery"
    question: str


CLAIMS: dict[str, Claim] = {
    "summary": Claim("summary", (Arm("broadcast", {"algo": "broadcast"}), Arm("mosaic", {"algo": "mosaic"})),
                     "credit", "Does Mosaic learn what a session should hand on (the complete summary) faster than "
                               "broadcast?"),
    "compaction": Claim("compaction", (Arm("broadcast", {"algo": "broadcast"}), Arm("mosaic", {"algo": "mosaic"})),
                        "credit", "Does Mosaic beat broadcast in the compaction setting, with fewer sessions?"),
    "fork": Claim("fork", (Arm("broadcast", {"algo": "broadcast"}), Arm("mosaic", {"algo": "mosaic"})),
                  "credit", "Does Mosaic beat broadcast in the fork setting, with fewer sessions?"),
    "budgets": Claim("compaction", (Arm("mosaic", {"algo": "mosaic"}),
                                    Arm("mosaic-budgetmix", {"algo": "mosaic", "budgets": "4,8,12"})),
                     "budgets", "Does RL's gain shrink as the budget T shrinks, and does BudgetMix keep "
                                "Pass@(1,T) steadier across T than a fixed budget?"),
    "recovery": Claim("compaction", (Arm("broadcast", {"algo": "broadcast"}), Arm("mosaic", {"algo": "mosaic"})),
                      "recovery", "Is RL's gain in recovering from errors rather than in better single steps?"),
}


def _settings(claim: str, quick: bool) -> tuple[Claim, dict[str, Any]]:
    """The claim and the settings its runs share (the preset at the study's size)."""
    if claim not in CLAIMS:
        raise ValueError(f"claim={claim!r} is unknown: use one of {sorted(CLAIMS)}")
    spec = CLAIMS[claim]
    preset = copy.deepcopy(PRESETS[spec.preset])
    if quick:
        preset["env_kwargs"].update(QUICK_ENV[spec.preset])
        preset["eval_budgets"] = [4] if "eval_budgets" in preset else None
    return spec, ({**preset, **QUICK} if quick else {**FULL, **preset})  # a preset may set FULL's keys its own way


def _config(settings: dict[str, Any], seed: int, folder: Path, **changes: Any) -> TrainConfig:
    # Micro-batches of 2,048 padded tokens: the update's tree-masked candidate scoring is 2-3x faster than at
    # 32,768 (attention over fewer rows at once), and it is most of an RL iteration's time in these presets.
    settings = {**settings, **changes}
    pg = {"lr": STUDY_LR, "micro_batch_tokens": STUDY_MICRO_BATCH_TOKENS, **settings.pop("pg", {})}
    return TrainConfig(**settings, seed=seed, out=str(folder), pg=PGConfig(**pg))


STUDY_MICRO_BATCH_TOKENS = 2048
# RL's learning rate (the demo's is 1e-3). Chosen because a first AdamW step moves every weight by about the
# learning rate, whatever the gradient's size. Measured: held-out results at 3e-4 and 1e-3 are alike
# (docs/study.md); the training-group success that seemed to fall at 1e-3 follows the tasks each iteration draws.
STUDY_LR = 3e-4


def warm_start_configs(claim: str, out: str | Path, seeds: int = 3, quick: bool = False) -> list[TrainConfig]:
    """Seed k's warm start, computed once for every arm of the claim's preset: a run with ``iterations=0`` in
    ``OUT/<preset>/warm-start/seed<k>`` (the arms' runs start RL from its checkpoint, ``warm_start_from``)."""
    spec, settings = _settings(claim, quick)
    return [_config(settings, seed, Path(out) / spec.preset / WARM_START / f"seed{seed}", iterations=0)
            for seed in range(seeds)]


WARM_START = "warm-start"  # the folder of a preset's shared warm starts, beside its arms'


def run_configs(claim: str, out: str | Path, seeds: int = 3, quick: bool = False,
                iterations: int | None = None, log_groups: int | None = None) -> list[tuple[Arm, int, TrainConfig]]:
    """The (arm, seed, settings) of every run of ``claim``, each in its own folder under ``out``, starting RL from
    seed k's shared warm start (:func:`warm_start_configs`); every run logs ``log_groups`` groups per iteration
    to its ``trajectories/`` (None: :class:`TrainConfig`'s default)."""
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    spec, settings = _settings(claim, quick)
    warm = warm_start_configs(claim, out, seeds, quick)
    runs = []
    for arm in spec.arms:
        for seed in range(seeds):
            changes = dict(arm.settings)
            if iterations is not None:
                changes["iterations"] = iterations
            if log_groups is not None:
                changes["log_groups"] = log_groups
            folder = Path(out) / spec.preset / arm.name / f"seed{seed}"
            runs.append((arm, seed, _config(settings, seed, folder, **changes, warm_start_from=warm[seed].out)))
    return runs


