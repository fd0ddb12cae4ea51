"""Pass@(K,T) of an agent: the two protocols, the usage columns, batching, and ``mosaic eval``'s files.

The estimator itself is tested in ``test_pass_at_k.py``; these tests run agents through ``pass_at_kt``.
"""

from __future__ import annotations

import csv
import json
import os

import gymnasium as gym
import numpy as np
import pytest
from matplotlib.image import imread

from agents import OracleAgent, RandomAgent
from mosaic_gym.cli import main
from algos.evaluate import pass_at_kt
from helpers import SITE_SIZE
from envs import WebQAEnv

# Wide enough to cut off every agent here somewhere, and to let the oracle finish everything at the top.
TS = [1, 4, 8, 16, 32, 64]


@pytest.fixture(scope="module")
def env():
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, split="test")
    yield env
    env.close()


@pytest.fixture(scope="module")
def candidates_env():
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, split="test", candidates=True)
    yield env
    env.close()


@pytest.fixture(scope="module")
def task_ids(env):
    tasks = env.unwrapped.tasks
    return [tasks[i * len(tasks) // 4].id for i in range(4)]


def run_alone(env, agent, task_id, budget):
    """One episode in a plain loop, no Collector: success, steps used, sessions after each step."""
    obs, info = env.reset(seed=0, options={"task_id": task_id, "max_steps": budget})
    agent.reset()
    sessions = []
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        sessions.append(info["num_sessions"])
        if terminated or truncated:
            return info["trajectory"]["success"], info["trajectory"]["steps_used"], sessions


def test_oracle_table_and_usage_match_plain_runs_capped_at_each_t(env, task_ids):
    """The deterministic oracle: Pass@(K,T) is the share of tasks solved within T, for every K, and the
    usage columns are what plain episodes capped at T used."""
    agent = OracleAgent(env, compact_at=0.2, fork=True)  # several sessions, so the sessions column has work
    needed = sorted(run_alone(env, agent, task_id, 64)[1] for task_id in task_ids)
    ts = sorted({1, needed[len(needed) // 2], 64})  # the middle budget lets some tasks through, not all
    result = pass_at_kt(agent, env, ks=[1, 2], ts=ts, n=2, tasks=task_ids, progress=False)
    solved, steps, sessions = [], [], []
    for t in ts:
        runs = [run_alone(env, agent, task_id, t) for task_id in task_ids]
        solved.append(np.mean([ok for ok, _, _ in runs]))
        steps.append(np.mean([used for _, used, _ in runs]))
        sessions.append(np.mean([by_step[-1] for _, _, by_step in runs]))
    np.testing.assert_allclose(result.table, [solved, solved])
    np.testing.assert_allclose(result.mean_steps, steps)
    np.testing.assert_allclose(result.mean_sessions, sessions)
    assert result.table[0].tolist() == [0.0, solved[1], 1.0] and 0.0 < solved[1] < 1.0
    assert max(sessions) > 1


@pytest.mark.parametrize("agent_kind", ["oracle", "oracle-with-errors", "random-over-candidates"])
def test_truncate_and_rerun_agree_for_an_agent_blind_to_the_budget(env, candidates_env, task_ids, agent_kind):
    if agent_kind == "random-over-candidates":
        env, agent, ts = candidates_env, RandomAgent(seed=5), [2, 4, 8, 16]
    else:
        agent = OracleAgent(env, error_rate=0.3 if agent_kind == "oracle-with-errors" else 0.0, seed=5, fork=True)
        ts = TS
    common = dict(ks=[1, 2, 4], ts=ts, n=4, tasks=task_ids, seed=11, num_envs=3, progress=False)
    truncated = pass_at_kt(agent, env, protocol="truncate", **common)
    rerun = pass_at_kt(agent, env, protocol="rerun", **common)
    np.testing.assert_array_equal(truncated.table, rerun.table)
    np.testing.assert_array_equal(truncated.mean_steps, rerun.mean_steps)
    np.testing.assert_array_equal(truncated.mean_sessions, rerun.mean_sessions)
    assert len(truncated.samples) == len(task_ids) * 4 and len(rerun.samples) == len(task_ids) * 4 * len(ts)
    assert {s.budget for s in truncated.samples} == {max(ts)} and {s.budget for s in rerun.samples} == set(ts)
    assert truncated.table.min() < truncated.table.max()  # the budget matters: agreement is not trivial


def test_table_is_monotone_in_k_and_t_and_axes_come_sorted(env, task_ids):
    agent = OracleAgent(env, error_rate=0.3, seed=2)
    for protocol in ("truncate", "rerun"):
        result = pass_at_kt(agent, env, ks=[4, 1, 2], ts=TS[::-1] + [8], n=6, tasks=task_ids,
                            protocol=protocol, progress=False)
        assert result.ks == [1, 2, 4] and result.ts == TS
        assert np.all(np.diff(result.table, axis=0) >= 0) and np.all(np.diff(result.table, axis=1) >= 0)
        assert np.any(np.diff(result.table, axis=0) > 0)  # errors spread the samples: more K helps somewhere
        assert np.all(np.diff(result.mean_steps) >= 0)


def test_results_do_not_depend_on_batching_or_on_how_the_env_is_given(env, task_ids):
    """A pool of one env, of five envs from a factory, or of a given env plus envs from its spec: same runs."""
    agent = OracleAgent(env, error_rate=0.3, seed=4)
    common = dict(ks=[1, 2], ts=[16, 64], n=3, tasks=task_ids, progress=False)
    alone = pass_at_kt(agent, env, num_envs=1, **common)
    factory = pass_at_kt(agent, lambda: gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, split="test"),
                         num_envs=5, **common)
    given = pass_at_kt(agent, env, num_envs=4, **common)
    assert alone.samples == factory.samples == given.samples
    np.testing.assert_array_equal(alone.table, factory.table)


def test_default_tasks_are_the_env_split_and_an_env_without_a_spec_runs_alone():
    env = WebQAEnv(site_size=SITE_SIZE, split="test", hops=1)
    result = pass_at_kt(OracleAgent(env), env, ks=[1], ts=[64], n=1, num_envs=4, progress=False)
    assert result.task_ids == [task.id for task in env.unwrapped.tasks]
    assert result.table.tolist() == [[1.0]]


def test_bad_arguments_raise_clear_errors(env, task_ids):
    agent = OracleAgent(env)
    with pytest.raises(ValueError, match=r"K=8 is more than the n=4 samples.*n >= 8"):
        pass_at_kt(agent, env, ks=[1, 8], ts=[8], n=4, tasks=task_ids, progress=False)
    with pytest.raises(ValueError, match="protocol"):
        pass_at_kt(agent, env, ks=[1], ts=[8], n=1, tasks=task_ids, protocol="restart", progress=False)
    with pytest.raises(ValueError, match="repeated"):
        pass_at_kt(agent, env, ks=[1], ts=[8], n=1, tasks=task_ids[:1] * 2, progress=False)
    with pytest.raises(KeyError, match="no-such-task"):
        pass_at_kt(agent, env, ks=[1], ts=[8], n=1, tasks=["no-such-task"], progress=False)


def test_mosaic_eval_writes_csv_markdown_json_and_a_heatmap(tmp_path, capsys, monkeypatch):
    from transformers.utils import logging as transformers_logging

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    out = tmp_path / "eval"
    code = main(["eval", "--agent", "oracle", "--error-rate", "0.2", "--site-size", str(SITE_SIZE), "--tasks", "3",
                 "--ks", "1,2", "--ts", "16,64", "--n", "2", "--no-progress", "--out", str(out)])
    assert code == 0
    # --no-progress silenced the bars while it ran, and left no setting behind for later code in this process
    assert "TQDM_DISABLE" not in os.environ and transformers_logging.is_progress_bar_enabled()
    printed = capsys.readouterr().out
    markdown = (out / "passkt.md").read_text()
    assert "| K \\ T | 16 | 64 |" in printed and "| K \\ T | 16 | 64 |" in markdown
    assert "| T | mean sessions | mean steps |" in markdown

    with (out / "passkt.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["K\\T", "16", "64"] and [row[0] for row in rows[1:]] == ["1", "2"]

    record = json.loads((out / "passkt.json").read_text())
    assert record["ks"] == [1, 2] and record["ts"] == [16, 64] and record["protocol"] == "truncate"
    assert len(record["mean_sessions"]) == len(record["mean_steps"]) == 2
    assert len(record["task_ids"]) == 3 and len(record["samples"]) == 3 * 2
    assert np.array(record["table"]).shape == (2, 2)
    assert record["metadata"]["args"]["error_rate"] == 0.2

    image = imread(out / "passkt.png")
    # plot_heatmap's default size: (2 + 0.8 * len(ts), 1.6 + 0.5 * len(ks)) inches at 100 dpi.
    assert image.shape == (260, 360, 4) and image[..., :3].std() > 0.05


def test_mosaic_eval_random_agent_rerun_and_a_k_above_n(tmp_path, capsys):
    code = main(["eval", "--agent", "random", "--candidates", "--protocol", "rerun", "--site-size", str(SITE_SIZE),
                 "--tasks", "2", "--ks", "1,2", "--ts", "2,4", "--n", "2", "--no-progress", "--out", str(tmp_path)])
    assert code == 0
    record = json.loads((tmp_path / "passkt.json").read_text())
    assert record["protocol"] == "rerun" and sorted({s["budget"] for s in record["samples"]}) == [2, 4]
    assert main(["eval", "--site-size", str(SITE_SIZE), "--ks", "1,4", "--n", "2", "--out", str(tmp_path)]) == 2
    assert "K=4 is more than the n=2 samples" in capsys.readouterr().err
