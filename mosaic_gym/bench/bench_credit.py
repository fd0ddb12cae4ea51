"""Measure Mosaic's session credit on the demo's rollouts: does it favour last sessions over first ones?

In a group where every trajectory succeeded, nothing tells a first session from a last one a priori, so an
unbiased session credit gives both the same mean advantage. This script rolls out the demo env
(``mosaic/WebQA-v0``, site 600, one hop, T 8, a 600-token window, candidate actions) with an
:class:`agents.OracleAgent` that makes a plausible mistake at ``--error-rate`` of its steps (standing in for
a diverse policy, and acting as the continuation policy too), estimates each session's D with the rollout
estimator (:func:`algos.credit.rollout_contributions`, M continuations from env snapshots), and reports, for
each variant of the credit, the mean Mosaic advantage of the first and of the last session of the root
chain, over the trajectories with at least two sessions in all-success groups. Each seed is one set of
rollouts; every variant scores the same rollouts, and the inner boundaries get the same continuations.

Variants (``root_start`` of the root chain, and the floor under std(D) in eq. (5)):

- ``group_mean``: the chain starts at the group's mean reward (the behaviour before issue 16);
- ``rollout``: it starts at V(reset) from M continuations of the trajectory's own reset snapshot;
- ``group_rollout``: it starts at one V(reset) per group, from M continuations of its first trajectory's reset
  snapshot (every trajectory of a group starts from the same state);
- ``group_mean+floor`` / ``rollout+floor``: as named, with ``min_contribution_std=--floor``.

Prints one JSON object (and writes it to ``--out``): per variant, the per-seed figures and their mean +- 95%
interval (Student t over seeds).

Usage:
    python -m mosaic_gym.bench.bench_credit                # 5 seeds x 16 groups x 8
    python -m mosaic_gym.bench.bench_credit --quick        # 2 seeds x 4 groups
    python -m mosaic_gym.bench.bench_credit --smoke        # 1 seed x 2 groups x 4 on 8 envs
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

import envs  # noqa: F401  (registers the environments)
from agents import Agent, OracleAgent
from agents.base import step_rng
from algos.credit import advantages as adv
from algos.credit.estimators import chains, rollout_contributions
from algos.rollout import Collector, Request, Trajectory
from envs.actions import format_action
from mosaic_gym.bench.common import machine
from mosaic_gym.bench.registry import Benchmark

ENV_ID = "mosaic/WebQA-v0"
DEMO: dict[str, Any] = {"site_size": 600, "hops": 1, "max_steps": 8, "candidates": True, "session_max_tokens": 600}
VARIANTS = {  # name: (root_start, min_contribution_std or None for --floor)
    "group_mean": ("group_mean", 0.0),
    "rollout": ("rollout", 0.0),
    "group_rollout": ("group_rollout", 0.0),
    "group_mean+floor": ("group_mean", None),
    "rollout+floor": ("rollout", None),
}
# Student t 97.5% quantiles by degrees of freedom (a 95% two-sided interval over a few seeds).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def interval(values: Sequence[float]) -> dict[str, float]:
    """Mean and the half-width of its 95% Student t interval (0 for one value).

    Example:
        >>> interval([1.0, 2.0, 3.0])
        {'mean': 2.0, 'ci95': 2.4843, 'n': 3}
    """
    x = np.asarray(values, dtype=float)
    half = 0.0 if x.size < 2 else T975.get(x.size - 1, 1.96) * float(x.std(ddof=1)) / float(np.sqrt(x.size))
    return {"mean": round(float(x.mean()), 4), "ci95": round(half, 4), "n": int(x.size)}


class ContextOracle(Agent):
    """The oracle made a function of the session it acts in, as an LLM policy is of its context.

    :class:`OracleAgent` remembers its plan across a compaction, so a continuation from a snapshot (a fresh
    agent, no memory) does not act as the run it branches from: it replans the whole task with the budget
    that is left, and V at every compaction comes out too low. This one forgets its plan at every session's
    start, in rollouts and continuations alike, and in a compaction session answers from the summary when
    the summary holds the answer (with the oracle's ``error_rate`` it defers to the oracle instead, which
    may err). So V(state) means the same thing in the run and in its continuations.
    """

    def __init__(self, env: gym.Env, error_rate: float, seed: int):
        self.oracle = OracleAgent(env, error_rate=error_rate, seed=seed)
        self.task = envs.view(env).task  # as the env asks it
        self.error_rate, self.seed = error_rate, seed
        self.session: dict[int, tuple[int | None, int]] = {}  # env index -> (episode seed or None, session id)

    def reset(self, index: int | None = None) -> None:
        self.oracle.reset(index)
        if index is None:
            self.session.clear()
        else:
            self.session.pop(index, None)

    def act_batch(self, observations, infos) -> list[str]:
        return [self._act(o, info.get("env_index", i), info) for i, (o, info) in enumerate(zip(observations, infos))]

    def _act(self, observation: str, index: int, info: dict[str, Any]) -> str:
        here = (info.get("episode_seed"), info["session_id"])
        if self.session.get(index) != here:
            self.oracle.reset(index)
            self.session[index] = here
        gold = self.task(info["task_id"]).answer
        rng = step_rng(self.seed + 1, info) or np.random.default_rng(self.seed)
        if (info["session_kind"] == "compact" and gold in observation and not info.get("must_compact")
                and rng.random() >= self.error_rate):
            return format_action("answer" if info["depth"] == 0 else "finish", gold)
        return self.oracle.act_batch([observation], [{**info, "env_index": index}])[0]


class Counted(Agent):
    """Counts the steps ``agent`` takes: what the continuations of each variant cost."""

    def __init__(self, agent: Agent):
        self.agent, self.steps = agent, 0

    def reset(self, index: int | None = None) -> None:
        self.agent.reset(index)

    def act_batch(self, observations, infos) -> list[str]:
        self.steps += len(observations)
        return self.agent.act_batch(observations, infos)


class SummaryChooser(Agent):
    """The context oracle, except that each summary it writes keeps the facts found with probability
    ``p_keep`` and drops them ("Nothing found yet.") otherwise: a one-parameter policy over two summary
    candidates, the rest of its behaviour fixed. Which one a session wrote is in the trajectory's tree."""

    def __init__(self, env: gym.Env, error_rate: float, seed: int, p_keep: float):
        self.inner = ContextOracle(env, error_rate, seed)
        self.seed, self.p_keep = seed, p_keep

    def reset(self, index: int | None = None) -> None:
        self.inner.reset(index)

    def act_batch(self, observations, infos) -> list[str]:
        actions = self.inner.act_batch(observations, infos)
        out = []
        for action, info in zip(actions, infos):
            rng = step_rng(self.seed + 2, info) or np.random.default_rng(self.seed)
            if action.startswith("compact(") and rng.random() >= self.p_keep:
                action = format_action("compact", "Nothing found yet.")
            out.append(action)
        return out


def summary_study(seed: int, algo: str, updates: int = 20, groups: int = 4, group_size: int = 8,
                  continuations: int = 2, error_rate: float = 0.25, lr: float = 2.0, num_envs: int = 16
                  ) -> list[float]:
    """The controlled case: P(keep the fact in a summary) after each of ``updates`` policy-gradient steps.

    The policy's one parameter is the logit of the good summary (start: 0, P = 0.5). Each update rolls out
    ``groups`` groups of the demo, scores every session with ``algo``'s advantage (broadcast, or Mosaic with
    the rollout estimator and the same policy's continuations) and moves the logit by ``lr`` times the mean,
    over the sessions that wrote a summary, of ``A_session * d log pi(summary) / d logit``.
    """
    make_env = lambda: gym.make(ENV_ID, **DEMO)  # noqa: E731
    env = make_env()
    tasks = envs.view(env).tasks
    rng = np.random.default_rng(seed)
    collector = Collector(make_env, num_envs)
    logit, history = 0.0, []
    for u in range(updates):
        p_keep = 1.0 / (1.0 + np.exp(-logit))
        agent = SummaryChooser(env, error_rate, seed * 1000 + u, p_keep)
        picked = rng.choice(len(tasks), size=groups, replace=len(tasks) < groups)
        requests = [Request(seed=int(rng.integers(2**31)), options={"task_id": tasks[t].id}, group=g)
                    for g, t in enumerate(picked) for _ in range(group_size)]
        runs = collector.run(agent, requests, record_snapshots=algo == "mosaic")
        grads = []
        for g in range(groups):
            group = [t for t in runs if t.group == g]
            keys = [(i, sid) for i, t in enumerate(group) for sid in t.session_ids]
            rows = np.array([i for i, _ in keys])
            rewards = [t.reward for t in group]
            if algo == "mosaic":
                d = rollout_contributions(group, collector, agent, continuations, seed=int(rng.integers(2**31)))
                a = adv.mosaic(rewards, rows, np.array([d[i][sid] for i, sid in keys]))
            else:
                a = adv.broadcast(rewards, rows)
            for (i, sid), a_s in zip(keys, a):
                t = group[i]
                wrote = [s for s in t.tree["sessions"] if s["kind"] == "compact" and s["parent"] == sid]
                if wrote:  # this session ended by writing a summary: which one?
                    kept = t.session(sid)["handoff"] != "Nothing found yet."
                    grads.append(a_s * ((1.0 - p_keep) if kept else -p_keep))
        logit += lr * (float(np.mean(grads)) if grads else 0.0)
        history.append(float(1.0 / (1.0 + np.exp(-logit))))
    return history


POLICIES = ("oracle", "context")


def collect(seed: int, groups: int, group_size: int, error_rate: float, num_envs: int, policy: str = "oracle"
            ) -> tuple[list[list[Trajectory]], Collector, Agent]:
    """``groups`` groups of ``group_size`` runs of the demo (one task each) by ``policy``, with env snapshots."""
    make_env = lambda: gym.make(ENV_ID, **DEMO)  # noqa: E731
    env = make_env()
    tasks = envs.view(env).tasks
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(tasks), size=groups, replace=len(tasks) < groups)
    requests = [Request(seed=int(rng.integers(2**31)), options={"task_id": tasks[t].id}, group=g)
                for g, t in enumerate(picked) for _ in range(group_size)]
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r}: use one of {', '.join(POLICIES)}")
    agent = (OracleAgent(env, error_rate=error_rate, seed=seed) if policy == "oracle"
             else ContextOracle(env, error_rate, seed))
    collector = Collector(make_env, num_envs)
    runs = collector.run(agent, requests, record_snapshots=True)
    return [[t for t in runs if t.group == g] for g in range(groups)], collector, agent


def first_last(group: Sequence[Trajectory], d: Sequence[np.ndarray], min_contribution_std: float
               ) -> list[tuple[float, float, float, float]]:
    """(A first, A last, z-term first, z-term last) of each trajectory whose root chain has >= 2 sessions."""
    keys = [(i, sid) for i, t in enumerate(group) for sid in t.session_ids]
    rows = np.array([i for i, _ in keys])
    contributions = np.array([d[i][sid] for i, sid in keys])
    rewards = [t.reward for t in group]
    a = adv.mosaic(rewards, rows, contributions, min_contribution_std=min_contribution_std)
    base = adv.mosaic(rewards, rows, None)  # the trajectory level alone: the session term is a - base
    index = {k: n for n, k in enumerate(keys)}
    out = []
    for i, t in enumerate(group):
        root = chains(t)[0]
        if len(root) >= 2:
            f, last = index[(i, root[0])], index[(i, root[-1])]
            out.append((a[f], a[last], a[f] - base[f], a[last] - base[last]))
    return out


def measure(seed: int, groups: int = 16, group_size: int = 8, continuations: int = 2, error_rate: float = 0.25,
            floor: float = 0.25, num_envs: int = 16, variants: Sequence[str] = tuple(VARIANTS),
            policy: str = "oracle") -> dict[str, Any]:
    """One seed: the rollouts, then each variant's mean first / last advantage in all-success groups."""
    grouped, collector, agent = collect(seed, groups, group_size, error_rate, num_envs, policy)
    success = [g for g in grouped if all(t.reward >= 0.5 for t in g)]
    counted = Counted(agent)
    d_by_start, cost = {}, {}
    for start in sorted({VARIANTS[v][0] for v in variants}):
        counted.steps = 0
        d_by_start[start] = [rollout_contributions(g, collector, counted, continuations, seed=seed * 1000 + k,
                                                   root_start=start) for k, g in enumerate(success)]
        cost[start] = counted.steps / max(1, sum(len(g) for g in success))
    out: dict[str, Any] = {
        "seed": seed,
        "success": float(np.mean([t.reward for g in grouped for t in g])),
        "all_success_groups": len(success),
        "sessions": float(np.mean([t.num_sessions for g in grouped for t in g])),
        "steps": float(np.mean([t.tree["steps_used"] for g in grouped for t in g])),
        **{f"continuation_steps_{start}": c for start, c in cost.items()},  # per trajectory
    }
    if {"group_mean", "rollout"} <= set(d_by_start):
        # In an all-success group the group mean is 1, so V at the first compaction is 1 + D(first session)
        # under "group_mean", and V(reset) is that minus D(first session) under "rollout".
        v1, v0 = [], []
        for g, dg, dr in zip(success, d_by_start["group_mean"], d_by_start["rollout"]):
            for i, t in enumerate(g):
                root = chains(t)[0]
                if len(root) >= 2:
                    v1.append(1.0 + dg[i][root[0]])
                    v0.append(v1[-1] - dr[i][root[0]])
        out["v_first_compaction"] = float(np.mean(v1)) if v1 else None
        out["v_reset"] = float(np.mean(v0)) if v0 else None
    for name in variants:
        start, std_min = VARIANTS[name]
        rows = [r for g, d in zip(success, d_by_start[start]) for r in first_last(g, d, floor if std_min is None
                                                                                     else std_min)]
        a = np.array(rows).reshape(-1, 4)
        out[name] = {"first": float(a[:, 0].mean()) if len(a) else 0.0,
                     "last": float(a[:, 1].mean()) if len(a) else 0.0,
                     "gap": float((a[:, 1] - a[:, 0]).mean()) if len(a) else 0.0,
                     "session_term_abs": float(np.abs(a[:, 2:]).mean()) if len(a) else 0.0,
                     "trajectories": len(a)}
    return out


def summarize(per_seed: Sequence[dict[str, Any]], variants: Sequence[str]) -> dict[str, Any]:
    """Each variant's figures as mean +- 95% interval over the seeds."""
    out: dict[str, Any] = {key: interval([s[key] for s in per_seed if s.get(key) is not None])
                           for key in ("success", "all_success_groups", "steps", "v_reset", "v_first_compaction",
                                       *(k for k in per_seed[0] if k.startswith("continuation_steps_")))}
    out.update({name: {key: interval([s[name][key] for s in per_seed])
                       for key in ("first", "last", "gap", "session_term_abs")} for name in variants})
    return out


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", default="bias", choices=["bias", "summary"],
                   help="bias: first vs last session in all-success groups; summary: the controlled case, "
                        "P(keep the fact in a summary) per update under broadcast and Mosaic")
    p.add_argument("--updates", type=int, default=None, help="summary study: policy-gradient updates per run "
                                                             "(default: 15; smoke: 2)")
    p.add_argument("--lr", type=float, default=2.0, help="summary study: step size on the summary logit")
    p.add_argument("--seeds", type=int, default=None, help="sets of rollouts (default: 5; quick: 2; smoke: 1)")
    p.add_argument("--groups", type=int, default=None, help="groups per seed (default: 16; quick: 4; smoke: 2)")
    p.add_argument("--group-size", type=int, default=None, help="trajectories per group (G) (default: 8; smoke: 4)")
    p.add_argument("--continuations", type=int, default=2, help="M per boundary")
    p.add_argument("--error-rate", type=float, default=0.25, help="the oracle's chance of a mistake per step")
    p.add_argument("--floor", type=float, default=0.25, help="min_contribution_std of the +floor variants")
    p.add_argument("--policy", default="context", choices=POLICIES,
                   help="context: the oracle as a function of its session (continuations act as the run did); "
                        "oracle: OracleAgent itself (remembers its plan, so its continuations do not)")
    p.add_argument("--num-envs", type=int, default=None, help="envs stepped side by side (default: 16; smoke: 8)")


def study(args: argparse.Namespace) -> dict[str, Any]:
    """The study ``args.study`` names, as ``args`` (its command line's) set it, as one JSON-ready dict."""
    if args.study == "summary":
        return summary_study_report(args)
    variants = tuple(VARIANTS)
    per_seed = [measure(seed, args.groups, args.group_size, args.continuations, args.error_rate, args.floor,
                        args.num_envs, variants, args.policy) for seed in range(args.seeds)]
    return {
        "bench": "credit: first vs last session in all-success groups",
        "env": {"id": ENV_ID, **DEMO},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "summary": summarize(per_seed, variants),
        "per_seed": per_seed,
        "machine": machine(["numpy", "gymnasium"]),
    }


def reach(history: Sequence[float], level: float) -> int:
    """The first update (1-based) after which P(good summary) is at least ``level``; len + 1 if never.

    Example:
        >>> reach([0.6, 0.85, 0.95], 0.9), reach([0.6], 0.9)
        (3, 2)
    """
    return next((u + 1 for u, p in enumerate(history) if p >= level), len(history) + 1)


def summary_study_report(args: Any) -> dict[str, Any]:
    """The controlled case over ``args.seeds`` seeds, both arms from the same seeds; JSON as :func:`study`'s."""
    groups = {"full": max(1, args.groups // 4), "quick": 4, "smoke": 1}[args.settings]
    arms = {algo: [summary_study(seed, algo, args.updates, groups, args.group_size, args.continuations,
                                 args.error_rate, args.lr, args.num_envs) for seed in range(args.seeds)]
            for algo in ("broadcast", "mosaic")}
    summary = {algo: {"p_keep_by_update": [interval([h[u] for h in runs]) for u in range(args.updates)],
                      "updates_to_0.9": interval([reach(h, 0.9) for h in runs]),
                      "updates_to_0.95": interval([reach(h, 0.95) for h in runs])}
               for algo, runs in arms.items()}
    paired = [reach(b, 0.9) - reach(m, 0.9) for b, m in zip(arms["broadcast"], arms["mosaic"])]
    result = {
        "bench": "credit: controlled case, a summary that keeps the fact vs one that drops it",
        "env": {"id": ENV_ID, **DEMO},
        "settings": {k: v for k, v in vars(args).items() if k != "out"} | {"groups_per_update": groups},
        "summary": summary,
        "updates_to_0.9_broadcast_minus_mosaic": interval(paired),
        "per_seed": arms,
        "machine": machine(["numpy", "gymnasium"]),
    }
    return result


BENCHMARK = Benchmark(
    "credit", "Mosaic's session credit on the demo's rollouts: the first and the last session's mean advantage in "
    "all-success groups, per variant (--study summary: the controlled case)", study, quick="2 seeds x 4 groups",
    smoke="1 seed x 2 groups of 4 on 8 envs, 2 updates", suites=(), options=options,
    defaults={"full": {"seeds": 5, "groups": 16, "group_size": 8, "num_envs": 16, "updates": 15},
              "quick": {"seeds": 2, "groups": 4, "group_size": 8, "num_envs": 16, "updates": 15},
              "smoke": {"seeds": 1, "groups": 2, "group_size": 4, "num_envs": 8, "updates": 2}})


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
