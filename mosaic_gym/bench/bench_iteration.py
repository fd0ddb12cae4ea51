"""Benchmark the RL iteration: broadcast, Mosaic with the rollout estimator and Mosaic with the likelihood
estimator, on the same tasks and seeds, phase by phase; and the peak memory of a short ``mosaic train`` run.

One policy (the demo's ``TrainConfig`` defaults: the env, tiny model, choose mode, groups and envs; the model
fresh, or warm-started by ``--bc-episodes`` oracle demonstrations) is copied for each row, and each row runs
:func:`algos.learn.train.rl_iteration` with the same RNG seed: the same tasks, budgets, reset seeds and sampling, so
the three rollout phases are the same trajectories (``same_trajectories`` checks it) and the rows differ only
in what the credit assignment adds. Each row's phases come from the iteration's own metrics
(``time_rollouts``, ``time_continuations`` for Mosaic's rollout estimator, ``time_scoring`` for the likelihood
estimator, ``time_update``); ``ratio`` is a row's total over broadcast's. The issue's goals: likelihood at most
1.2x broadcast, rollout at most 2x at M = 2 continuations.

Two more rows run the study's fork preset (``mosaic study fork``, :data:`algos.study.PRESETS`: compare tasks
that a policy may fork into one subagent per item, a 2,400-token window, 4 groups of 8 at 32 envs), its
seed-0 run's config warm-started on the preset's varied demonstrations: broadcast and Mosaic (rollout
estimator), on the same tasks and seeds; ``fork-mosaic``'s ratio is to ``fork-broadcast`` (goal: at most 2x).
Forks put a parent's long context and its children's short ones in one batch of the acting agent: the row
that measures what that costs. ``--quick`` and ``--smoke`` run the study's quick fork settings.

The study's other presets get rows the same way (``presets``; ``--presets``): ``summary``, whose settings are
:class:`~algos.learn.config.TrainConfig`'s defaults (the default ``mosaic train``: the learner's PPO at 2 epochs
x 2 minibatches, target KL 0.03), with broadcast, Mosaic-rollout and Mosaic-likelihood, and ``compaction``, with
broadcast and Mosaic. Every row reports ``iterations_per_hour`` (3,600 s over its total): how many iterations a
study run of that preset gets in an hour here.

Memory: ``mosaic train`` runs in a subprocess (the demo defaults, or tiny settings with ``--quick``, and
``--memory-iterations`` RL iterations) and its peak RSS (the child's own high-water mark) stands beside a bare
subprocess that imports the same libraries and builds the same model, the floor any run pays.

Usage:
    python -m mosaic_gym.bench.bench_iteration            # demo defaults, warm start, 1 RL iteration each
    python -m mosaic_gym.bench.bench_iteration --quick    # fresh tiny-100k model, 1 group of 2, small site, 4 steps
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

import gymnasium as gym
import numpy as np
import torch

import envs  # noqa: F401  (registers the environments)
from agents import OracleAgent
from agents.llm import LLMAgent
from agents.models import default_texts, load_model
from algos.learn.bc import TeacherForcing, clone
from algos.learn.config import TrainConfig, compaction_demo
from algos.learn.pg import PolicyGradient
from algos.rollout import Collector, Request
from algos.study import warm_start_configs
from algos.learn.train import budget_sampler, make_agent, rl_iteration
from mosaic_gym.bench.common import figure, machine, torch_machine
from mosaic_gym.bench.registry import Benchmark

PACKAGES = ("torch", "transformers", "tokenizers", "gymnasium")
ROWS = (("broadcast", "broadcast", "rollout"), ("mosaic-rollout", "mosaic", "rollout"),
        ("mosaic-likelihood", "mosaic", "likelihood"))
PHASES = ("rollouts", "continuations", "scoring", "update")
GOALS = {"mosaic-rollout": 2.0, "mosaic-likelihood": 1.2}
FORK_ROWS = (("fork-broadcast", "broadcast", "rollout"), ("fork-mosaic", "mosaic", "rollout"))
FORK_GOALS = {"fork-mosaic": 2.0}  # (to fork-broadcast)
# The study's other presets (the fork preset has its rows above): summary's settings are TrainConfig's defaults.
PRESET_ROWS = {"summary": ROWS, "compaction": ROWS[:2]}


class _QuickConfig(TypedDict):
    """The TrainConfig fields --quick sets (typed, so that dataclasses.replace's keywords are checked)."""

    model: str
    tasks_per_iter: int
    group_size: int
    num_envs: int


# --quick: a small site, 4 steps and one group of two, so the three iterations and the memory run take seconds.
QUICK_CONFIG = _QuickConfig(model="tiny-100k", tasks_per_iter=1, group_size=2, num_envs=2)
QUICK_ENV = {"site_size": 120, "max_steps": 4}
QUICK_TRAIN_ARGS = ["--model", "tiny-100k", "--site-size", "120", "--max-steps", "4", "--bc-episodes", "2",
                    "--bc-epochs", "1",
                    "--tasks-per-iter", "1", "--group-size", "2", "--eval-episodes", "1", "--num-envs", "2"]


def iteration_config(args: argparse.Namespace) -> TrainConfig:
    """The compaction demo's settings (:func:`algos.learn.config.compaction_demo`: one summary per compaction, T = 8, one
    PPO step per iteration, what the iteration rows have measured since they exist), smaller with ``--quick``."""
    base = compaction_demo()
    if args.settings == "full":
        return base
    return dataclasses.replace(base, env_kwargs={**base.env_kwargs, **QUICK_ENV}, **QUICK_CONFIG)


def fork_config(args: argparse.Namespace) -> TrainConfig:
    """The study's fork preset as its seed-0 RL run sets it (its quick settings unless ``full``)."""
    return preset_config(args, "fork")


def preset_config(args: argparse.Namespace, preset: str) -> TrainConfig:
    """A study preset (:data:`algos.study.PRESETS`) as its seed-0 RL run sets it (its quick settings unless
    ``full``)."""
    with tempfile.TemporaryDirectory() as tmp:  # (the run's folder: gone after, as the bench writes no run)
        config = warm_start_configs(preset, tmp, seeds=1, quick=args.settings != "full")[0]
    return dataclasses.replace(config, iterations=1)


def starting_policy(config: TrainConfig, env: gym.Env, bc_episodes: int) -> tuple[Any, Any]:
    """The tiny model for ``env`` (seed 0), warm-started on ``bc_episodes`` oracle demonstrations if any, in
    the config's oracle styles in turn (``bc_styles``) at its ``bc_max_steps``, as ``mosaic train`` does."""
    model, tokenizer = load_model(config.model, texts=default_texts(env=env), seed=config.seed)
    model.eval()
    if bc_episodes > 0:
        agent = LLMAgent(model, tokenizer, mode=config.mode, seed=config.seed)
        tasks = envs.view(env).tasks
        budget = {} if config.bc_max_steps is None else {"max_steps": config.bc_max_steps}
        requests = [Request(seed=config.seed * 100_003 + k, options={"task_id": tasks[k % len(tasks)].id, **budget})
                    for k in range(bc_episodes)]
        collector = Collector(lambda: gym.make(config.env_id, **config.env_kwargs), config.num_envs)
        styles = config.bc_styles or [{"compact_at": config.bc_compact_at}]
        demos = []
        for n, style in enumerate(styles):
            oracle = OracleAgent(env, **{"fork": config.bc_fork, **style}, seed=config.seed * 1_009 + n)
            demos += collector.run(TeacherForcing(oracle, agent), requests[n :: len(styles)])
        clone(model, demos, config.bc_epochs, config.bc_lr, seed=config.seed)
        model.eval()
    return model, tokenizer


def one_iteration(config: TrainConfig, model: Any, tokenizer: Any, env: gym.Env) -> dict[str, Any]:
    """:func:`algos.learn.train.rl_iteration` on a copy of ``model`` with fresh envs, seeded as a run's first."""
    model = copy.deepcopy(model)
    agent = make_agent(config, model, tokenizer)
    learner = PolicyGradient(model, config.pg)
    collector = Collector(lambda: gym.make(config.env_id, **config.env_kwargs), config.num_envs)
    return rl_iteration(config, 0, agent, learner, collector, env, budget_sampler(config),
                        np.random.default_rng(config.seed))


def peak_rss_mb(code: str) -> float:
    """Peak RSS (MiB) of ``python -c code`` in a fresh process, as the process itself reports it at the end
    (:func:`envs.memory.peak_rss_mib`, its own high-water mark: neither this process's peak, which ``ru_maxrss``
    would carry across ``exec``, nor the children an earlier benchmark left, such as Chromium, count)."""
    report = "\nfrom envs.memory import peak_rss_mib\nprint('peak_rss_mib', peak_rss_mib())"
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    done = subprocess.run([sys.executable, "-c", code + report], check=True, env=env, capture_output=True,
                          text=True)
    lines = reversed(done.stdout.splitlines())
    return float(next(line.split()[1] for line in lines if line.startswith("peak_rss_mib")))


def train_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of a short ``mosaic train`` run, and of a bare process that builds the same model."""
    config = iteration_config(args)
    with tempfile.TemporaryDirectory() as tmp:
        train_args = (QUICK_TRAIN_ARGS if args.settings != "full" else []) + [
            "--iterations", str(args.memory_iterations), "--out", str(Path(tmp) / "run")]
        bare = ("import gymnasium as gym, torch, transformers, envs; from agents.models import default_texts, "
                f"load_model; env = gym.make('mosaic/WebQA-v0', **{config.env_kwargs!r}); "
                f"load_model({config.model!r}, texts=default_texts(env=env), seed=0)")
        bare_mb = peak_rss_mb(bare)
        started = time.perf_counter()
        train_mb = peak_rss_mb(f"from mosaic_gym.cli import main; main(['train', *{train_args!r}])")
        seconds = time.perf_counter() - started
    return {"args": train_args[:-2], "peak_rss_mb": train_mb, "bare_peak_rss_mb": bare_mb,
            "seconds": round(seconds, 1), "goal_mb": 1536, "met": train_mb <= 1536}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bc-episodes", type=int, help="oracle demonstrations to warm-start on (default 30; "
                                                        "quick: 0, a fresh model)")
    parser.add_argument("--memory-iterations", type=int, default=1, help="RL iterations of the memory run")
    parser.add_argument("--no-memory", action="store_true", help="skip the mosaic train memory run")
    parser.add_argument("--no-fork", action="store_true", help="skip the fork preset's rows")
    parser.add_argument("--presets", help="the study's other presets to give rows, comma-separated (default: "
                                          f"{','.join(PRESET_ROWS)}; none: skip)")


def iteration_rows(base: TrainConfig, bc_episodes: int, names: Any, goals: dict[str, float]
                   ) -> dict[str, dict[str, Any]]:
    """One iteration per ``(name, algo, estimator)`` from one starting policy, each phase's seconds and its
    ratio to the first row's total (the goals: ``goals[name]``, at most that ratio)."""
    env = gym.make(base.env_id, **base.env_kwargs)
    model, tokenizer = starting_policy(base, env, bc_episodes)
    rows = {}
    for name, algo, estimator in names:
        metrics = one_iteration(dataclasses.replace(base, algo=algo, estimator=estimator), model, tokenizer, env)
        rows[name] = {"algo": algo, "estimator": estimator,
                      **{f"{p}_s": metrics[f"time_{p}"] for p in PHASES}, "total_s": metrics["time_total"],
                      "success": metrics["success"], "sessions": metrics["sessions"], "steps": metrics["steps"],
                      "units": metrics["tokens"], "update_sequences": metrics["sequences_run"],
                      "iterations_per_hour": round(3600 / metrics["time_total"], 1)}
    first = rows[names[0][0]]["total_s"]
    for name, row in rows.items():
        row["ratio_to_broadcast"] = round(row["total_s"] / first, 3)
        if name in goals:
            row["goal_ratio"], row["goal_met"] = goals[name], row["ratio_to_broadcast"] <= goals[name]
    return rows


def same_trajectories(rows: dict[str, dict[str, Any]]) -> bool:
    """Whether every row's rollouts had the same outcome (success, sessions and steps)."""
    return len({(r["success"], r["sessions"], r["steps"]) for r in rows.values()}) == 1


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark, as ``args`` (its command line's) set it, as one JSON-ready dict."""
    preset_names = [p for p in (args.presets or "").split(",") if p and p != "none"]
    for name in preset_names:
        if name not in PRESET_ROWS:
            raise SystemExit(f"--presets: {name!r} is not one of {', '.join(PRESET_ROWS)} (fork: --no-fork)")
    memory = None if args.no_memory else train_memory(args)
    base = iteration_config(args)
    rows = iteration_rows(base, args.bc_episodes, ROWS, GOALS)
    fork = None if args.no_fork else preset_block(fork_config(args), FORK_ROWS, FORK_GOALS)
    presets = {name: preset_block(preset_config(args, name), PRESET_ROWS[name], GOALS) for name in preset_names}
    return {
        "bench": "iteration",
        "settings": args.settings,
        "machine": {**machine(PACKAGES), **torch_machine()},
        "config": {"env_kwargs": base.env_kwargs, "model": base.model, "mode": base.mode,
                   "tasks_per_iter": base.tasks_per_iter, "group_size": base.group_size,
                   "num_envs": base.num_envs, "continuations": base.continuations,
                   "micro_batch_tokens": base.pg.micro_batch_tokens,
                   "policy": f"warm-started on {args.bc_episodes} demonstrations" if args.bc_episodes
                   else "fresh (untrained) tiny model"},
        "same_trajectories": same_trajectories(rows),
        "rows": rows,
        "fork": fork,
        "presets": presets,
        "memory": memory,
    }


def preset_block(config: TrainConfig, names: Any, goals: dict[str, float]) -> dict[str, Any]:
    """A preset's rows (:func:`iteration_rows`, from its own warm start) with the settings they ran."""
    rows = iteration_rows(config, config.bc_episodes, names, goals)
    return {"config": {"env_id": config.env_id, "env_kwargs": config.env_kwargs, "model": config.model,
                       "tasks_per_iter": config.tasks_per_iter, "group_size": config.group_size,
                       "num_envs": config.num_envs, "continuations": config.continuations,
                       "length_normalize": config.length_normalize,
                       "learner": {"epochs": config.pg.epochs, "minibatches": config.pg.minibatches,
                                   "target_kl": config.pg.target_kl, "lr": config.pg.lr},
                       "policy": f"warm-started on {config.bc_episodes} demonstrations in "
                                 f"{len(config.bc_styles or [None])} styles"},
            "same_trajectories": same_trajectories(rows), "rows": rows}


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per algorithm (seconds per iteration beside broadcast's), and the peak RSS of mosaic train."""
    rows = result["rows"]
    broadcast = rows["broadcast"]["total_s"]
    out = [figure("RL iteration, broadcast", broadcast, "s")]
    out += [figure(f"RL iteration, {name} (goal <= {GOALS[name]}x)", rows[name]["total_s"], "s",
                   "broadcast, same tasks and seeds", broadcast) for name in GOALS]
    if result["fork"] is not None:
        fork = result["fork"]["rows"]
        out.append(figure("RL iteration, fork preset, broadcast", fork["fork-broadcast"]["total_s"], "s"))
        out.append(figure(f"RL iteration, fork preset, mosaic (goal <= {FORK_GOALS['fork-mosaic']}x)",
                          fork["fork-mosaic"]["total_s"], "s", "fork preset, broadcast",
                          fork["fork-broadcast"]["total_s"]))
    for preset, block in result.get("presets", {}).items():
        preset_rows = block["rows"]
        learner = block["config"]["learner"]
        for name, row in preset_rows.items():
            epochs, minibatches = learner["epochs"], learner["minibatches"]
            label = (f"{preset} preset (PPO {epochs} epoch{'s' * (epochs != 1)} x {minibatches} "
                     f"minibatch{'es' * (minibatches != 1)}), {name}")
            out.append(figure(f"RL iteration, {label}", row["total_s"], "s",
                              *(("broadcast, same tasks and seeds", preset_rows["broadcast"]["total_s"])
                                if name != "broadcast" else ())))
    blocks = [("fork", result["fork"])] if result["fork"] is not None else []
    blocks += list(result.get("presets", {}).items())
    for preset, block in blocks:
        for name, row in block["rows"].items():
            out.append(figure(f"study preset {preset}, {name.removeprefix('fork-')}: RL iterations per hour",
                              row["iterations_per_hour"], "iterations/h"))
    memory = result["memory"]
    if memory is not None:
        out.append(figure("mosaic train, peak RSS (goal <= 1536 MiB)", memory["peak_rss_mb"], "MiB",
                          "bare process building the same model", memory["bare_peak_rss_mb"]))
    return out


BENCHMARK = Benchmark(
    "iteration", "an RL iteration, phase by phase: broadcast, Mosaic (rollout), Mosaic (likelihood), and the "
    "study's presets (summary = the learner's defaults, compaction, fork: seconds and iterations per hour); peak "
    "RSS of a short mosaic train run beside a bare process building the same model", measure, figures,
    quick="fresh tiny-100k model, one group of 2 on a small site, 4 steps",
    smoke="as --quick", defaults={"full": {"bc_episodes": 30, "presets": ",".join(PRESET_ROWS)},
                                  "quick": {"bc_episodes": 0, "presets": ",".join(PRESET_ROWS)},
                                  "smoke": {"bc_episodes": 0, "presets": ",".join(PRESET_ROWS)}}, options=options,
    torch=True)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
