"""Advantage estimators for multi-session trajectories: pure functions over the arrays of one group.

A *group* is G trajectories of one task under one budget. Trajectory ``i`` has reward ``R_i`` and one or more
sessions (context windows); every session is trained as its own sequence, so the estimators return one
advantage per *session row*. ``session_traj[s]`` names the trajectory that session row ``s`` belongs to.

Group statistics of the rewards are taken once per trajectory, never once per session row: a trajectory that
used more sessions must not pull the baseline towards itself. Equation numbers refer to
``docs/algorithms.md``:

* (1-2) broadcast: ``A_i = (R_i - mean_j R_j) / (std_j R_j + eps)``, every session of ``i`` gets ``A_i``.
* (3-4) session usage: ``U_i = -(K_i - mean_{j in S} K_j) / (std_{j in S} K_j + eps)`` for ``i`` in the
  successful set ``S`` when ``|S| >= 2``, else 0; ``A_i = z(R)_i + lambda_use * U_i``.
* (5)   session level: ``A_{i,k} = clip(A_i + beta * z(D)_{i,k}, -c, c)``, ``z`` over all sessions of the group.
* (6-7) rollout contribution: ``D = V(end of session) - V(start of session)``.
* (8)   likelihood contribution: ``D = log p(gold | context after) - log p(gold | context before)``.

Choices of ours, where the papers give none: ``std`` is the population standard deviation (``ddof=0``);
``normalize_std=False`` (the Dr. GRPO variant) drops the division only in the reward term, because the
usage and contribution terms are counts and value differences whose scale means nothing until
standardised; defaults ``lambda_use=0.5``, ``beta=0.5``, ``clip=5.0`` keep each shaping term at about half
the weight of the outcome term.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

ALGORITHMS = ("broadcast", "mosaic")
"""The credit assignments, listed once: every setting, flag and check that names one reads this."""

__all__ = [
    "ALGORITHMS",
    "by_name",
    "broadcast",
    "compaction_chain_contributions",
    "likelihood_contributions",
    "mosaic",
    "rollout_contributions",
    "session_usage",
]


def _finite_vector(values: ArrayLike, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = np.flatnonzero(~np.isfinite(array))
        raise ValueError(f"{name} must be finite; entries {bad.tolist()} are {array[bad].tolist()}")
    return array


def _change(before: ArrayLike, before_name: str, after: ArrayLike, after_name: str) -> np.ndarray:
    """``after - before`` per session (eqs. 6 and 8), both finite vectors of one shape."""
    start = _finite_vector(before, before_name)
    end = _finite_vector(after, after_name)
    if start.shape != end.shape:
        raise ValueError(f"{after_name} must have the shape of {before_name} {start.shape}, got {end.shape}")
    return end - start


def _rewards(rewards: ArrayLike) -> np.ndarray:
    array = _finite_vector(rewards, "rewards")
    if array.size == 0:
        raise ValueError("rewards must hold at least one trajectory, got an empty array")
    return array


def _session_traj(session_traj: ArrayLike, group_size: int) -> np.ndarray:
    """Checks that every session row names a trajectory of the group and every trajectory has a session."""
    array = np.asarray(session_traj)
    if array.ndim != 1:
        raise ValueError(f"session_traj must be a 1-D array, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"session_traj must hold integer trajectory indices, got dtype {array.dtype}")
    array = array.astype(np.int64)
    outside = (array < 0) | (array >= group_size)
    if np.any(outside):
        raise ValueError(
            f"session_traj entries must index the {group_size} trajectories of rewards, got {array[outside].tolist()}"
        )
    missing = np.setdiff1d(np.arange(group_size), array)
    if missing.size:
        raise ValueError(f"session_traj must give every trajectory at least one session; none for {missing.tolist()}")
    return array


def _standardize(values: np.ndarray, eps: float, normalize_std: bool = True) -> np.ndarray:
    centered = values - values.mean()
    return centered / (values.std() + eps) if normalize_std else centered


def broadcast(
    rewards: ArrayLike,
    session_traj: ArrayLike,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> np.ndarray:
    """Broadcast advantage (eqs. 1-2): every session gets its trajectory's group-normalised reward.

    ``A_i = (R_i - mean_j R_j) / (std_j R_j + eps)``, statistics over the G trajectories; with
    ``normalize_std=False`` it is ``R_i - mean_j R_j`` (Dr. GRPO).

    Args:
        rewards: ``(G,)`` one reward per trajectory of the group.
        session_traj: ``(S,)`` the trajectory index of each session row.
        normalize_std: divide by the group standard deviation; ``False`` gives the Dr. GRPO variant.
        eps: keeps the division finite when all rewards are equal.

    Returns:
        ``(S,)`` one advantage per session row.

    Example:
        >>> broadcast([1.0, 0.0], [0, 0, 1]).round(3).tolist()
        [1.0, 1.0, -1.0]
    """
    reward_array = _rewards(rewards)
    rows = _session_traj(session_traj, reward_array.size)
    return _standardize(reward_array, eps, normalize_std)[rows]


def session_usage(
    rewards: ArrayLike,
    num_sessions: ArrayLike,
    *,
    success_threshold: float = 0.5,
    eps: float = 1e-6,
) -> np.ndarray:
    """Session-usage signal (eq. 3): among successes, fewer sessions than the others is better.

    ``U_i = -(K_i - mean_{j in S} K_j) / (std_{j in S} K_j + eps)`` for ``i`` in ``S = {i : R_i >=
    success_threshold}`` when ``|S| >= 2``; 0 otherwise, so a failure never gains from using few sessions.

    Args:
        rewards: ``(G,)`` one reward per trajectory.
        num_sessions: ``(G,)`` ``K_i``, the number of sessions trajectory ``i`` used (at least 1).
        success_threshold: a trajectory with ``R_i >= success_threshold`` counts as a success.
        eps: keeps the division finite when all successes used as many sessions.

    Returns:
        ``(G,)`` ``U_i``.

    Example:
        >>> session_usage([1.0, 1.0, 0.0], [1, 3, 1]).round(3).tolist()
        [1.0, -1.0, 0.0]
    """
    reward_array = _rewards(rewards)
    counts = _finite_vector(num_sessions, "num_sessions")
    if counts.shape != reward_array.shape:
        raise ValueError(f"num_sessions must have the shape of rewards {reward_array.shape}, got {counts.shape}")
    if np.any(counts < 1):
        raise ValueError(f"num_sessions must be at least 1 per trajectory, got {counts.tolist()}")
    usage = np.zeros_like(reward_array)
    successes = reward_array >= success_threshold
    if successes.sum() >= 2:
        usage[successes] = -_standardize(counts[successes], eps)
    return usage


def mosaic(
    rewards: ArrayLike,
    session_traj: ArrayLike,
    contributions: ArrayLike | None = None,
    *,
    lambda_use: float = 0.5,
    beta: float = 0.5,
    clip: float | None = 5.0,
    normalize_std: bool = True,
    success_threshold: float = 0.5,
    min_contribution_std: float = 0.0,
    eps: float = 1e-6,
) -> np.ndarray:
    """Mosaic advantage (eqs. 3-5): trajectory level with session usage, plus each session's contribution.

    ``A_i = z(R)_i + lambda_use * U_i`` with ``K_i`` the number of rows of trajectory ``i`` in
    ``session_traj``; then ``A_{i,k} = clip(A_i + beta * z(D)_{i,k}, -clip, clip)`` with ``z(D)`` taken over
    all session rows of the group (0 when all ``D`` are equal). ``normalize_std=False`` drops the division
    in ``z(R)`` only (Dr. GRPO); ``U`` and ``z(D)`` stay standardised.

    Args:
        rewards: ``(G,)`` one reward per trajectory of the group.
        session_traj: ``(S,)`` the trajectory index of each session row.
        contributions: ``(S,)`` ``D`` per session row (see :func:`rollout_contributions`,
            :func:`likelihood_contributions`), or ``None`` for no session-level term.
        lambda_use: weight of the session-usage term ``U``; ours, 0.5.
        beta: weight of the session-level term; ours, 0.5.
        clip: bound ``c`` on the final advantage, ``None`` for none; ours, 5.0.
        normalize_std: divide the reward term by the group standard deviation.
        success_threshold: reward at or above which a trajectory counts as a success for ``U``.
        min_contribution_std: a floor under ``std(D)`` in ``z(D)``, so that a tiny spread (one failed
            continuation in a group) is not blown up to unit size; 0 (none) by default: it did not remove the
            first-vs-last-session bias of issue 16 (``python -m mosaic_gym.bench.bench_credit``).
        eps: keeps every division finite.

    Returns:
        ``(S,)`` one advantage per session row.

    Example:
        >>> mosaic([1.0, 1.0, 0.0, 0.0], [0, 1, 1, 2, 3], [0.6, 0.5, 0.1, 0.0, 0.0], clip=None).round(2).tolist()
        [2.2, 1.0, 0.23, -1.47, -1.47]
    """
    reward_array = _rewards(rewards)
    rows = _session_traj(session_traj, reward_array.size)
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be positive or None, got {clip}")
    if not min_contribution_std >= 0:
        raise ValueError(f"min_contribution_std must be >= 0, got {min_contribution_std}")
    num_sessions = np.bincount(rows, minlength=reward_array.size)
    usage = session_usage(reward_array, num_sessions, success_threshold=success_threshold, eps=eps)
    advantages = (_standardize(reward_array, eps, normalize_std) + lambda_use * usage)[rows]
    if contributions is not None:
        contribution_array = _finite_vector(contributions, "contributions")
        if contribution_array.shape != rows.shape:
            raise ValueError(
                f"contributions must have one entry per session row, shape {rows.shape}, got {contribution_array.shape}"
            )
        centered = contribution_array - contribution_array.mean()
        scale = max(float(contribution_array.std()), min_contribution_std) + eps
        advantages = advantages + beta * centered / scale
    return advantages if clip is None else np.clip(advantages, -clip, clip)


def rollout_contributions(values_start: ArrayLike, values_end: ArrayLike) -> np.ndarray:
    """Rollout contribution (eqs. 6-7): ``D = V_end - V_start`` per session, ``V`` a mean reward of continuations.

    What ``V_start`` and ``V_end`` are, per session kind:

    * compaction chain: ``V`` at the session's start and at its end (its compaction), each the mean reward
      of M continuations from an env snapshot there; the first session starts at V of the reset state and
      the last ends at ``R_i`` (:func:`compaction_chain_contributions` applies this for a whole chain);
    * fork child: ``V`` of the parent just before the fork, and just after the child's result arrives.

    Args:
        values_start: ``(S,)`` ``V`` before each session's effect.
        values_end: ``(S,)`` ``V`` after it.

    Returns:
        ``(S,)`` ``D``.

    Example:
        >>> rollout_contributions([0.5, 0.5], [0.9, 0.5]).tolist()
        [0.4, 0.0]
    """
    return _change(values_start, "values_start", values_end, "values_end")


def compaction_chain_contributions(
    boundary_values: ArrayLike,
    *,
    group_mean: float,
    reward: float,
) -> np.ndarray:
    """Rollout contributions (eq. 6) of the K sessions of one compaction chain, in order.

    The chain's K+1 boundaries are ``[group_mean, *boundary_values, reward]``; session ``k`` gets
    ``D_k = V_{k+1} - V_k``. The contributions telescope: they sum to ``reward - group_mean``.

    Args:
        boundary_values: ``(K-1,)`` ``V`` at each compaction, in chain order (empty for one session).
        group_mean: ``V`` at the start of the first session: :mod:`algos.credit` passes V of the reset state
            (or of the parent before a fork); the name is from when the root started at the group's mean reward.
        reward: the trajectory's reward ``R_i``, ``V`` at the end of the last session.

    Returns:
        ``(K,)`` ``D`` per session of the chain.

    Example:
        >>> compaction_chain_contributions([0.75], group_mean=0.5, reward=1.0).tolist()
        [0.25, 0.25]
    """
    interior = _finite_vector(boundary_values, "boundary_values")
    boundaries = np.concatenate([[group_mean], interior, [reward]])
    if not np.all(np.isfinite(boundaries)):
        raise ValueError(f"group_mean and reward must be finite, got {group_mean} and {reward}")
    return np.diff(boundaries)


def likelihood_contributions(logp_before: ArrayLike, logp_after: ArrayLike) -> np.ndarray:
    """Likelihood contribution (eq. 8, IGPO-style): ``D = log p(gold | after) - log p(gold | before)``.

    Both are the current policy's log-probability of the gold ``answer(...)`` action text, summed over its
    tokens. For compaction session ``k``: *before* is the context it started from (task + previous
    summary), *after* the one its summary starts (task + its summary), or its final context for the last
    session. For a fork child: the parent's context just before the fork and just after the result.

    Args:
        logp_before: ``(S,)`` log-probability of the gold answer before each session's handoff.
        logp_after: ``(S,)`` log-probability after it.

    Returns:
        ``(S,)`` ``D``.

    Example:
        >>> likelihood_contributions([-4.0, -2.0], [-1.0, -2.5]).tolist()
        [3.0, -0.5]
    """
    return _change(logp_before, "logp_before", logp_after, "logp_after")


def by_name(
    name: str,
    rewards: ArrayLike,
    session_traj: ArrayLike,
    contributions: ArrayLike | None = None,
    *,
    normalize_std: bool = True,
    lambda_use: float = 0.5,
    beta: float = 0.5,
    clip: float | None = 5.0,
) -> np.ndarray:
    """The advantage formula of credit ``name`` (one of :data:`ALGORITHMS`): :func:`broadcast`, which ignores
    ``contributions`` and the Mosaic weights, or :func:`mosaic`.

    >>> by_name("broadcast", [1.0, 0.0], [0, 1]).round(3).tolist()
    [1.0, -1.0]
    >>> by_name("grpo", [1.0], [0])
    Traceback (most recent call last):
    ...
    ValueError: credit 'grpo' is unknown: use one of ('broadcast', 'mosaic')
    """
    if name == "broadcast":
        return broadcast(rewards, session_traj, normalize_std=normalize_std)
    if name == "mosaic":
        return mosaic(rewards, session_traj, contributions, lambda_use=lambda_use, beta=beta, clip=clip,
                      normalize_std=normalize_std)
    raise ValueError(f"credit {name!r} is unknown: use one of {ALGORITHMS}")
