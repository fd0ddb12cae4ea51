"""Mosaic's session-level term: each session's estimated marginal contribution D (docs/algorithms.md, eqs. 5-8).

Sessions form chains: a root or fork session, then the compaction sessions that continue it. A chain starts
from a value and ends at a value; each compaction boundary inside it has a value too; a session's D is the
value at its end minus the value at its start (:func:`algos.advantages.compaction_chain_contributions`).

- root chain: starts at the group's mean reward, ends at the trajectory's reward R_i;
- fork chain: starts at V(parent just before the fork), ends at V(parent just after the result), or at R_i
  when the child never returned.

Two critic-free estimators of V:

- ``"rollout"``: the mean reward of M continuations of the current policy from an env snapshot;
- ``"likelihood"``: the policy's log-probability of the gold ``answer(...)`` action given the context
  (IGPO-style; no extra rollouts). Here the chain's ends are contexts too (the session's first prompt,
  the next session's first prompt or, for the last, its final context; the parent's prompts around a fork).

A session that begins on the episode's last step never acts: V at its start is the final reward (rollout),
and the session before it is scored at its own final context (likelihood), so the credit stays with the
session that did the work.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from agents.records import TrainSequence
from envs.actions import ActionError, format_action, parse_action

from . import advantages as adv
from .pg import sequence_logprobs
from .rollout import Collector, Request, Trajectory


def chains(trajectory: Trajectory) -> list[list[int]]:
    """The session chains of a trajectory: each a root or fork session and the compactions continuing it."""
    sessions = trajectory.tree["sessions"]
    next_of = {s["parent"]: s["id"] for s in sessions if s["kind"] == "compact"}
    out = []
    for s in sessions:
        if s["kind"] in ("root", "fork"):
            chain = [s["id"]]
            while chain[-1] in next_of:
                chain.append(next_of[chain[-1]])
            out.append(chain)
    return out


def rollout_contributions(group: Sequence[Trajectory], collector: Collector, agent: Any, continuations: int,
                          seed: int) -> list[np.ndarray]:
    """D per session (in tree order) of every trajectory of a group, from M continuations per boundary.

    Trajectories must have been collected with ``record_snapshots=True``.
    """
    if not all(t.snapshots.get("session_start") for t in group):
        raise ValueError("rollout contributions branch from env snapshots: collect the group with "
                         "Collector.run(..., record_snapshots=True)")
    mean_reward = float(np.mean([t.reward for t in group]))
    wanted: list[tuple[int, str, int]] = []
    for i, t in enumerate(group):
        for chain in chains(t):
            wanted += [(i, "session_start", sid) for sid in chain[1:]]
            if t.session(chain[0])["kind"] == "fork":
                wanted.append((i, "fork_before", chain[0]))
                if chain[0] in t.snapshots["fork_after"]:
                    wanted.append((i, "fork_after", chain[0]))
    wanted = [w for w in wanted if w[2] in group[w[0]].snapshots[w[1]]]
    requests = [Request(seed=seed + 7919 * n + m, options={"snapshot": group[i].snapshots[kind][sid]})
                for n, (i, kind, sid) in enumerate(wanted) for m in range(continuations)]
    runs = collector.run(agent, requests, progress=None) if requests else []
    values = {w: float(np.mean([r.reward for r in runs[n * continuations:(n + 1) * continuations]]))
              for n, w in enumerate(wanted)}
    return [_chain_contributions(t, lambda kind, sid, i=i: values.get((i, kind, sid)), mean_reward)
            for i, t in enumerate(group)]


def likelihood_contributions(group: Sequence[Trajectory], model: torch.nn.Module,
                             encode: Callable[[str], list[int]], gold_answer: str, device: str = "cpu"
                             ) -> list[np.ndarray]:
    """D per session (in tree order): log p(gold answer action | context after) - log p(... | before)."""
    answer_ids = encode(format_action("answer", gold_answer))

    def logp(context: list[int] | None) -> float | None:
        if not context:
            return None
        seq = TrainSequence(context + answer_ids, [False] * len(context) + [True] * len(answer_ids),
                            [0.0] * (len(context) + len(answer_ids)))
        with torch.no_grad():
            lp, mask = sequence_logprobs(model, [seq], torch.device(device))
        return float((lp * mask).sum())

    out = []
    for t in group:
        d = np.zeros(t.num_sessions)
        for chain in chains(t):
            contexts = [_first_prompt(t, sid) for sid in chain] + [_final_context(t, chain[-1])]
            if t.session(chain[0])["kind"] == "fork":
                contexts[0], contexts[-1] = _around_fork(t, chain[0])
            scores = [logp(c) for c in contexts]
            for k, sid in enumerate(chain):
                after = scores[k + 1]
                if after is None:  # what follows never acted (a handoff on the last step): this session's end
                    after = logp(_final_context(t, sid))
                if scores[k] is not None and after is not None:
                    d[sid] = after - scores[k]
        out.append(d)
    return out


def _chain_contributions(t: Trajectory, value: Callable[[str, int], float | None], mean_reward: float
                         ) -> np.ndarray:
    d = np.zeros(t.num_sessions)
    for chain in chains(t):
        head = chain[0]
        if t.session(head)["kind"] == "fork":
            start = value("fork_before", head)
            end = value("fork_after", head) if head in t.snapshots["fork_after"] else t.reward
            start = mean_reward if start is None else start
            end = t.reward if end is None else end
        else:
            start, end = mean_reward, t.reward
        # No snapshot at a session's start: the episode ended as it began (a handoff on the last step), so V
        # there is the final reward, and the session that never acted gets no credit.
        inner = [value("session_start", sid) for sid in chain[1:]]
        inner = [t.reward if v is None else v for v in inner]
        contrib = adv.compaction_chain_contributions(inner, group_mean=start, reward=end)
        d[chain] = contrib
    return d


def _first_prompt(t: Trajectory, sid: int) -> list[int] | None:
    steps = t.steps.get(sid)
    return list(steps[0].prompt_ids) if steps else None


def _final_context(t: Trajectory, sid: int) -> list[int] | None:
    steps = t.steps.get(sid)
    return list(steps[-1].prompt_ids) + list(steps[-1].gen_ids) if steps else None


def _around_fork(t: Trajectory, child: int) -> tuple[list[int] | None, list[int] | None]:
    """The parent's prompt at its fork step, and at its next step (after the result arrived)."""
    parent = t.session(child)["parent"]
    steps = t.steps.get(parent, [])
    task = t.session(child)["task"]
    for k, step in enumerate(steps):
        try:
            action = parse_action(step.text)
        except ActionError:
            continue
        if action.name == "fork" and (task is None or action.arg == task):
            after = list(steps[k + 1].prompt_ids) if k + 1 < len(steps) else None
            return list(step.prompt_ids), after
    return None, None
