"""A random agent: valid-looking random tool calls, or a uniform choice among ``info["candidates"]``.

Example:
    >>> from agents import RandomAgent
    >>> agent = RandomAgent(seed=0)
    >>> agent.act("Question: where was Edra Vane born?", {"candidates": ['search("Edra Vane")']})
    'search("Edra Vane")'
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from envs.actions import format_action

from .base import Agent, step_rng

_WORD = re.compile(r"[A-Z][a-z]{2,}(?: [A-Z][a-z]{2,})?")


class RandomAgent(Agent):
    """Uniform over the candidates when the env offers them; otherwise a random call built from the context.

    Args:
        seed: seeds its choices; ``reset()`` restarts the stream, so runs repeat exactly. In a ``Collector``
            run each step draws from its own generator (:func:`agents.base.step_rng`), so an episode's
            choices do not depend on what else shares the batch or on its budget.
        compact_prob, fork_prob: chances of a compact or fork call when choosing freely.
    """

    def __init__(self, seed: int = 0, compact_prob: float = 0.05, fork_prob: float = 0.05):
        self.seed = seed
        self.compact_prob = compact_prob
        self.fork_prob = fork_prob
        self.rng = np.random.default_rng(seed)

    def reset(self, index: int | None = None) -> None:
        if index is None:
            self.rng = np.random.default_rng(self.seed)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        rng = step_rng(self.seed, info) or self.rng
        candidates = info.get("candidates")
        if candidates:
            return candidates[int(rng.integers(len(candidates)))]
        words = _WORD.findall(observation[-4000:]) or ["Question"]
        word = words[int(rng.integers(len(words)))]
        r = rng.random()
        if r < self.compact_prob:
            return format_action("compact", f"So far I have seen {word}.")
        if r < self.compact_prob + self.fork_prob:
            return format_action("fork", f"Find out about {word}.")
        tool = ("search", "open", "scroll", "find", "answer", "finish")[int(rng.integers(6))]
        if tool == "open":
            return format_action("open", int(rng.integers(1, 11)))
        if tool == "scroll":
            return format_action("scroll", "down" if rng.random() < 0.7 else "up")
        return format_action(tool, word)
