"""Benchmark env pools: the Ray pool with 1 and 2 workers against the local pool, and Ray's cost per step.

The same oracle episodes (compacting and forking) run through :class:`algos.rollout.Collector` three ways: in a
:class:`envs.pool.LocalPool` (the envs stepped one after another in this process), and in a
:class:`envs.pool.RayPool` whose envs are split over 1 and over 2 workers. On the Playwright backend, where a
step costs a real browser page, the figure is env steps/s against local. On the text backend, where a step
costs microseconds, it is what Ray adds per step: a batch of actions sent to each worker and the results sent
back (pickled observations, infos). Each pool is warmed up first (workers started, Chromium launched, sites
built), and the episodes of every pool are checked to be the local pool's.

Usage:
    python -m mosaic_gym.bench.bench_scale            # 4 envs, 8 Playwright and 32 text episodes
    python -m mosaic_gym.bench.bench_scale --smoke    # 2 envs, 2 short episodes each
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import gymnasium as gym

import envs  # noqa: F401  (registers the environments)
from agents import OracleAgent
from algos.rollout import Collector, Request
from envs.pool import LocalPool, RayPool, init_ray
from mosaic_gym.bench.common import figure, machine
from mosaic_gym.bench.registry import Benchmark

ENV_ID = "mosaic/WebQA-v0"
PACKAGES = ("ray", "gymnasium", "playwright")
DEFAULTS = {
    "full": {"envs": 4, "playwright_episodes": 8, "text_episodes": 32, "max_steps": 16},
    "quick": {"envs": 4, "playwright_episodes": 4, "text_episodes": 16, "max_steps": 12},
    "smoke": {"envs": 2, "playwright_episodes": 2, "text_episodes": 2, "max_steps": 3},
}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", type=int, default=None, help="env slots of every pool (even: split over 2 workers)")
    parser.add_argument("--playwright-episodes", type=int, default=None, help="episodes timed on Playwright")
    parser.add_argument("--text-episodes", type=int, default=None, help="episodes timed on the text backend")
    parser.add_argument("--max-steps", type=int, default=None, help="budget of each episode")
    parser.add_argument("--site-size", type=int, default=150, help="entities of the builtin site")


def _timed(pool: Any, driver_env: gym.Env, requests: list[Request]) -> tuple[float, int, list[Any]]:
    """Seconds, env steps and trajectories of one run of ``requests`` (after a warm-up run of one step per slot:
    the workers started, Chromium launched, the sites built)."""
    agent = OracleAgent(driver_env, compact_at=0.4, fork=True, seed=0)
    collector = Collector(None, pool.num_envs, pool=pool)
    collector.run(agent, [Request(seed=10_000 + s, options={"max_steps": 1}) for s in range(pool.num_envs)])
    start = time.perf_counter()
    trajectories = collector.run(agent, requests)
    seconds = time.perf_counter() - start
    return seconds, sum(int(t.tree["steps_used"]) for t in trajectories), trajectories


def measure_backend(args: argparse.Namespace, backend: str, episodes: int) -> dict[str, Any]:
    kwargs = {"site_size": args.site_size, "split": "test", "backend": backend, "max_steps": args.max_steps}
    driver_env = gym.make(ENV_ID, **{**kwargs, "backend": "text"})
    requests = [Request(seed=s, options={}, group=s) for s in range(episodes)]
    out: dict[str, Any] = {"backend": backend, "envs": args.envs, "episodes": episodes}
    with LocalPool(lambda: gym.make(ENV_ID, **kwargs), args.envs) as pool:
        seconds, steps, local = _timed(pool, driver_env, requests)
    out["local"] = {"seconds": round(seconds, 3), "steps": steps, "steps_per_s": round(steps / seconds, 2)}
    for workers in (1, 2):
        per_worker = -(-args.envs // workers)
        with RayPool(ENV_ID, kwargs, args.envs, envs_per_worker=per_worker) as pool:
            seconds, steps, remote = _timed(pool, driver_env, requests)
        same = [t.tree for t in remote] == [t.tree for t in local]
        out[f"ray_{workers}_workers"] = {"seconds": round(seconds, 3), "steps": steps,
                                         "steps_per_s": round(steps / seconds, 2), "same_trajectories": same}
    driver_env.close()
    local_step = out["local"]["seconds"] / out["local"]["steps"]
    ray_step = out["ray_1_workers"]["seconds"] / out["ray_1_workers"]["steps"]
    out["ray_overhead_per_step_ms"] = round(1000 * (ray_step - local_step), 3)
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    started = not ray.is_initialized()
    # Ray's memory monitor kills workers when the machine runs short, whoever holds the memory (other work on
    # a shared machine): off for this short run.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    # Two CPUs for the workers whatever the machine has: the figures are for 1 and 2 workers.
    init_ray(num_cpus=2, object_store_memory=100 * 1024 * 1024,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}})
    try:
        result = {"bench": "scale", "settings": args.settings, "machine": machine(PACKAGES),
                  "playwright": measure_backend(args, "playwright", args.playwright_episodes),
                  "text": measure_backend(args, "text", args.text_episodes)}
    finally:
        if started:
            ray.shutdown()
    return result


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows: Ray pool steps/s (1 and 2 workers) beside the local pool's, Playwright and text."""
    rows = []
    for backend in ("playwright", "text"):
        r = result[backend]
        for workers in (1, 2):
            rows.append(figure(f"Ray pool, {workers} worker(s), {r['envs']} {backend} envs",
                               r[f"ray_{workers}_workers"]["steps_per_s"], "env steps/s",
                               "local pool, same episodes", r["local"]["steps_per_s"]))
    text = result["text"]
    local_ms = 1000 * text["local"]["seconds"] / text["local"]["steps"]
    rows.append(figure("Ray overhead per text step (1 worker)", text["ray_overhead_per_step_ms"], "ms",
                       "a local text step", round(local_ms, 3)))
    return rows


BENCHMARK = Benchmark(
    "scale", "Ray env pool steps/s with 1 and 2 workers beside the local pool (Playwright, text), and Ray's "
    "overhead per step (needs the ray extra)", measure, figures, quick="fewer episodes",
    smoke="2 envs, 2 short episodes: checks the report only", defaults=DEFAULTS, options=options)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
