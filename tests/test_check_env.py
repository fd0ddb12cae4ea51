"""Gymnasium's own checker passes on every registered env and on every wrapper the package ships, on the builtin
site and on a user's corpus: spaces, seeding, reset and step signatures, determinism, render, and that a spec can
remake the env (check_env's render check does, which a wrapper without recorded arguments fails)."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.sb3 import make_sb3_env

CORPUS = str(Path(__file__).parent / "fixtures" / "corpus_bcp")
SITES = {"builtin": {"site_size": 120}, "corpus": {"site": CORPUS, "split": "all"}}
# check_env's notice that it was handed a wrapper, not a fault of the env.
_WRAPPER_NOTICE = "is different from the unwrapped version"


def _check(env: gym.Env) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    problems = [str(w.message) for w in caught if _WRAPPER_NOTICE not in str(w.message)]
    assert not problems, problems
    env.close()


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("env_id", envs.VARIANTS)
def test_check_env_passes_on_every_registered_env(env_id, site):
    _check(gym.make(env_id, **SITES[site]).unwrapped)


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("env_id", envs.VARIANTS)
def test_check_env_passes_on_the_candidate_actions_wrapper(env_id, site):
    _check(make_sb3_env(env_id, max_candidates=8, **SITES[site]))
