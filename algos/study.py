"""The study this project exists for: Mosaic against broadcast where the policy chooses its sessions.

A *claim* (:data:`CLAIMS`) is a set of *arms*, each a :class:`~algos.config.TrainConfig` made from a
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

Example:
    >>> sorted(CLAIMS)
    ['budgets', 'compaction', 'fork', 'recovery', 'summary']
    >>> [arm.name for arm in CLAIMS["compaction"].arms]
    ['broadcast', 'mosaic']
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .config import PGConfig, TrainConfig

__all__ = ["CLAIMS", "PRESETS", "Arm", "Claim", "interval", "run_claim", "run_configs", "summarize",
           "warm_start_configs"]

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


def run_claim(claim: str, out: str | Path, seeds: int = 3, quick: bool = False, iterations: int | None = None,
              jobs: int = 1, log: Any = print, log_groups: int | None = None) -> dict[str, Any]:
    """Run (or resume) every run of ``claim`` that has not finished, ``jobs`` at a time, then :func:`summarize`.

    Each seed's warm start runs first, once for all arms; then the arms' runs of that seed, which start RL from
    it. A run has finished when its ``summary.json`` records the iterations asked; any other run is resumed from
    its checkpoint (or started). With ``jobs > 1`` each run trains in its own process (torch threads split
    between them); the results are the same as run one after another (each run is deterministic alone).
    """
    todo: list[TrainConfig] = []  # an arm's run needs its warm_start_from to have finished first
    for arm, seed, config in run_configs(claim, out, seeds, quick, iterations, log_groups):
        if _needs_run(arm.name, seed, config, log):
            todo.append(config)
    needed = {c.warm_start_from for c in todo}
    for seed, config in enumerate(warm_start_configs(claim, out, seeds, quick)):
        # Its checkpoint is what the arms start from (a folder without it, e.g. a clone of committed results,
        # computes it again: the same warm start).
        if config.out not in needed:
            continue
        if not (Path(config.out) / "checkpoint.pt").is_file() and _finished(Path(config.out)) is not None:
            log(f"warm start seed {seed}: computing it again, its checkpoint is not in {config.out}")
            todo.append(config)
        elif _needs_run("warm start", seed, config, log):
            todo.append(config)
    # Seed by seed, every arm of a seed together: a study stopped early still holds complete pairs.
    todo.sort(key=lambda c: (c.seed, c.warm_start_from is not None))
    if jobs <= 1 or len(todo) <= 1:
        for config in todo:
            _train_quietly(config)
    else:
        _run_parallel(todo, jobs, log)
    return summarize(claim, out, seeds, quick=quick)


def _run_parallel(todo: list[TrainConfig], jobs: int, log: Any) -> None:
    """Train ``todo`` in ``jobs`` processes, in its order, each run once the warm start it needs has finished."""
    import multiprocessing as mp
    import os
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    threads = max(1, (os.cpu_count() or 1) // jobs)
    pending = {c.out for c in todo}
    waiting, running = list(todo), {}
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        while waiting or running:
            for config in [c for c in waiting if c.warm_start_from not in pending][: jobs - len(running)]:
                waiting.remove(config)
                running[pool.submit(_train_quietly, config, threads)] = config
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                config = running.pop(future)
                future.result()  # a run that failed stops the study, with its error
                pending.discard(config.out)
                log(f"finished {config.out}")


def _needs_run(name: str, seed: int, config: TrainConfig, log: Any) -> bool:
    """Whether the run has not finished (its ``summary.json`` records the iterations asked); one that has not is
    set to resume from its checkpoint, if it has a ``config.json``."""
    folder = Path(config.out)
    done = _finished(folder)
    if done is not None and done.get("iterations", -1) == config.iterations:
        log(f"{name} seed {seed}: finished ({folder})")
        return False
    config.resume = (folder / "config.json").exists()
    log(f"{name} seed {seed}: {'resuming' if config.resume else 'starting'} ({folder})")
    return True


def _train_quietly(config: TrainConfig, threads: int | None = None) -> None:
    """One run of the study (its report is its ``summary.json``)."""
    import torch

    from .train import train

    if threads is not None:
        torch.set_num_threads(threads)
    train(config, log=lambda *a: None)


def _finished(folder: Path) -> dict[str, Any] | None:
    """The run's ``summary.json``, or None if it has none or one cut short (a kill while it was written): such
    a run is resumed from its checkpoint, which writes the summary again."""
    path = folder / "summary.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (ValueError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------------------------------------------
# Intervals
# ---------------------------------------------------------------------------------------------------------
# Two-sided 95% Student-t quantiles by degrees of freedom (no scipy here); beyond 30, the normal's 1.96.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean and 95% t-interval half-width of ``values`` (None values dropped; half-width None below 2 values).

    >>> interval([0.5, 0.7, 0.6])
    {'mean': 0.6, 'ci95': 0.248, 'n': 3}
    """
    xs = np.array([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], float)
    if xs.size == 0:
        return {"mean": None, "ci95": None, "n": 0}
    half = None
    if xs.size > 1:
        t = _T95[xs.size - 2] if xs.size - 2 < len(_T95) else 1.96
        half = round(float(t * xs.std(ddof=1) / math.sqrt(xs.size)), 3)
    return {"mean": round(float(xs.mean()), 3), "ci95": half, "n": int(xs.size)}


def _shown(cell: dict[str, Any], digits: int = 3) -> str:
    if cell["mean"] is None:
        return "n/a"
    return f"{cell['mean']:.{digits}f}" + (f" ± {cell['ci95']:.{digits}f}" if cell["ci95"] is not None else "")


def _held(cell: dict[str, Any], sign: int = 1) -> str:
    """'held' when the interval excludes 0 on the side ``sign``, 'not shown' else."""
    if cell["mean"] is None or cell["ci95"] is None:
        return "not shown (too few seeds)"
    low, high = cell["mean"] - cell["ci95"], cell["mean"] + cell["ci95"]
    return "held" if (low > 0 if sign > 0 else high < 0) else "not shown"


# ---------------------------------------------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------------------------------------------
def summarize(claim: str, out: str | Path, seeds: int = 3, quick: bool = False) -> dict[str, Any]:
    """The claim's results from its finished runs: ``results.json``, ``results.md`` and plots in
    ``OUT/<claim>/``; returns the results."""
    spec = CLAIMS[claim]
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, seed, config in run_configs(claim, out, seeds, quick):
        summary = _finished(Path(config.out))
        if summary is not None:
            history = [json.loads(line) for line in (Path(config.out) / "metrics.jsonl").read_text().splitlines()]
            runs.setdefault(arm.name, {})[seed] = {"summary": summary, "history": history, "folder": Path(config.out),
                                                   "settings": _run_settings(Path(config.out))}
    folder = Path(out) / claim
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"claim": claim, "question": spec.question, "quick": quick,
                               "settings": {a: _arm_settings(r) for a, r in runs.items()}, "arms": {},
                               "finished": {a: sorted(r) for a, r in runs.items()}}
    for arm in spec.arms:
        results["arms"][arm.name] = _arm_results(runs.get(arm.name, {}))
    a, b = spec.arms[0].name, spec.arms[1].name
    results["paired"] = _paired(runs.get(b, {}), runs.get(a, {}))  # second arm minus first
    if spec.kind == "budgets":
        results["budgets"] = _budget_results(runs, a, b)
    if spec.kind == "recovery":
        results["recovery"] = {name: _recovery_results(r) for name, r in runs.items()}
    if spec.kind == "credit":
        results["credit"] = _credit_results(runs, plot=folder / "credit")
    probe = _probe_results(runs, a, b)
    if probe:
        results["probe"] = probe
    results["verdict"] = _verdict(spec, results)
    (folder / "results.json").write_text(json.dumps(results, indent=2))
    (folder / "results.md").write_text(markdown(results))
    from .plots import plot_pass_at_t, plot_study

    if runs:
        plot_study({name: [r["history"] for r in seeds_.values()] for name, seeds_ in runs.items()},
                   folder / "curves.png", title=f"{claim}: {spec.question}")
        if probe:
            from .plots import plot_probe

            plot_probe({name: arm["curve"] for name, arm in probe["arms"].items()}, folder / "probe.png",
                       threshold=PROBE_THRESHOLD, title=f"{claim}: P(right session decision) at fixed states")
        curves = {name: _pass_curves(seeds_) for name, seeds_ in runs.items()}
        if any(curves.values()):
            plot_pass_at_t(curves, folder / "pass_at_t.png", title=f"{claim}: held-out Pass@(1,T)")
    return results


def _run_settings(folder: Path) -> dict[str, Any]:
    """What the run in ``folder`` was trained with: its own ``config.json`` less its seed and folder (the
    study's code may have changed since it ran, so its presets are not read here)."""
    config = json.loads((folder / "config.json").read_text())
    return {k: v for k, v in config.items() if k not in ("seed", "out")}


def _arm_settings(seeds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The settings an arm's finished runs share, and the seeds whose settings differ from its first's.

    >>> _arm_settings({0: {"settings": {"lr": 1}}, 1: {"settings": {"lr": 2}}, 2: {"settings": {"lr": 1}}})
    {'config': {'lr': 1}, 'differs': {1: ['lr']}}
    """
    first, *others = sorted(seeds)
    config = seeds[first]["settings"]
    differs = {seed: sorted(k for k in set(config) | set(seeds[seed]["settings"])
                            if config.get(k) != seeds[seed]["settings"].get(k)) for seed in others}
    return {"config": config, "differs": {seed: keys for seed, keys in differs.items() if keys}}


METRICS = ("success", "sessions", "sessions_success", "sessions_failure", "context_tokens", "utility", "wasted_sessions",
           "forks", "unused_forks", "step_quality", "error_steps", "recovery", "success_clean")


def _arm_results(seeds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per arm: held-out metrics after the warm start and after RL, and RL's gain, each over seeds."""
    out: dict[str, Any] = {"seeds": sorted(seeds)}
    for stage, key in (("warm_start", "success_warm_start"), ("final", "success_final")):
        out[stage] = {m: interval([r["summary"][key]["metrics"].get(m) for r in seeds.values()]) for m in METRICS}
    out["rl_gain"] = interval([r["summary"].get("rl_gain") for r in seeds.values()])
    # Before any update, iteration 0's groups are the warm-started policy's: how much they vary inside.
    out["warm_start_groups"] = {k: interval([r["history"][0].get(f"groups_{k}") for r in seeds.values()
                                             if r["history"]])
                                for k in ("k_varies", "k_varies_success", "k_std", "reward_varies")}
    return out


def _paired(b: dict[int, dict[str, Any]], a: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Arm b minus arm a, paired by seed (same warm start) and by test task (same reset seeds)."""
    common = sorted(set(a) & set(b))
    per_seed, per_task, sessions = [], [], []
    for seed in common:
        fa, fb = a[seed]["summary"]["success_final"], b[seed]["summary"]["success_final"]
        diffs = [fb["per_task"][t] - fa["per_task"][t] for t in fa["per_task"]]
        per_task += diffs
        per_seed.append(float(np.mean(diffs)))
        sessions.append(fb["sessions"] - fa["sessions"])
    return {"seeds": common, "success": interval(per_seed), "success_per_task": interval(per_task),
            "sessions": interval(sessions)}


def _pass_curves(seeds: dict[int, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{stage: {T: interval over seeds of Pass@(1,T)}}`` for runs evaluated at several budgets."""
    curves: dict[str, dict[str, Any]] = {}
    for stage, key in (("warm_start", "success_warm_start"), ("final", "success_final")):
        at = [r["summary"][key].get("pass_at_1") for r in seeds.values()]
        at = [x for x in at if x]
        if at:
            curves[stage] = {t: interval([x[t] for x in at]) for t in at[0]}
    return curves


def _budget_results(runs: dict[str, dict[int, dict[str, Any]]], fixed: str, mix: str) -> dict[str, Any]:
    """RL's gain at each T (paired by seed), its change from the largest to the smallest T, and how much
    Pass@(1,T) spreads across T (max - min over T, per seed) for each arm."""
    out: dict[str, Any] = {}
    for name in (fixed, mix):
        seeds = runs.get(name, {})
        gains: dict[str, list[float]] = {}
        spread, shrink = [], []
        for r in seeds.values():
            before, after = r["summary"]["success_warm_start"], r["summary"]["success_final"]
            if "pass_at_1" not in after:
                continue
            ts = sorted(after["pass_at_1"], key=int)
            g = {t: after["pass_at_1"][t] - before["pass_at_1"][t] for t in ts}
            for t in ts:
                gains.setdefault(t, []).append(g[t])
            spread.append(max(after["pass_at_1"].values()) - min(after["pass_at_1"].values()))
            shrink.append(g[ts[-1]] - g[ts[0]])
        out[name] = {"gain_at": {t: interval(v) for t, v in gains.items()}, "gain_largest_minus_smallest_t":
                     interval(shrink), "spread_across_t": interval(spread)}
    spread_diff = []
    for seed in sorted(set(runs.get(fixed, {})) & set(runs.get(mix, {}))):
        s = [max(r.values()) - min(r.values()) for r in (runs[n][seed]["summary"]["success_final"].get("pass_at_1")
                                                         for n in (fixed, mix)) if r]
        if len(s) == 2:
            spread_diff.append(s[0] - s[1])
    out["spread_fixed_minus_budgetmix"] = interval(spread_diff)
    return out


def _recovery_results(seeds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """After RL minus after the warm start, per seed: recovery, single-step quality, success of clean runs."""
    out = {}
    for m in ("recovery", "step_quality", "success_clean", "erred", "success"):
        diffs = []
        for r in seeds.values():
            before = r["summary"]["success_warm_start"]["metrics"].get(m)
            after = r["summary"]["success_final"]["metrics"].get(m)
            if before is not None and after is not None:
                diffs.append(after - before)
        out[m] = interval(diffs)
    return out


# What the study reports of each seed's compare_credit, as intervals over seeds.
CREDIT_SHARES = ("failures_credited", "successes_blamed", "correlation")


def _credit_results(runs: dict[str, dict[int, dict[str, Any]]],
                    plot: Path | None = None) -> dict[str, Any]:
    """Where Mosaic's advantages differ from broadcast's on the same groups (:mod:`algos.credit_compare`), per
    Mosaic arm: each seed's comparison over its logged training groups, and intervals over seeds; with ``plot``,
    a PNG of every session's two advantages (``<plot>-<arm>.png``, all seeds pooled)."""
    from . import logs
    from .credit_compare import GROUP_KINDS, compare_credit, credit_groups
    from .plots import plot_credit

    out: dict[str, Any] = {}
    for name, seeds in runs.items():
        if seeds[min(seeds)]["settings"].get("algo") != "mosaic":
            continue
        per_seed, pooled = {}, []
        for seed, r in sorted(seeds.items()):
            records = [rec for path in logs.find_logs(r["folder"]) for rec in logs.read(path)]
            try:
                compared = compare_credit(records)
            except ValueError as err:
                raise logs.LogError(f"{r['folder']}: {err}") from None
            if compared["groups"]["n"]:
                per_seed[seed] = compared
                pooled += credit_groups(records)
        if not per_seed:
            continue
        if plot is not None:
            plot_credit(pooled, plot.with_name(f"{plot.name}-{name}.png"),
                        title=f"{name}: each session's Mosaic advantage against broadcast's on the same group "
                              f"(seeds {sorted(per_seed)}, training groups)")
        cs = list(per_seed.values())
        roles = sorted({k for c in cs for k in c["sessions"]})
        out[name] = {
            "seeds": sorted(per_seed), "groups_per_seed": interval([c["groups"]["n"] for c in cs]),
            "groups": {k: {m: interval([c["groups"][k][m] for c in cs]) for m in ("share", "differ", "reversed",
                                                                                  "split")} for k in GROUP_KINDS},
            "pairs": {m: interval([c["pairs"][m] for c in cs]) for m in ("reversed", "split")},
            **{m: interval([c[m] for c in cs]) for m in CREDIT_SHARES},
            "sessions": {k: {m: interval([c["sessions"][k][m] for c in cs if k in c["sessions"]])
                             for m in ("n", "broadcast", "mosaic", "new_credit", "flipped")} for k in roles},
            "per_seed": per_seed}
    return out


PROBE_THRESHOLD = 0.9  # a run has learned the session decision when the probe's mean reaches this
# Student-t quantiles for a power statement: one-sided 0.80 by degrees of freedom 1..30 (beyond, the normal's).
_T80 = [1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879, 0.876, 0.873, 0.870, 0.868, 0.866,
        0.865, 0.863, 0.862, 0.861, 0.860, 0.859, 0.858, 0.858, 0.857, 0.856, 0.856, 0.855, 0.855, 0.854, 0.854]


def detectable(values: Sequence[float]) -> float | None:
    """The smallest true mean of paired differences like ``values`` that a two-sided 5% t-test over them would
    find with 80% power: ``(t_0.975 + t_0.80) * sd / sqrt(n)`` at ``n - 1`` degrees of freedom (None below 2).

    >>> detectable([0.1, -0.1, 0.2, 0.0])  # sd 0.129, df 3: (3.182 + 0.978) * 0.129 / 2
    0.269
    """
    xs = np.array([v for v in values if v is not None], float)
    if xs.size < 2:
        return None
    df = xs.size - 1
    t95 = _T95[df - 1] if df - 1 < len(_T95) else 1.96
    t80 = _T80[df - 1] if df - 1 < len(_T80) else 0.842
    return round(float((t95 + t80) * xs.std(ddof=1) / math.sqrt(xs.size)), 3)


def probe_curve(run: dict[str, Any]) -> list[float] | None:
    """A run's probe after its warm start, then after each update (None when the run has no probe)."""
    start = (run["summary"].get("probe_warm_start") or {}).get("probe_summary")
    after = [m.get("probe_summary") for m in run["history"]]
    if start is None or any(v is None for v in after):
        return None
    return [start, *after]


def updates_to(curve: Sequence[float], threshold: float = PROBE_THRESHOLD) -> tuple[int, bool]:
    """The updates a probe curve took to reach ``threshold`` (0: already there after the warm start), and whether
    it did; a curve that never does counts as one more than it has (censored: a lower bound).

    >>> updates_to([0.4, 0.7, 0.92, 0.95]), updates_to([0.4, 0.5])
    ((2, True), (2, False))
    """
    for k, value in enumerate(curve):
        if value >= threshold:
            return k, True
    return len(curve), False


def _probe_results(runs: dict[str, dict[int, dict[str, Any]]], a: str, b: str) -> dict[str, Any] | None:
    """Per arm: the probe's curve (interval over seeds per update), its start and end, area under the curve (the
    mean over the warm start and every update), updates to :data:`PROBE_THRESHOLD`; and ``b`` minus ``a`` paired by
    seed for each, with the smallest difference the seeds could detect (:func:`detectable`)."""
    curves = {name: {seed: c for seed, r in seeds.items() if (c := probe_curve(r)) is not None}
              for name, seeds in runs.items()}
    if not any(curves.values()):
        return None
    out: dict[str, Any] = {"threshold": PROBE_THRESHOLD, "arms": {}, "paired": {}}
    stats: dict[str, dict[int, dict[str, float]]] = {}
    for name, per_seed in curves.items():
        if not per_seed:
            continue
        length = min(len(c) for c in per_seed.values())
        stats[name] = {}
        for seed, c in per_seed.items():
            c = c[:length]
            reached, ok = updates_to(c)
            held = runs[name][seed]["summary"]
            greedy = [held.get(k, {}).get("greedy", {}).get("success") for k in ("success_warm_start", "success_final")]
            stats[name][seed] = {"start": c[0], "final": c[-1], "gain": c[-1] - c[0], "auc": float(np.mean(c)),
                                 "updates_to": reached, "reached": float(ok),
                                 "greedy_gain": None if None in greedy else greedy[1] - greedy[0],
                                 "rl_gain": held.get("rl_gain")}
        out["arms"][name] = {
            "seeds": sorted(per_seed), "updates": length - 1,
            "curve": [interval([c[k] for c in per_seed.values()]) for k in range(length)],
            **{key: interval([v[key] for v in stats[name].values()])
               for key in ("start", "final", "gain", "auc", "updates_to", "reached", "greedy_gain", "rl_gain")},
            "gain_detectable": detectable([v["gain"] for v in stats[name].values()])}
    common = sorted(set(stats.get(a, {})) & set(stats.get(b, {})))
    for key in ("final", "auc", "updates_to", "greedy_gain", "rl_gain"):
        diffs = [stats[b][s][key] - stats[a][s][key] for s in common
                 if stats[b][s][key] is not None and stats[a][s][key] is not None]
        out["paired"][key] = {**interval(diffs), "detectable": detectable(diffs)}
    out["paired"]["seeds"] = common
    return out


def _probe_verdict(probe: dict[str, Any], a: str, b: str) -> list[str]:
    lines = []
    for name, arm in probe["arms"].items():
        lines.append(f"{name} learns the session decision (probe after {arm['updates']} updates minus after the warm "
                     f"start: {_shown(arm['start'])} → {_shown(arm['final'])}, gain {_shown(arm['gain'])}): "
                     f"{_held(arm['gain'])}; reached {probe['threshold']} in {_shown(arm['reached'], 2)} of runs, "
                     f"after {_shown(arm['updates_to'], 1)} updates")
    p = probe["paired"]
    if p["seeds"]:
        mde = lambda key: f"smallest detectable difference {p[key]['detectable']}"  # noqa: E731
        lines += [f"{b} - {a}, updates to reach {probe['threshold']} (paired by seed, {len(p['seeds'])} seeds): "
                  f"{_shown(p['updates_to'], 2)}: {b} faster {_held(p['updates_to'], -1)} ({mde('updates_to')})",
                  f"{b} - {a}, area under the probe curve: {_shown(p['auc'])}: {_held(p['auc'])} ({mde('auc')})",
                  f"{b} - {a}, probe after the last update: {_shown(p['final'])}: {_held(p['final'])} "
                  f"({mde('final')})"]
    return lines


def _verdict(spec: Claim, results: dict[str, Any]) -> list[str]:
    a, b = spec.arms[0].name, spec.arms[1].name
    paired = results["paired"]
    if spec.kind == "credit":
        return [f"{b} - {a} held-out success (paired by seed): {_shown(paired['success'])}: "
                f"{_held(paired['success'])}",
                f"{b} - {a} sessions per trajectory: {_shown(paired['sessions'])}: fewer sessions "
                f"{_held(paired['sessions'], -1)}"] + (_probe_verdict(results["probe"], a, b)
                                                        if "probe" in results else [])
    if spec.kind == "budgets":
        budgets = results["budgets"]
        return [f"{a}: RL gain at the largest T minus at the smallest T: "
                f"{_shown(budgets[a]['gain_largest_minus_smallest_t'])}: gain shrinks with T "
                f"{_held(budgets[a]['gain_largest_minus_smallest_t'])}",
                f"Pass@(1,T) spread across T, {a} minus {b}: {_shown(budgets['spread_fixed_minus_budgetmix'])}: "
                f"BudgetMix steadier {_held(budgets['spread_fixed_minus_budgetmix'])}"]
    lines = []
    for name, r in results["recovery"].items():
        lines.append(f"{name}: RL's change in recovery {_shown(r['recovery'])} ({_held(r['recovery'])}), in "
                     f"single-step quality {_shown(r['step_quality'])} ({_held(r['step_quality'])})")
    return lines


def _settings_line(arm: str, settings: dict[str, Any]) -> str:
    """One line of what an arm's runs were trained with, read from their own ``config.json`` (a key a file
    lacks shows as ``?``: the line describes what is there and never fails on a file it did not write).

    >>> _settings_line("a", {"config": {"algo": "mosaic", "pg": {"lr": 1e-4}, "length_normalize": True},
    ...                      "differs": {2: ["lr"]}})
    'a: `?` {}; algo mosaic, ? demonstrations x ? epochs, ? iterations of ? groups x ?, lr 0.0001, candidates scored by mean token log-prob, ? held-out runs per task; seeds that differ: 2 (lr)'
    """
    c = settings["config"]
    get = lambda key: c.get(key, "?")  # noqa: E731
    pg = c.get("pg") if isinstance(c.get("pg"), dict) else {}
    line = (f"{arm}: `{get('env_id')}` {json.dumps(c.get('env_kwargs', {}), sort_keys=True)}; algo {get('algo')}, "
            f"{get('bc_episodes')} demonstrations x {get('bc_epochs')} epochs, {get('iterations')} iterations of "
            f"{get('tasks_per_iter')} groups x {get('group_size')}, lr {pg.get('lr', '?')}"
            + (f", budgets {c['budgets']}" if c.get("budgets") else "")
            + (", candidates scored by mean token log-prob" if c.get("length_normalize") else "")
            + f", {get('eval_episodes')} held-out runs per task"
            + (f" on the first {c['eval_tasks']} test tasks" if c.get("eval_tasks") else ""))
    if settings["differs"]:
        line += "; seeds that differ: " + ", ".join(f"{s} ({', '.join(k)})" for s, k in settings["differs"].items())
    return line


_GROUP_NAMES = {"all_success": "all successes", "mixed": "mixed rewards", "all_failure": "all failures"}


def _credit_markdown(credit: dict[str, Any]) -> list[str]:
    """The section on where Mosaic's credit differs from broadcast's, one per Mosaic arm."""
    lines = []
    for arm, c in credit.items():
        lines += [f"Where Mosaic's credit differs from broadcast's (arm {arm}: both advantages of every session of its "
                  f"logged training groups, {_shown(c['groups_per_seed'], 1)} groups per seed, seeds {c['seeds']}; "
                  "mean ± 95% interval over seeds; docs/algorithms.md, section 8):", "",
                  "| groups | share of groups | groups where Mosaic ≠ broadcast | session pairs reversed | "
                  "session pairs split |", "|---|---|---|---|---|"]
        for k, name in _GROUP_NAMES.items():
            g = c["groups"][k]
            lines.append(f"| {name} | {_shown(g['share'])} | {_shown(g['differ'])} | {_shown(g['reversed'])} | "
                         f"{_shown(g['split'])} |")
        lines += [f"| all | 1 | | {_shown(c['pairs']['reversed'])} | {_shown(c['pairs']['split'])} |", "",
                  "| sessions (trajectory / kind) | per seed | mean broadcast | mean Mosaic | credit where broadcast "
                  "has none | sign flipped |", "|---|---|---|---|---|---|"]
        for k, s in c["sessions"].items():
            lines.append(f"| {k.replace('/', ' / ')} | {_shown(s['n'], 1)} | {_shown(s['broadcast'])} | "
                         f"{_shown(s['mosaic'])} | {_shown(s['new_credit'])} | {_shown(s['flipped'])} |")
        lines += ["", f"Sessions of failed trajectories with positive Mosaic credit: {_shown(c['failures_credited'])}; "
                      f"sessions of successes with negative Mosaic credit: {_shown(c['successes_blamed'])} (broadcast "
                      f"gives neither); correlation of the two over mixed groups' sessions: "
                      f"{_shown(c['correlation'])}.", ""]
    return lines


def _probe_markdown(probe: dict[str, Any]) -> list[str]:
    """The probe's table: per arm, and the second arm minus the first paired by seed (probe.png: the curves)."""
    arms = list(probe["arms"])
    rows = [("probe after the warm start", "start"), ("probe after the last update", "final"),
             ("gain", "gain"), ("area under the curve", "auc"), (f"updates to {probe['threshold']}", "updates_to"),
             (f"runs that reached {probe['threshold']}", "reached"), ("held-out greedy success, gain", "greedy_gain"),
             ("held-out sampled success, gain", "rl_gain")]
    lines = [f"The probe: P(complete summary) at fixed compaction states, exact (mean ± 95% interval over seeds; "
             f"a run that never reached {probe['threshold']} counts its updates + 1):", "",
             "| | " + " | ".join(arms) + " | paired difference (smallest detectable) |", "|---|" + "---|" * (len(arms) + 1)]
    for label, key in rows:
        paired = probe["paired"].get(key)
        cell = f"{_shown(paired)} ({paired['detectable']})" if paired else ""
        lines.append(f"| {label} | " + " | ".join(_shown(probe["arms"][a][key]) for a in arms) + f" | {cell} |")
    return lines + [""]


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown: a table per stage and arm, the paired comparison and the verdict."""
    arms = list(results["arms"])
    lines = [f"## {results['claim']}: {results['question']}", "",
             "Runs finished: " + ", ".join(f"{a} seeds {results['finished'].get(a, [])}" for a in arms)
             + (" (quick mode: the numbers mean nothing)" if results["quick"] else ""), ""]
    for a in arms:
        if a in results["settings"]:
            lines += [_settings_line(a, results["settings"][a]), ""]
    lines += ["Held-out metrics, mean ± 95% interval over seeds (warm start → after RL):", "",
             "| metric | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for m in METRICS:
        cells = [f"{_shown(results['arms'][a]['warm_start'][m])} → {_shown(results['arms'][a]['final'][m])}"
                 for a in arms]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("| RL gain (paired over tasks) | " + " | ".join(_shown(results["arms"][a]["rl_gain"])
                                                                 for a in arms) + " |")
    for k in ("k_varies", "k_varies_success", "reward_varies"):
        lines.append(f"| warm-start groups: {k} | " + " | ".join(
            _shown(results["arms"][a]["warm_start_groups"][k]) for a in arms) + " |")
    p = results["paired"]
    lines += ["", f"Paired ({arms[1]} - {arms[0]}, same warm start per seed): success {_shown(p['success'])} "
                  f"(per task, pooled over seeds: {_shown(p['success_per_task'])}), sessions {_shown(p['sessions'])}.",
              ""]
    if "budgets" in results:
        for name in arms:
            b = results["budgets"][name]
            lines.append(f"- {name}: RL gain at T " + ", ".join(f"{t}: {_shown(c)}" for t, c in b["gain_at"].items())
                         + f"; Pass@(1,T) spread across T {_shown(b['spread_across_t'])}")
        lines.append("")
    if "probe" in results:
        lines += _probe_markdown(results["probe"])
    if "credit" in results:
        lines += _credit_markdown(results["credit"]) or [
            "Where Mosaic's credit differs from broadcast's: no Mosaic run of this claim logged training groups "
            "(runs made before trajectory logs); rerun its Mosaic arm to see it.", ""]
    lines += ["Verdict:", ""] + [f"- {v}" for v in results["verdict"]] + [""]
    return "\n".join(lines)
