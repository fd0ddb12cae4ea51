"""Rollouts for learning: groups of trajectories from a pool of envs, every session kept as its own sequence.

A :class:`Trajectory` keeps, for every session, the agent's steps (prompt token ids, generated ids, their
log-probs), tagged by session id, kind and parent, plus the env's session tree, the reward, and (when asked)
env snapshots at session boundaries, so Mosaic can branch continuations from them.

The collector steps many envs at once and asks the agent for all their actions in one call: a
:class:`agents.base.RecordingAgent` (an ``LLMAgent``, teacher forcing) is asked with ``act_batch_recorded``
and hands back its step records with the actions; any other agent is asked with ``act_batch`` and leaves none.
Each env's info carries ``env_index`` (its slot in the pool), so an agent that keeps per-env state (an
``LLMAgent``'s KV caches) can tell envs apart while finished envs drop out of the batch, and
``episode_seed`` (the request's reset seed), so an agent can draw an episode's randomness from it and repeat
the episode exactly whatever else shares the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym

from agents.base import RecordingAgent
from agents.records import AgentStep, Choice, TrainSequence, pack_session
from envs.pool import EnvPool, LocalPool, StepResult, is_fork
from envs.web.progress import progress_bar

from algos.logs import step_record

# Choice and TrainSequence are agents.records' own, named here too: the learners' one sequence type.
__all__ = ["Choice", "Collector", "Request", "TrainSequence", "Trajectory", "session_sequences"]


@dataclass
class Request:
    """One episode to run: a reset seed and options (``task_id``, ``max_steps`` or ``snapshot``)."""

    seed: int
    options: dict[str, Any]
    group: int = 0
    transcript: bool = False  # keep each step's action and tool result (Trajectory.transcript), for a log


@dataclass
class Trajectory:
    """One episode as the learners need it."""

    group: int
    task_id: str
    budget: int
    reward: float
    tree: dict[str, Any]
    steps: dict[int, list[AgentStep]] = field(default_factory=dict)  # session id -> the agent's steps in it
    snapshots: dict[str, dict[int, Any]] = field(default_factory=dict)
    # info["num_sessions"] after each step: how many sessions the run had used by any step T.
    sessions_by_step: list[int] = field(default_factory=list)
    # With Request.transcript: one algos.logs.step_record per step (action, error, tool result), else None.
    transcript: list[dict[str, Any]] | None = None

    @property
    def session_ids(self) -> list[int]:
        return [s["id"] for s in self.tree["sessions"]]

    @property
    def num_sessions(self) -> int:
        return len(self.tree["sessions"])

    def session(self, sid: int) -> dict[str, Any]:
        return self.tree["sessions"][sid]


def session_sequences(trajectory: Trajectory) -> dict[int, list[TrainSequence]]:
    """Each session of a trajectory (by id, in order) as training sequences, generated tokens masked in.

    :func:`agents.records.pack_session` of the session's steps: within a session each prompt extends the
    previous prompt and its output, so a session is usually one sequence. Sessions in which the agent took no
    step have none.
    """
    return {sid: pack_session(steps) for sid, steps in sorted(trajectory.steps.items())}


class Collector:
    """A pool of envs that runs :class:`Request` s with one agent, batching the agent's calls.

    The envs live in an :class:`envs.pool.EnvPool`: by default a :class:`envs.pool.LocalPool` of ``num_envs``
    envs made by ``make_env`` in this process; a :class:`envs.pool.RayPool` puts them on Ray workers, with the
    same results. The agent stays here, and is asked for every active env's action in one call.

    Args:
        make_env: builds one env (called ``num_envs`` times, lazily); unused when ``pool`` is given.
        num_envs: how many episodes run side by side (a given pool's ``num_envs``).
        pool: where the envs live (default: a local pool).
    """

    def __init__(self, make_env: Callable[[], gym.Env] | None, num_envs: int, pool: EnvPool | None = None):
        if pool is None:
            if make_env is None:
                raise ValueError("Collector needs make_env or a pool")
            pool = LocalPool(make_env, num_envs)
        self.pool = pool
        self.num_envs = self.pool.num_envs

    @property
    def envs(self) -> list[gym.Env]:
        """The envs held in this process (none when the pool's envs are remote)."""
        return self.pool.envs

    def run(self, agent: Any, requests: Sequence[Request], record_snapshots: bool = False,
            progress: str | None = None, on_done: Callable[[int, Trajectory], None] | None = None
            ) -> list[Trajectory]:
        """Run every request (``num_envs`` at a time); trajectories come back in request order.

        ``on_done(r, trajectory)`` is called as the trajectory of ``requests[r]`` ends (a log writes it then,
        instead of holding every transcript until all have run).
        """
        results: list[Trajectory | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        # ``disable`` passed only to silence it: passed as False it would override TQDM_DISABLE (--no-progress)
        bar = progress_bar(total=len(requests), desc=progress, leave=False,
                           **({"disable": True} if progress is None else {}))
        slots: dict[int, dict[str, Any]] = {}
        while pending or slots:
            free = [slot for slot in range(self.num_envs) if slot not in slots][: len(pending)]
            if free:
                started = [pending.pop(0) for _ in free]
                resets = self.pool.reset(free, [requests[r].seed for r in started],
                                         [requests[r].options for r in started], snapshots=record_snapshots)
                for slot, r, result in zip(free, started, resets):
                    slots[slot] = self._start(slot, r, requests[r], agent, result)
            active = sorted(slots)
            actions, agent_steps = _act(agent, [slots[s]["obs"] for s in active], [slots[s]["info"] for s in active])
            outcomes = self.pool.step(active, actions, [record_snapshots and is_fork(a) for a in actions],
                                      snapshots=record_snapshots)
            for slot, action, agent_step, outcome in zip(active, actions, agent_steps, outcomes):
                run = slots[slot]
                if self._step(slot, run, action, agent_step, outcome):
                    results[run["request"]] = run["trajectory"]
                    if on_done is not None:
                        on_done(run["request"], run["trajectory"])
                    del slots[slot]
                    bar.update(1)
        bar.close()
        return [t for t in results if t is not None]

    def _start(self, slot: int, r: int, request: Request, agent: Any, reset: StepResult) -> dict[str, Any]:
        if hasattr(agent, "reset"):
            agent.reset(slot)
        info = {**reset.info, "env_index": slot, "episode_seed": request.seed}
        traj = Trajectory(group=request.group, task_id=info["task_id"], budget=info["max_steps"], reward=0.0,
                          tree={}, snapshots={"session_start": {}, "fork_before": {}, "fork_after": {}},
                          transcript=[] if request.transcript else None)
        if reset.snapshot_after is not None:
            traj.snapshots["session_start"][info["session_id"]] = reset.snapshot_after
        # Each session's kind and parent, as the infos told them: how a compaction chain is walked back.
        sessions = {info["session_id"]: (info["session_kind"], info["parent_id"])}
        return {"obs": reset.observation, "info": info, "request": r, "trajectory": traj, "sessions": sessions}

    def _step(self, slot: int, run: dict[str, Any], action: str, agent_step: AgentStep | None,
              outcome: StepResult) -> bool:
        traj: Trajectory = run["trajectory"]
        acting = run["info"]["session_id"]
        if agent_step is not None:
            traj.steps.setdefault(acting, []).append(agent_step)
        info = {**outcome.info, "env_index": slot, "episode_seed": run["info"]["episode_seed"]}
        traj.sessions_by_step.append(info["num_sessions"])
        if traj.transcript is not None:
            traj.transcript.append(step_record(action, info))
        now = info["session_id"]
        run["sessions"].setdefault(now, (info["session_kind"], info["parent_id"]))
        if outcome.snapshot_after is not None:  # a session boundary, the episode going on
            before = outcome.snapshot_before
            if info["session_kind"] == "fork" and info["parent_id"] == acting and before is not None:
                traj.snapshots["fork_before"][now] = before
            if now not in traj.snapshots["session_start"]:
                traj.snapshots["session_start"][now] = outcome.snapshot_after
            if info["depth"] < run["info"]["depth"]:
                # a child finished and its parent resumed with the result
                traj.snapshots["fork_after"][_chain_head(run["sessions"], acting)] = outcome.snapshot_after
        run["obs"], run["info"] = outcome.observation, info
        if outcome.terminated or outcome.truncated:
            traj.reward = outcome.reward
            traj.tree = info["trajectory"]
            return True
        return False


def _act(agent: Any, observations: list[str], infos: list[dict[str, Any]]
         ) -> tuple[list[str], list[AgentStep | None]]:
    """The agent's actions and, from a :class:`agents.base.RecordingAgent`, its step records (else None each)."""
    if isinstance(agent, RecordingAgent):
        actions, recorded = agent.act_batch_recorded(observations, infos)
        steps: list[AgentStep | None] = list(recorded)
        return actions, steps
    return agent.act_batch(observations, infos), [None] * len(observations)


def _chain_head(sessions: dict[int, tuple[str, int]], sid: int) -> int:
    """The fork session a compaction chain began with (a finishing child may have compacted on the way)."""
    while sessions[sid][0] == "compact":
        sid = sessions[sid][1]
    return sid
