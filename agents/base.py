"""The agent protocol: anything that turns an observation into an action string.

Example:
    >>> from agents import Agent
    >>> class Echo(Agent):
    ...     def act(self, observation, info):
    ...         return 'answer("42")'
    >>> Echo().act_batch(["obs a", "obs b"], [{}, {}])
    ['answer("42")', 'answer("42")']
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


class Agent:
    """Base class of every agent. Subclasses implement :meth:`act`; :meth:`act_batch` defaults to a loop.

    ``reset()`` is called at the start of each episode (``reset(index)`` for one env of a batch, where an
    agent keeps per-env state). Observations are the env's context strings; ``info`` is the env's info dict
    (``session_id``, ``messages``, ``candidates``, ...).
    """

    def reset(self, index: int | None = None) -> None:
        """Forget per-episode state (of every env, or of env ``index`` in a batch)."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The action string for one env."""
        raise NotImplementedError(f"{type(self).__name__} must implement act(observation, info)")

    def act_batch(self, observations: Sequence[str], infos: Sequence[dict[str, Any]]) -> list[str]:
        """Actions for many envs at once; env ``i`` gets ``act(observations[i], infos[i])`` by default."""
        return [self.act(o, i) for o, i in zip(observations, infos)]


def step_rng(seed: int, info: Mapping[str, Any]) -> np.random.Generator | None:
    """A generator for this step alone when ``info`` carries ``episode_seed`` (a ``Collector`` run), else None.

    It is seeded by the agent's seed, the episode's seed and ``steps_used``, so a step's draws depend neither
    on the other episodes in the batch nor on the budget: an episode repeats exactly under any budget it
    outlasts, which pairs the runs that Pass@(K,T) compares across budgets.

    Example:
        >>> info = {"episode_seed": 3, "steps_used": 5}
        >>> step_rng(0, info).random() == step_rng(0, info).random(), step_rng(0, {"steps_used": 5})
        (True, None)
    """
    if info.get("episode_seed") is None:
        return None
    return np.random.default_rng([seed, int(info["episode_seed"]), int(info["steps_used"])])
