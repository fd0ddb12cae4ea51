"""The agent protocol: anything that turns an observation into an action string; and agents that record.

A :class:`RecordingAgent` also says what it did: with each batch of actions it returns one
:class:`agents.records.AgentStep` per env (the tokens it conditioned on and emitted, their log-probs), which a
collector keeps for learners. The records travel as return values, so a learner gets them only by asking.

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

from .records import AgentStep


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


class RecordingAgent(Agent):
    """An agent whose every action comes with its step record: subclasses implement :meth:`act_batch_recorded`.

    Example:
        >>> class Constant(RecordingAgent):
        ...     def act_batch_recorded(self, observations, infos):
        ...         steps = [AgentStep(i.get("session_id"), [], [], None, "open(1)") for i in infos]
        ...         return [s.text for s in steps], steps
        >>> Constant().act("obs", {"session_id": 0}), Constant().act_batch_recorded(["obs"], [{}])[1][0].text
        ('open(1)', 'open(1)')
    """

    def act_batch_recorded(self, observations: Sequence[str], infos: Sequence[dict[str, Any]]
                           ) -> tuple[list[str], list[AgentStep]]:
        """Actions for many envs at once, and what the agent did for each (``steps[i]`` is env ``i``'s)."""
        raise NotImplementedError(f"{type(self).__name__} must implement act_batch_recorded(observations, infos)")

    def act_batch(self, observations: Sequence[str], infos: Sequence[dict[str, Any]]) -> list[str]:
        """The actions of :meth:`act_batch_recorded`, without the records."""
        return self.act_batch_recorded(observations, infos)[0]

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The action for one env."""
        return self.act_batch([observation], [info])[0]


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
