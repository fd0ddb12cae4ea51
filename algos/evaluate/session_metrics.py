"""How trajectories use their sessions, and how they err and recover: the study's metrics (docs/algorithms.md,
section 7, defines each one).

Everything here reads what the env reports when an episode ends (``info["trajectory"]``: the session tree and its
one record per step, :meth:`envs.webqa.WebQAEnv.trajectory`) through :class:`algos.rollout.Trajectory`;
nothing needs a model. A step record says which session acted, with which tool, whether the action was an
error, whether it reached the gold path for the first time (``gold``) and whether it left it (``off_path``).

Example:
    >>> from algos.rollout import Trajectory
    >>> def traj(reward, steps, sessions):
    ...     tree = {"step_log": steps, "steps_used": len(steps),
    ...             "sessions": [{"id": i, "kind": k, "context_tokens": 100} for i, k in enumerate(sessions)]}
    ...     return Trajectory(group=0, task_id="t", budget=8, reward=reward, tree=tree)
    >>> step = lambda session, tool, gold, off_path: {"session": session, "tool": tool, "error": False,
    ...                                                "gold": gold, "off_path": off_path, "call": True}
    >>> ok = traj(1.0, [step(0, "search", True, False), step(0, "compact", False, False), step(1, "answer", True, False)],
    ...           ["root", "compact"])
    >>> bad = traj(0.0, [step(0, "open", False, True)], ["root"])
    >>> m = session_metrics([ok, bad])
    >>> m["success"], m["sessions_success"], m["sessions_failure"], m["utility"], m["recovery"]
    (0.5, 2.0, 1.0, 0.6666666666666666, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from algos.rollout import Trajectory

__all__ = ["group_diversity", "is_error", "session_metrics"]


def is_error(step: dict[str, Any]) -> bool:
    """An error step: an action the env rejected, or one that left the gold path (a search or page off it, a
    wrong answer or sub-answer)."""
    return bool(step["error"] or step["off_path"])


def _mean(values: Sequence[float]) -> float:
    """The mean, NaN for none (a metric of an empty set is undefined, not 0)."""
    return float(np.mean(values)) if len(values) else float("nan")


def session_metrics(trajectories: Sequence[Trajectory], success_threshold: float = 0.5) -> dict[str, Any]:
    """The study's metrics over ``trajectories`` (any mix of tasks and groups).

    Returns a dict of:

    - ``success``; ``sessions``, ``sessions_success``, ``sessions_failure`` (mean sessions per trajectory, all,
      successes, failures); ``context_tokens`` (and ``_success``, ``_failure``: mean context tokens a trajectory's
      windows held at their end, summed over its sessions);
    - ``utility``: the share of sessions that acted and made gold progress (reached a gold page first, or gave
      the right answer or sub-answer);
    - ``wasted_sessions``: sessions per trajectory that acted and made no gold progress;
    - ``forks``: forks per trajectory; ``unused_forks``: the share of forks that did not return their
      sub-question's right answer (NaN without forks);
    - ``parse_rate``: the share of steps whose action held a readable tool call (``call`` in the step log);
      ``valid_steps``: the share of steps the env accepted; ``step_quality``: the share of steps that were valid
      and made gold progress; ``error_steps``: the share of error steps (:func:`is_error`);
    - ``erred``: the share of trajectories with an error; ``recovery``: the success rate of those
      (NaN when none erred); ``success_clean``: the success rate of the others;
    - ``success_by_length``: ``{steps used: [trajectories, success rate]}``.
    """
    if not trajectories:
        raise ValueError("session metrics need at least one trajectory")
    won = [t.reward >= success_threshold for t in trajectories]
    sessions = [t.num_sessions for t in trajectories]
    tokens = [sum(s["context_tokens"] for s in t.tree["sessions"]) for t in trajectories]
    useful = acted = wasted_total = forks = unused = steps_n = calls = valid = quality = errors = 0
    erred_success: list[float] = []
    clean_success: list[float] = []
    by_length: dict[int, list[float]] = {}
    for t, ok in zip(trajectories, won):
        steps = t.tree["step_log"]
        progress = {s["session"] for s in steps if s["gold"]}
        acting = {s["session"] for s in steps}
        useful += len(progress & acting)
        acted += len(acting)
        wasted_total += len(acting - progress)
        for s in t.tree["sessions"]:
            if s["kind"] == "fork":
                forks += 1
                unused += not any(r["session"] == s["id"] and r["tool"] == "finish" and r["gold"] for r in steps)
        steps_n += len(steps)
        calls += sum(s["call"] for s in steps)
        valid += sum(not s["error"] for s in steps)
        quality += sum(not s["error"] and s["gold"] for s in steps)
        n_errors = sum(is_error(s) for s in steps)
        errors += n_errors
        (erred_success if n_errors else clean_success).append(float(ok))
        by_length.setdefault(int(t.tree["steps_used"]), []).append(float(ok))
    n = len(trajectories)
    pick = lambda values, flag: [v for v, w in zip(values, won) if w == flag]  # noqa: E731
    return {
        "success": _mean([t.reward for t in trajectories]),
        "sessions": _mean(sessions), "sessions_success": _mean(pick(sessions, True)),
        "sessions_failure": _mean(pick(sessions, False)),
        "context_tokens": _mean(tokens), "context_tokens_success": _mean(pick(tokens, True)),
        "context_tokens_failure": _mean(pick(tokens, False)),
        "utility": useful / acted if acted else float("nan"),
        "wasted_sessions": wasted_total / n,
        "forks": forks / n, "unused_forks": unused / forks if forks else float("nan"),
        "parse_rate": calls / steps_n if steps_n else float("nan"),
        "valid_steps": valid / steps_n if steps_n else float("nan"),
        "step_quality": quality / steps_n if steps_n else float("nan"),
        "error_steps": errors / steps_n if steps_n else float("nan"),
        "erred": len(erred_success) / n, "recovery": _mean(erred_success), "success_clean": _mean(clean_success),
        # str keys: what JSON (a summary, a checkpoint's state) keeps of them
        "success_by_length": {str(k): [len(v), float(np.mean(v))] for k, v in sorted(by_length.items())},
    }


def group_diversity(groups: Sequence[Sequence[Trajectory]], success_threshold: float = 0.5) -> dict[str, float]:
    """How much a policy's groups differ inside: what Mosaic's session terms need to act on.

    - ``k_varies``: the share of groups whose trajectories did not all use the same number of sessions;
    - ``k_varies_success``: the share whose successes (two or more) used different numbers of sessions, where
      the session-usage term is non-zero (eq. 3);
    - ``k_std``: the mean over groups of the standard deviation of the number of sessions;
    - ``reward_varies``: the share of groups whose rewards are not all equal (where broadcast has a signal).

    Example:
        >>> from algos.rollout import Trajectory
        >>> t = lambda r, k: Trajectory(0, "t", 8, r, {"sessions": [{}] * k})
        >>> group_diversity([[t(1, 1), t(1, 2)], [t(0, 2), t(0, 2)]])
        {'k_varies': 0.5, 'k_varies_success': 0.5, 'k_std': 0.25, 'reward_varies': 0.0}
    """
    if not groups:
        raise ValueError("group diversity needs at least one group")
    varies, varies_success, stds, reward_varies = [], [], [], []
    for group in groups:
        ks = np.array([t.num_sessions for t in group])
        wins = ks[np.array([t.reward >= success_threshold for t in group])]
        varies.append(len(set(ks)) > 1)
        varies_success.append(len(wins) >= 2 and len(set(wins)) > 1)
        stds.append(float(ks.std()))
        reward_varies.append(len({t.reward for t in group}) > 1)
    return {"k_varies": float(np.mean(varies)), "k_varies_success": float(np.mean(varies_success)),
            "k_std": float(np.mean(stds)), "reward_varies": float(np.mean(reward_varies))}
