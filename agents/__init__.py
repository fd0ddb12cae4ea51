"""Agents: who acts. ``Agent`` is the protocol; ``RandomAgent``, ``OracleAgent``, ``LLMAgent`` (a model in this
process) and ``ServerAgent`` (a model behind an OpenAI-compatible server) are ready.

``RecordingAgent`` is an agent that returns, with its actions, what it did (``agents.records.AgentStep``); the
learners train on those records, packed by ``agents.records.pack_session`` into ``TrainSequence`` s.

Example:
    >>> from agents import Agent, RandomAgent
    >>> isinstance(RandomAgent(), Agent)
    True
"""

from __future__ import annotations

from .base import Agent, RecordingAgent
from .oracle import OracleAgent
from .random_agent import RandomAgent

__all__ = ["Agent", "LLMAgent", "OracleAgent", "RandomAgent", "RecordingAgent", "ServerAgent"]


def __getattr__(name: str):
    # The LLM agent imports torch and transformers: load them only when it is asked for.
    if name == "LLMAgent":
        from .llm import LLMAgent

        return LLMAgent
    if name == "ServerAgent":
        from .server import ServerAgent

        return ServerAgent
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
