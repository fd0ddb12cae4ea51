"""Probes: the policy's probability of the right session decision at fixed states, measured without sampling.

Held-out success is a mean of Bernoulli draws: with 28 test tasks run once each it carries +-0.06-0.12 of noise
per seed (docs/findings.md). A probe carries none: it is the exact probability the policy gives one action at a
fixed set of states, computed by the learner's own scorer (:func:`algos.logprobs.choice_logprobs`), so a learning
curve of it shows the policy moving from the first update on.

The ``summary`` probe: the states where a session must compact (its window is full) in an env that offers
summaries to choose from (``summary_choices=True``), reached by the oracle on the first ``n`` training tasks with
fixed seeds; the probed action is the complete summary (the env's first compaction candidate), the one that keeps
what the session read. Its metrics: the mean probability over the states and the share of states where it is
at least 0.9.

Example:
    >>> PROBES
    ('summary',)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from agents import OracleAgent
from agents.records import Choice, TrainSequence
from envs import view

from algos.logprobs import choice_logprobs, micro_batches

PROBES = ("summary",)
PROBE_ENV_INDEX = -7_000  # the agent's cache key of a probe state (no env of a pool has a negative index)


@dataclass(frozen=True)
class ProbeState:
    """One fixed state: the observation and info an agent acts on, and the index of the probed candidate."""

    observation: str
    info: dict[str, Any]
    target: int


def summary_states(env: Any, count: int, seed: int = 0, max_steps: int = 64) -> list[ProbeState]:
    """Up to ``count`` states where a session must compact and two summaries are offered, one per training task
    (the first ``count`` tasks of ``env``, each reset with seed ``seed + k``), reached by the oracle; the target is
    the complete summary (the first compact candidate). An env without ``summary_choices`` gives none."""
    seen = view(env)
    if not (seen.candidates and seen.summary_choices):
        raise ValueError("the summary probe needs an env made with candidates=True and summary_choices=True")
    oracle = OracleAgent(env, seed=seed)
    states: list[ProbeState] = []
    for k, task in enumerate(seen.tasks[:count]):
        obs, info = env.reset(seed=seed + k, options={"task_id": task.id, "max_steps": max_steps})
        oracle.reset()
        done = False
        while not done:
            offered = [c for c in info.get("candidates", ()) if c.startswith("compact(")]
            if info.get("must_compact") and len(offered) > 1:
                states.append(ProbeState(obs, dict(info), info["candidates"].index(offered[0])))
                break
            obs, _, terminated, truncated, info = env.step(oracle.act(obs, info))
            done = terminated or truncated
    return states


@torch.no_grad()
def probe_probabilities(agent: Any, states: Sequence[ProbeState], temperature: float, length_normalize: bool,
                        device: str = "cpu", max_tokens: int = 2048) -> np.ndarray:
    """The policy's probability of each state's target candidate, ``pi = softmax(score / temperature)`` as the
    agent samples (at temperature 1 where it samples greedily); the agent's sampling generator is not touched.

    The states are scored in passes of at most ``max_tokens`` padded tokens (:func:`algos.logprobs.micro_batches`,
    as the learner's update runs): one pass over all 32 states of the summary preset's probe, with every
    candidate summary as a branch of its tree, raised a run's peak memory by about 720 MiB; the scores do not
    depend on what else is in a pass.
    """
    if not states:
        return np.zeros(0)
    infos = [{**s.info, "env_index": PROBE_ENV_INDEX - k} for k, s in enumerate(states)]
    candidates = [list(s.info["candidates"]) for s in states]
    steps = agent.record([s.observation for s in states], infos,
                         [cands[s.target] for cands, s in zip(candidates, states)])
    for k in range(len(states)):
        agent.reset(PROBE_ENV_INDEX - k)
    sequences = []
    for step, cands, s in zip(steps, candidates, states):
        prompt = list(step.prompt_ids)
        choice = Choice(len(prompt), [agent.encode_action(c) for c in cands], s.target, 0.0,
                        temperature=temperature or 1.0, length_normalize=length_normalize)
        ids = prompt + list(step.gen_ids)
        sequences.append(TrainSequence(ids, [False] * len(prompt) + [True] * len(step.gen_ids), [0.0] * len(ids),
                                       choices=[choice]))
    probability: dict[int, float] = {}
    for batch in micro_batches(sequences, max_tokens):
        logp, _, _, _ = choice_logprobs(agent.model, batch, torch.device(device))
        probability.update(zip(map(id, batch), torch.exp(logp[:, 0]).double().cpu().tolist()))
    return np.array([probability[id(s)] for s in sequences])


def probe_metrics(probabilities: np.ndarray, name: str = "summary") -> dict[str, float | None]:
    """``probe_<name>`` (the mean probability), ``probe_<name>_ge_0.9`` (the share of states at 0.9 or more) and
    ``probe_<name>_states``.

    >>> probe_metrics(np.array([0.5, 0.95]))
    {'probe_summary': 0.725, 'probe_summary_ge_0.9': 0.5, 'probe_summary_states': 2}
    """
    if len(probabilities) == 0:
        return {f"probe_{name}": None, f"probe_{name}_ge_0.9": None, f"probe_{name}_states": 0}
    return {f"probe_{name}": round(float(np.mean(probabilities)), 6),
            f"probe_{name}_ge_0.9": float(np.mean(probabilities >= 0.9)),
            f"probe_{name}_states": int(len(probabilities))}
