"""Plug in your own agent: subclass ``agents.Agent`` and implement ``act(observation, info) -> action string``.

The agent below is a dozen lines of rules: search the question's subject, open the top result, answer with
the last value the page showed. Swap its ``act`` for a call to your model (the observation is the whole
context of the session that acts; ``info["messages"]`` is the same as chat messages) and the loop stays.
Any such agent also runs in ``algos.rollout.Collector`` pools and ``algos.evaluate.pass_at_kt``.

Usage:
    python examples/custom_agent.py                        # 10 episodes on one-hop questions
    python examples/custom_agent.py --episodes 3 --site-size 150
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

import gymnasium as gym

import envs  # noqa: F401  (registers mosaic/WebQA-v0 and its variants)
from agents import Agent


class SearchOpenAnswer(Agent):
    """Searches the question's subject, opens the top result, answers with the last value it has seen."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        candidates = info["candidates"]  # complete, valid actions for this state (the env's candidates=True)
        answers = [c for c in candidates if c.startswith("answer(")]  # values the context has shown
        if info["steps_used"] == 0:
            return candidates[0]  # search("<a name from the question>")
        if info["steps_used"] == 1 or not answers:
            return "open(1)"
        return answers[-1]


def main(argv: Sequence[str] | None = None) -> float:
    """Runs the agent for ``--episodes`` episodes, prints each answer and the success rate, returns it."""
    parser = argparse.ArgumentParser(description="Run a hand-written agent on mosaic/WebQA-v0.")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to run (seeds 0, 1, ...)")
    parser.add_argument("--site-size", type=int, default=600, help="entities of the builtin site")
    args = parser.parse_args(argv)

    env = gym.make("mosaic/WebQA-v0", site_size=args.site_size, hops=1, max_steps=8, candidates=True)
    agent = SearchOpenAnswer()
    total = 0.0
    for episode in range(args.episodes):
        observation, info = env.reset(seed=episode)
        agent.reset()
        done = False
        while not done:
            observation, reward, terminated, truncated, info = env.step(agent.act(observation, info))
            done = terminated or truncated
        total += reward
        result = info["trajectory"]
        print(f"episode {episode}: answered {result['answer']!r}, gold {result['gold_answer']!r}, "
              f"reward {reward:.0f} in {result['steps_used']} steps")
    success = total / args.episodes
    print(f"success: {success:.2f} over {args.episodes} episodes")
    return success


if __name__ == "__main__":
    main()
