"""Gymnasium's vector envs on real rollouts (issue 13, section 2): compactions and forks beside root sessions,
answers, and autoresets while the other envs step on, for both backends, sync and async.

Gymnasium stacks each info key into one array typed by the first env's value, so a key that is an int in one
env and ``None`` in another used to raise inside ``VectorEnv._add_info``. Every info key now keeps one type in
every state (``NO_SESSION`` = -1 for "no session").
"""

from __future__ import annotations

import zlib

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the ids)
from envs.webqa import NO_SESSION

from helpers import SITE_SIZE

NUM_ENVS = 4
# Always offered beside the env's candidates, so that episodes compact, fork, finish and answer.
EXTRA_ACTIONS = ('compact("notes so far")', 'fork("a sub-question")', 'finish("done")', 'answer("nobody")')


def policy(obs: str, candidates) -> str:
    """An action that depends only on what the env shows: equal envs get equal actions in every mode."""
    options = [*candidates, *EXTRA_ACTIONS]
    return options[zlib.crc32(obs.encode("utf-8")) % len(options)]


def run_vector(mode: str, backend: str, steps: int, num_envs: int = NUM_ENVS) -> list[tuple]:
    kwargs = dict(site_size=SITE_SIZE, max_steps=(3, 6), candidates=True, backend=backend)
    vector_kwargs = {"shared_memory": False} if mode == "async" else {}
    vec = gym.make_vec("mosaic/WebQA-v0", num_envs=num_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs,
                       **kwargs)
    try:
        obs, info = vec.reset(seed=0)
        stream = [("reset", tuple(obs), _plain(info))]
        for _ in range(steps):
            actions = [policy(o, info["candidates"][k]) for k, o in enumerate(obs)]
            obs, reward, terminated, truncated, info = vec.step(actions)
            stream.append((tuple(actions), tuple(obs), tuple(reward), tuple(terminated), tuple(truncated),
                           _plain(info)))
    finally:
        vec.close()
    return stream


def _plain(info: dict) -> dict:
    """The stacked infos as plain lists (arrays compare element-wise, not as a whole)."""
    return {k: (_plain(v) if isinstance(v, dict) else np.asarray(v).tolist()) for k, v in info.items()}


@pytest.fixture(scope="module")
def text_sync():
    return run_vector("sync", "text", steps=30)


def test_sync_vector_env_runs_episodes_with_every_kind_of_session(text_sync):
    kinds = {kind for record in text_sync for kind in record[-1]["session_kind"]}
    assert kinds == {"root", "compact", "fork"}
    ends = sum(sum(r[3]) + sum(r[4]) for r in text_sync[1:])
    assert ends >= NUM_ENVS  # autoresets happened while other envs stepped on
    answered = [r for r in text_sync[1:] if any(a.startswith("answer(") for a in r[0])]
    assert answered
    last = text_sync[-1][-1]
    assert last["parent_id"] and all(isinstance(p, int) for p in last["parent_id"])


def test_no_session_is_minus_one_in_every_env(text_sync):
    for record in text_sync:
        info = record[-1]
        for kind, parent in zip(info["session_kind"], info["parent_id"]):
            assert (parent == NO_SESSION) == (kind == "root")
    assert text_sync[0][-1]["acted_session_id"] == [NO_SESSION] * NUM_ENVS


def test_async_vector_env_gives_the_same_stream(text_sync):
    assert run_vector("async", "text", steps=30) == text_sync


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_playwright_vector_env_gives_the_text_backends_stream(mode):
    # Two envs (each its own Chromium in async mode), long enough that both end episodes and autoreset.
    steps, num_envs = 12, 2
    text = run_vector("sync", "text", steps=steps, num_envs=num_envs)
    assert sum(sum(r[3]) + sum(r[4]) for r in text[1:]) >= num_envs
    assert run_vector(mode, "playwright", steps=steps, num_envs=num_envs) == text


def test_the_readme_make_vec_line_works():
    for mode in ("sync", "async"):
        vec = gym.make_vec("mosaic/WebQA-v0", num_envs=2, vectorization_mode=mode, site_size=SITE_SIZE)
        vec.reset(seed=0)
        obs, *_, info = vec.step(['compact("notes")', 'search("museum")'])
        assert list(info["session_kind"]) == ["compact", "root"] and list(info["parent_id"]) == [0, NO_SESSION]
        vec.close()
