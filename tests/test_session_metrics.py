"""The env's step log, the study's session and recovery metrics over real oracle trajectories, and the
family filter the fork preset uses."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

import envs  # noqa: F401
from agents import OracleAgent
from algos.rollout import Collector, Request
from algos.evaluate.session_metrics import group_diversity, is_error, session_metrics

KW = {"site_size": 120, "hops": (1, 2), "max_steps": 12, "session_max_tokens": 1000, "candidates": True}


def _runs(env_id="mosaic/WebQA-Compact-v0", n=12, **oracle):
    make = lambda: gym.make(env_id, **KW)  # noqa: E731
    env = make()
    tasks = env.unwrapped.tasks
    requests = [Request(seed=k, options={"task_id": tasks[k % len(tasks)].id}, group=k // 4) for k in range(n)]
    return Collector(make, 4).run(OracleAgent(env, **oracle), requests)


def test_clean_oracle_steps_are_all_valid_and_on_path():
    runs = _runs()
    assert all(r.reward == 1.0 for r in runs)
    for r in runs:
        log = r.tree["step_log"]
        assert len(log) == r.tree["steps_used"]
        assert not any(is_error(s) for s in log)
        assert log[-1]["tool"] == "answer" and log[-1]["gold"]
        # Every session that acted is on the tree, and the log names sessions in the order they acted.
        assert {s["session"] for s in log} <= set(r.session_ids)
    m = session_metrics(runs)
    assert m["erred"] == 0.0 and math.isnan(m["recovery"]) and m["success_clean"] == 1.0
    assert m["valid_steps"] == 1.0 and 0 < m["step_quality"] <= 1 and 0 < m["utility"] <= 1


def test_a_gold_page_counts_once_per_trajectory():
    for r in _runs(compact_at=0.3):
        reached = [s for s in r.tree["step_log"] if s["gold"] and s["tool"] in ("search", "open")]
        gold_pages = {g.arg for g in _task(r.task_id).gold_path if g.tool in ("search", "open")}
        assert len(reached) <= len(gold_pages)


def _task(task_id):
    return gym.make("mosaic/WebQA-Compact-v0", **KW, split="all").unwrapped.site.task(task_id)


def test_errors_are_logged_and_recovery_is_measured():
    runs = _runs(n=24, error_rate=0.35, seed=1)
    m = session_metrics(runs)
    assert 0 < m["erred"] <= 1 and 0 < m["error_steps"] < 1 and m["valid_steps"] < 1
    erred = [r for r in runs if any(is_error(s) for s in r.tree["step_log"])]
    assert m["recovery"] == pytest.approx(sum(r.reward for r in erred) / len(erred))
    assert sum(n for n, _ in m["success_by_length"].values()) == len(runs)


def test_the_step_log_is_deterministic_and_survives_a_snapshot():
    env = gym.make("mosaic/WebQA-Compact-v0", **KW)
    agent = OracleAgent(env, error_rate=0.3, seed=2)
    logs = []
    for _ in range(2):
        agent.reset()
        obs, info = env.reset(seed=5)
        for k in range(3):
            obs, *_rest, info = env.step(agent.act(obs, info))
        snap = env.unwrapped.snapshot()
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        logs.append(info["trajectory"]["step_log"])
    assert logs[0] == logs[1]
    env.reset(options={"snapshot": snap})
    assert env.unwrapped.trajectory()["step_log"] == logs[0][:3]


def test_forks_and_unused_forks_on_the_fork_variant():
    kw = {**KW, "hops": (2, 3), "families": "compare", "max_steps": 24, "session_max_tokens": 2400}
    make = lambda: gym.make("mosaic/WebQA-Fork-v0", **kw)  # noqa: E731
    env = make()
    requests = [Request(seed=k, options={"task_id": t.id}) for k, t in enumerate(env.unwrapped.tasks)]
    runs = Collector(make, 4).run(OracleAgent(env, fork=True), requests)
    m = session_metrics(runs)
    assert m["forks"] >= 1 and m["unused_forks"] == 0.0  # the clean oracle's forks all return the right answer
    solo = session_metrics(Collector(make, 4).run(OracleAgent(env, fork=False), requests))
    assert solo["forks"] == 0 and math.isnan(solo["unused_forks"])


def test_families_filter_and_its_errors():
    env = gym.make("mosaic/WebQA-v0", site_size=120, families=["compare", "long"], split="all")
    assert {t.family for t in env.unwrapped.tasks} == {"compare", "long"}
    with pytest.raises(ValueError, match="unknown on this site"):
        gym.make("mosaic/WebQA-v0", site_size=120, families="comparison")
    with pytest.raises(ValueError, match="widen hops or families"):
        gym.make("mosaic/WebQA-v0", site_size=120, families="compare", hops=1)
    with pytest.raises(ValueError, match="a family name or a list"):
        gym.make("mosaic/WebQA-v0", site_size=120, families=[3])


def test_group_diversity_reads_the_groups():
    runs = _runs(n=16, error_rate=0.35, compact_at=0.4, seed=3)
    groups = [[r for r in runs if r.group == g] for g in range(4)]
    d = group_diversity(groups)
    assert all(0 <= v <= 1 for k, v in d.items() if k != "k_std")
    same = group_diversity([[runs[0]] * 4])
    assert same == {"k_varies": 0.0, "k_varies_success": 0.0, "k_std": 0.0, "reward_varies": 0.0}
    with pytest.raises(ValueError):
        session_metrics([])
