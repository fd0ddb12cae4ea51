"""Mosaic's session-level term: each session's estimated marginal contribution D (docs/algorithms.md, eqs. 5-8).

Sessions form chains: a root or fork session, then the compaction sessions that continue it. A chain starts
from a value and ends at a value; each compaction boundary inside it has a value too; a session's D is the
value at its end minus the value at its start (:func:`algos.credit.advantages.compaction_chain_contributions`).

- root chain: starts at V(reset state) (rollout: M continuations from the trajectory's own reset snapshot,
  like every other boundary; likelihood: the root's first prompt), ends at the trajectory's reward R_i;
- fork chain: starts at V(parent just before the fork), ends at V(parent just after the result), or at R_i
  when the child never returned. A fork made on the episode's last step never acts: its chain gets D = 0.

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
from numpy.typing import ArrayLike

from agents.records import TrainSequence
from envs.actions import ActionError, format_action, parse_action

from algos.credit import advantages as adv
from algos.logprobs import SharedPrefix, micro_batches, sequence_logprobs
from algos.rollout import Collector, Request, Trajectory


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


ROOT_STARTS = ("rollout", "group_rollout", "group_mean")
"""Where a root chain's value starts (:func:`rollout_contributions`' ``root_start``)."""


def rollout_contributions(group: Sequence[Trajectory], collector: Collector, agent: Any, continuations: int,
                          seed: int, root_start: str = "rollout") -> list[np.ndarray]:
    """D per session (in tree order) of every trajectory of a group, from M continuations per boundary.

    ``root_start`` is the value the root chain starts from:

    - ``"rollout"``: V(reset state) from M continuations of the trajectory's own reset snapshot, the same
      estimator as every other boundary;
    - ``"group_rollout"``: one V(reset state) for the whole group, from M continuations of its first
      trajectory's reset snapshot. A group is one task at one budget, so every trajectory starts from the same
      state: the same value, estimated once, at 1/G of the root's continuations (full episodes, most of the
      estimator's cost), and no noise of its own between the group's first sessions;
    - ``"group_mean"``: the group's mean reward. Conditioned on the group's own outcomes, it biases the first
      session against the rest: in an all-success group it is 1, so a first session can only lose.

    Trajectories must have been collected with ``record_snapshots=True``. The root-start continuations are
    requested after all the others, so the inner boundaries get the same seeds whatever ``root_start`` is.
    """
    if root_start not in ROOT_STARTS:
        raise ValueError(f"root_start={root_start!r}: use one of {', '.join(ROOT_STARTS)}")
    if not isinstance(continuations, (int, np.integer)) or continuations < 1:
        raise ValueError(f"continuations={continuations!r}: the rollout estimator needs at least 1 continuation "
                         "per boundary (M >= 1)")
    if not all(t.snapshots.get("session_start") for t in group):
        raise ValueError("rollout contributions branch from env snapshots: collect the group with "
                         "Collector.run(..., record_snapshots=True)")
    if root_start == "group_rollout" and len({(t.task_id, t.budget) for t in group}) > 1:
        raise ValueError("root_start='group_rollout' shares one V(reset) across the group: its trajectories "
                         f"need one task and budget, got {sorted({(t.task_id, t.budget) for t in group})}")
    mean_reward = float(np.mean([t.reward for t in group]))
    wanted: list[tuple[int, str, int]] = []
    for i, t in enumerate(group):
        for chain in chains(t):
            wanted += [(i, "session_start", sid) for sid in chain[1:]]
            if t.session(chain[0])["kind"] == "fork":
                wanted.append((i, "fork_before", chain[0]))
                if chain[0] in t.snapshots["fork_after"]:
                    wanted.append((i, "fork_after", chain[0]))
    roots: list[tuple[int, str, int]] = []  # each trajectory's root start (none: the group mean)
    if root_start == "rollout":
        roots = [(i, "session_start", chains(t)[0][0]) for i, t in enumerate(group)]
    elif root_start == "group_rollout" and group:
        roots = [(0, "session_start", chains(group[0])[0][0])] * len(group)  # the group's first, shared
    wanted += list(dict.fromkeys(roots))
    wanted = [w for w in wanted if w[2] in group[w[0]].snapshots[w[1]]]
    requests = [Request(seed=seed + 7919 * n + m, options={"snapshot": group[i].snapshots[kind][sid]})
                for n, (i, kind, sid) in enumerate(wanted) for m in range(continuations)]
    runs = collector.run(agent, requests, progress=None) if requests else []
    values = {w: float(np.mean([r.reward for r in runs[n * continuations:(n + 1) * continuations]]))
              for n, w in enumerate(wanted)}
    starts = [values[key] for key in roots] if roots else [mean_reward] * len(group)

    def value_of(i: int) -> Callable[[str, int], float | None]:  # (trajectory i's boundary values)
        return lambda kind, sid: values.get((i, kind, sid))

    return [_chain_contributions(t, value_of(i), starts[i], mean_reward) for i, t in enumerate(group)]


def likelihood_contributions(group: Sequence[Trajectory], model: torch.nn.Module,
                             encode: Callable[[str], list[int]], gold_answer: str, device: str = "cpu",
                             max_tokens: int = 8192,
                             score_after: Callable[[list[list[int]], list[int]], list[float]] | None = None
                             ) -> list[np.ndarray]:
    """D per session (in tree order): log p(gold answer action | context after) - log p(... | before).

    Every context of the group is scored in one batched pass per ``max_tokens`` padded tokens (the shortest
    first, so rows of a batch are of a length), after the tokens they all open with (the system message), which
    run once (:class:`algos.logprobs.SharedPrefix`): the same log-probs as one pass per context, to float rounding.
    With ``score_after`` (the acting agent's :meth:`agents.llm.LLMAgent.score_after`: the gold answer's summed
    log-prob after each context), the contexts are scored there instead: the rollouts' agent already holds most
    of their keys (its context store), so only what it lacks is run, the same log-probs to float rounding.
    """
    answer_ids = encode(format_action("answer", gold_answer))
    wanted: dict[tuple[int, ...], float] = {}

    def ask(context: list[int] | None) -> float | None:  # (records the contexts; their values come later)
        if not context:
            return None
        wanted[tuple(context)] = 0.0
        return 0.0

    _likelihood_deltas(group, ask)
    contexts = sorted(wanted, key=len)
    if score_after is not None:
        wanted.update(zip(contexts, score_after([list(c) for c in contexts], answer_ids)))
        return _likelihood_deltas(group, lambda context: wanted[tuple(context)] if context else None)
    sequences = [TrainSequence([*c, *answer_ids], [False] * len(c) + [True] * len(answer_ids),
                               [0.0] * (len(c) + len(answer_ids))) for c in contexts]
    dev = torch.device(device)
    scores = []
    with torch.no_grad():
        prefix = SharedPrefix.of(model, sequences, dev)
        for batch in micro_batches(sequences, max_tokens):
            lp, mask = sequence_logprobs(model, batch, dev, prefix)
            scores += (lp * mask).sum(1).tolist()
    wanted.update(zip(contexts, scores))
    return _likelihood_deltas(group, lambda context: wanted[tuple(context)] if context else None)


def _likelihood_deltas(group: Sequence[Trajectory], logp: Callable[[list[int] | None], float | None]
                       ) -> list[np.ndarray]:
    """D per session of each trajectory, ``logp(context)`` the gold answer's log-prob after a context (None for
    a session that never acted)."""
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
                before = scores[k]
                if before is not None and after is not None:
                    d[sid] = after - before
        out.append(d)
    return out


def _chain_contributions(t: Trajectory, value: Callable[[str, int], float | None], root_start: float,
                         mean_reward: float) -> np.ndarray:
    d = np.zeros(t.num_sessions)
    for chain in chains(t):
        head = chain[0]
        if t.session(head)["kind"] == "fork" and value("fork_before", head) is None:
            # No snapshot before the fork: the step that forked ended the episode, so the child and its
            # compactions never acted. Their value neither rose nor fell (D = 0); the parent keeps the credit.
            d[chain] = 0.0
            continue
        if t.session(head)["kind"] == "fork":
            start = value("fork_before", head)
            assert start is not None  # (a fork without a value before it got D = 0 above)
            end = value("fork_after", head) if head in t.snapshots["fork_after"] else t.reward
            end = t.reward if end is None else end
        else:
            start, end = root_start, t.reward
        # No snapshot at a session's start: the episode ended as it began (a handoff on the last step), so V
        # there is the final reward, and the session that never acted gets no credit.
        found = [value("session_start", sid) for sid in chain[1:]]
        inner = [t.reward if v is None else v for v in found]
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
    """The parent's prompt at the step that forked ``child``, and at its next step (after the result arrived).

    The n-th fork child of a task is the n-th step at which the parent emitted ``fork(task)``: a well-formed
    fork either creates its child or ends the episode (``max_fork_depth``, ``max_sessions``), so the two
    orders agree. (Matching the first such step would score two forks of one task at the same contexts.)
    """
    parent = t.session(child)["parent"]
    steps = t.steps.get(parent, [])
    task = t.session(child)["task"]
    twins = [s["id"] for s in t.tree["sessions"]
             if s["kind"] == "fork" and s["parent"] == parent and s["task"] == task]
    wanted = twins.index(child)
    for k, step in enumerate(steps):
        try:
            action = parse_action(step.text)
        except ActionError:
            continue
        if action.name == "fork" and (task is None or action.arg == task):
            if wanted == 0:
                after = list(steps[k + 1].prompt_ids) if k + 1 < len(steps) else None
                return list(step.prompt_ids), after
            wanted -= 1
    return None, None


# ---------------------------------------------------------------------------------------------------------
# The credit switch: one object per credit assignment, chosen once from the run's settings
# ---------------------------------------------------------------------------------------------------------
class Credit:
    """How a group's sessions get their advantages: an estimator of each session's contribution D (or none) and
    the formula that turns rewards (and D) into one advantage per session.

    :func:`credit_for` builds one from a run's settings, once; the training loop asks it, never the setting's name,
    which credit to compute. ``name`` is one of :data:`algos.credit.advantages.ALGORITHMS`.

    Example:
        >>> from algos.learn.config import TrainConfig
        >>> credit = credit_for(TrainConfig(algo="broadcast"))
        >>> credit.name, credit.phase, credit.needs_snapshots
        ('broadcast', None, False)
        >>> credit.advantages([1.0, 0.0], [0, 0, 1]).round(3).tolist()
        [1.0, 1.0, -1.0]
    """

    name = "broadcast"
    phase: str | None = None  # the iteration phase its estimator's time is reported under (None: no estimator)
    needs_snapshots = False  # whether its estimator continues from env snapshots taken during the rollouts

    def __init__(self, pg: Any):
        self.pg = pg  # algos.learn.config.PGConfig: the formula's settings (normalisation, Mosaic's weights)

    def contributions(self, group: Sequence[Trajectory], collector: Collector, agent: Any, answer: str,
                      rng: np.random.Generator, device: str) -> list[np.ndarray] | None:
        """Each session's D, per trajectory in tree order (None: this credit estimates none). An estimator that
        samples draws its seed from ``rng``; one that does not draws nothing."""
        return None

    def advantages(self, rewards: ArrayLike, session_traj: ArrayLike, contributions: ArrayLike | None = None,
                   name: str | None = None) -> np.ndarray:
        """One group's advantage per session row under this credit's formula (or, with ``name``, the other's with
        the same settings: a log shows both)."""
        pg = self.pg
        return adv.by_name(name or self.name, rewards, session_traj, contributions, normalize_std=pg.normalize_std,
                           lambda_use=pg.lambda_use, beta=pg.beta, clip=pg.adv_clip)

    def session_advantages(self, group: Sequence[Trajectory], contributions: Sequence[np.ndarray] | None = None,
                           name: str | None = None) -> dict[tuple[int, int], float]:
        """One group's advantages keyed by session: ``(i, sid)`` is session ``sid`` of trajectory ``group[i]``
        (``contributions[i][sid]`` its D), so a learner attaches an advantage to a session by its id; ``name`` as
        in :meth:`advantages`."""
        keys = [(i, sid) for i, t in enumerate(group) for sid in t.session_ids]
        d = None if contributions is None else np.array([contributions[i][sid] for i, sid in keys])
        values = self.advantages([t.reward for t in group], np.array([i for i, _ in keys]), d, name=name)
        return dict(zip(keys, values.tolist()))

    def columns(self, group: Sequence[Trajectory], contributions: Sequence[np.ndarray] | None
                ) -> dict[str, list[float]]:
        """Every credit's advantage per session of the group in tree order, side by side (what a trajectory log
        records): Mosaic's with this run's D (a broadcast run has none: its trajectory-level term alone)."""
        return {name: list(self.session_advantages(group, contributions if name == "mosaic" else None,
                                                   name).values()) for name in adv.ALGORITHMS}

    def compare(self, records: Any) -> dict[str, Any] | None:
        """Where this run's credit departed from broadcast's on its logged groups (None for broadcast itself)."""
        return None


class MosaicCredit(Credit):
    """Mosaic: session usage and each session's estimated contribution D, by the ``"rollout"`` estimator
    (``continuations`` per boundary, ``root_start``) or the ``"likelihood"`` one (the policy ``model``'s
    log-probability of the gold answer around each session)."""

    name = "mosaic"

    def __init__(self, pg: Any, estimator: str, continuations: int, root_start: str):
        super().__init__(pg)
        self.estimator = estimator
        self.continuations = continuations
        self.root_start = root_start
        self.phase = "continuations" if estimator == "rollout" else "scoring"
        self.needs_snapshots = estimator == "rollout"

    def contributions(self, group: Sequence[Trajectory], collector: Collector, agent: Any, answer: str,
                      rng: np.random.Generator, device: str) -> list[np.ndarray]:
        if self.estimator == "rollout":
            return rollout_contributions(group, collector, agent, self.continuations, seed=int(rng.integers(2**31)),
                                         root_start=self.root_start)
        return likelihood_contributions(group, agent.model, agent.encode_action, answer, device=device,
                                        score_after=getattr(agent, "score_after", None))

    def compare(self, records: Any) -> dict[str, Any] | None:
        from algos.credit.compare import compare_credit

        return compare_credit(records)


def credit_for(config: Any) -> Credit:
    """The credit of a run's settings (:class:`algos.learn.config.TrainConfig`): chosen here, once."""
    if config.algo == "mosaic":
        return MosaicCredit(config.pg, config.estimator, config.continuations, config.root_start)
    return Credit(config.pg)
