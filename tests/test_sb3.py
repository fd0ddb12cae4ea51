"""The Stable-Baselines3 view of the env: SB3's check_env, masks, faithfulness to the text env, determinism."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import envs
import envs.sb3
from helpers import SITE_SIZE, load_module
from envs.actions import parse_action
from envs.sb3 import (GLOBAL_FEATURES, INVALID_ACTION, SLOT_FEATURES, TOOLS, CandidateActions, fit_candidates,
                      make_sb3_env)

IDS = sorted(envs.VARIANTS)
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sb3_ppo.py"


def random_masked_rollout(env: CandidateActions, seed: int, steps: int):
    """Yields ``(candidates_before, index, obs, reward, terminated, truncated, info)``, resetting after each episode."""
    rng = np.random.default_rng(seed)
    episode = seed
    env.reset(seed=episode)
    for _ in range(steps):
        before, mask = list(env.candidates), env.action_masks()
        index = int(rng.choice(np.flatnonzero(mask))) if mask.any() else 0
        obs, reward, terminated, truncated, info = env.step(index)
        yield before, index, obs, reward, terminated, truncated, info
        if terminated or truncated:
            episode += 1
            env.reset(seed=episode)


def without(info: dict, key: str) -> dict:
    return {k: v for k, v in info.items() if k != key}


@pytest.mark.parametrize("env_id", IDS)
def test_sb3_check_env_passes_without_warnings(env_id):
    env = make_sb3_env(env_id, site_size=SITE_SIZE, max_steps=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, warn=True)


def test_wrapper_switches_candidates_on_and_rejects_other_envs():
    env = CandidateActions(gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE))
    _, info = env.reset(seed=0)
    assert info["candidates"] and env.candidates == info["candidates"]
    with pytest.raises(TypeError, match="WebQA"):
        CandidateActions(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="max_candidates"):
        CandidateActions(gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE), max_candidates=0)


def test_mask_is_exactly_the_valid_candidates():
    env = make_sb3_env(site_size=SITE_SIZE, max_steps=(10, 30), max_candidates=24)
    checked = dropped = 0
    for _, _, obs, _, _, _, info in random_masked_rollout(env, seed=0, steps=150):
        mask = env.action_masks()
        assert mask.dtype == bool and mask.shape == (24,)
        assert mask.sum() == len(env.candidates) == min(24, len(info["candidates"]))
        assert info["candidates"] == env.unwrapped.candidate_actions()
        if len(info["candidates"]) <= 24:
            assert env.candidates == info["candidates"]
            checked += 1
        else:
            assert set(env.candidates) < set(info["candidates"])
            dropped += 1
        assert env.observation_space.contains(obs)
    assert checked > 100 and dropped > 0


def test_candidates_beyond_the_limit_drop_links_from_the_end():
    env = make_sb3_env(site_size=SITE_SIZE, hops=1, max_candidates=4)
    _, info = env.reset(seed=0)
    env.step(0)
    full = env.unwrapped.candidate_actions()
    links = [c for c in full if parse_action(c).name == "open"]
    others = [c for c in full if parse_action(c).name != "open"]
    assert len(full) > 4 and len(others) < 4
    assert env.candidates == [c for c in full if c in others or c in links[: 4 - len(others)]]
    assert env.action_masks().sum() == 4


def test_index_executes_that_candidate_like_the_text_env():
    """A twin text env stepped with the chosen candidate's string sees the same observation, reward and info."""
    env = make_sb3_env(site_size=SITE_SIZE, max_steps=(10, 30), render_mode="ansi")
    twin = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, max_steps=(10, 30), candidates=True, render_mode="ansi")
    rng = np.random.default_rng(1)
    for episode in range(8):
        _, info = env.reset(seed=episode)
        _, twin_info = twin.reset(seed=episode)
        assert info == twin_info and env.render() == twin.render()
        done = False
        while not done:
            assert env.candidates == fit_candidates(twin_info["candidates"], 64)[0]
            index = int(rng.choice(np.flatnonzero(env.action_masks())))
            chosen = env.candidates[index]
            _, reward, terminated, truncated, info = env.step(index)
            _, twin_reward, twin_terminated, twin_truncated, twin_info = twin.step(chosen)
            assert info["action_text"] == chosen
            assert (reward, terminated, truncated) == (twin_reward, twin_terminated, twin_truncated)
            assert without(info, "action_text") == twin_info
            assert env.render() == twin.render()
            done = terminated or truncated


@pytest.mark.parametrize("index", ["masked", "out_of_range", "negative"])
def test_invalid_index_is_an_error_step_not_an_exception(index):
    env = make_sb3_env(site_size=SITE_SIZE, hops=1, max_steps=5, max_candidates=8)
    twin = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, hops=1, max_steps=5, candidates=True)
    env.reset(seed=0)
    twin.reset(seed=0)
    mask = env.action_masks()
    assert not mask.all()
    action = {"masked": int(np.flatnonzero(~mask)[0]), "out_of_range": 8 + 3, "negative": -1}[index]
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["action_error"] and info["steps_used"] == 1 and info["action_text"] == INVALID_ACTION
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert without(info, "action_text") == twin.step(INVALID_ACTION)[4]
    assert obs[-GLOBAL_FEATURES + 9] == 1.0  # the "last action was an error" feature


def test_feature_blocks_describe_the_state():
    hash_dims, slots = 64, 8
    env = make_sb3_env(site_size=SITE_SIZE, hops=1, max_steps=10, max_candidates=slots, hash_dims=hash_dims)
    obs, info = env.reset(seed=0)
    assert obs.shape == (2 * hash_dims + slots * SLOT_FEATURES + GLOBAL_FEATURES,) and obs.dtype == np.float32
    assert len(env.candidates) == 1 and parse_action(env.candidates[0]).name == "search"
    first = obs[2 * hash_dims: 2 * hash_dims + SLOT_FEATURES]
    tool, valid, in_question = first[: len(TOOLS)], first[len(TOOLS)], first[len(TOOLS) + 1]
    assert tool.tolist() == [float(t == "search") for t in TOOLS] and valid == 1.0 and in_question == 1.0
    assert not obs[2 * hash_dims + SLOT_FEATURES: -GLOBAL_FEATURES].any()  # empty slots are zeros
    assert obs[-GLOBAL_FEATURES] == 1.0  # all steps left
    after, *_ = env.step(0)
    assert after[-GLOBAL_FEATURES] == pytest.approx(0.9)
    assert not np.array_equal(after[hash_dims: 2 * hash_dims], obs[hash_dims: 2 * hash_dims])  # a new tool result


def test_same_seed_same_numeric_observations():
    streams = []
    for _ in range(2):
        env = make_sb3_env(site_size=SITE_SIZE, max_steps=(10, 30))
        first, _ = env.reset(seed=0)
        stream = [first] + [obs for *_, obs, _, _, _, _ in random_masked_rollout(env, seed=5, steps=120)]
        streams.append(np.stack(stream))
    assert np.array_equal(streams[0], streams[1])
    other, _ = make_sb3_env(site_size=SITE_SIZE).reset(seed=1)
    assert not np.array_equal(streams[0][0], other)


def test_vectorised_envs_dummy_and_subprocess():
    kwargs = {"site_size": SITE_SIZE, "max_steps": 5, "max_candidates": 8}
    # make_vec_env asks a string id for render_mode="rgb_array" unless told otherwise; WebQA renders text only.
    by_id = make_vec_env("mosaic/WebQA-v0", n_envs=2, seed=0, wrapper_class=CandidateActions,
                         env_kwargs={"site_size": SITE_SIZE, "max_steps": 5, "render_mode": None},
                         wrapper_kwargs={"max_candidates": 8})
    dummy = make_vec_env(make_sb3_env, n_envs=2, seed=0, env_kwargs=kwargs, vec_env_cls=DummyVecEnv)
    # fork: the children inherit the site this process already built.
    subproc = make_vec_env(make_sb3_env, n_envs=2, seed=0, env_kwargs=kwargs, vec_env_cls=SubprocVecEnv,
                           vec_env_kwargs={"start_method": "fork"})
    try:
        results = []
        for vec in (by_id, dummy, subproc):
            observations = [vec.reset()]
            for _ in range(12):
                masks = get_action_masks(vec)
                assert masks.shape == (2, 8) and masks.any(axis=1).all()
                observations.append(vec.step(masks.argmax(axis=1))[0])
            results.append(np.stack(observations))
        assert np.array_equal(results[0], results[1]) and np.array_equal(results[1], results[2])
    finally:
        for vec in (by_id, dummy, subproc):
            vec.close()


def load_example():
    return load_module(EXAMPLE, "sb3_ppo_example")


def test_example_help_answers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_example().parse_args(["--help"])
    assert exit_info.value.code == 0
    assert "--timesteps" in capsys.readouterr().out


def test_example_quick_run_writes_pass_at_1(tmp_path):
    results = load_example().main(["--quick", "--out", str(tmp_path)])
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["pass_at_1"] == results["pass_at_1"]
    assert set(written["pass_at_1"]) == {"maskable_ppo", "random"}
    for table in written["pass_at_1"].values():
        for split in ("train", "test"):
            assert len(table[split]) == len(written["ts"]) and all(0.0 <= v <= 1.0 for v in table[split])
            assert table[split] == sorted(table[split])  # a larger budget never passes less
    assert (tmp_path / "model.zip").exists()
