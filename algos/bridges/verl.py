"""Mosaic credit as a verl advantage estimator: ``algorithm.adv_estimator=mosaic``.

Importing this module registers :func:`compute_mosaic_advantage` with verl's ``register_adv_est`` under
``"mosaic"``. A verl batch row is one *session* (one output of a multi-turn agent loop: a compaction ends one
output and starts the next); the estimator reads from the batch's non-tensor data, per row:

- ``uid``: the group (verl's prompt id, passed as ``index``; the trajectories of one prompt);
- ``traj_id``: the trajectory (agent-loop run) the row belongs to;
- ``session_id``: the session within that trajectory (rows sharing one are one session);
- ``session_contribution`` (optional): the session's marginal contribution ``D`` (:mod:`algos.credit`, computed
  in the agent loop); without it the advantage has no session-level term.

A trajectory's reward ``R_i`` is the sum of its rows' ``token_level_rewards`` (verl scores the last output of a
run). The advantage of every row is :func:`algos.credit.advantages.mosaic` of its group, statistics once per
trajectory, spread over the row's response tokens. See ``docs/verl.md`` for the agent-loop recipe.

verl 0.9.1's ``compute_advantage`` hands a registered estimator the non-tensor data only for ``"gdpo"``; the
recipe calls :func:`mosaic_advantage` on the ``DataProto`` instead (one line in the trainer), which passes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import register_adv_est

from algos.credit import advantages as adv

__all__ = ["NON_TENSOR_KEYS", "compute_mosaic_advantage", "mosaic_advantage"]

NON_TENSOR_KEYS = ("traj_id", "session_id")
"""The non-tensor columns every row must carry (``session_contribution`` is optional)."""


@register_adv_est("mosaic")
def compute_mosaic_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                             config: Any = None, non_tensor_batch: dict[str, np.ndarray] | None = None,
                             lambda_use: float = 0.5, beta: float = 0.5, clip: float | None = 5.0,
                             **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Mosaic advantages (``docs/algorithms.md`` eqs. 3-5) of a verl batch whose rows are sessions.

    Args:
        token_level_rewards: ``(B, L)``; a row's reward is its sum, a trajectory's the sum over its rows.
        response_mask: ``(B, L)`` the response tokens of each row.
        index: ``(B,)`` the group of each row (verl's ``uid``).
        config: verl's ``AlgoConfig``; its ``norm_adv_by_std_in_grpo`` is our ``normalize_std``.
        non_tensor_batch: the batch's non-tensor data, with ``traj_id``, ``session_id`` and optionally
            ``session_contribution`` per row.
        lambda_use, beta, clip: as in :func:`algos.credit.advantages.mosaic`.

    Returns:
        ``(advantages, returns)``, both ``(B, L)``: each row's advantage on its response tokens.
    """
    if non_tensor_batch is None or any(k not in non_tensor_batch for k in NON_TENSOR_KEYS):
        have = sorted(non_tensor_batch) if non_tensor_batch is not None else "no non-tensor data"
        raise ValueError(f"the mosaic estimator reads {', '.join(NON_TENSOR_KEYS)} from the batch's non-tensor data "
                         f"(got {have}): set them in the agent loop's extra_fields and call mosaic_advantage(data) "
                         "(docs/verl.md)")
    normalize_std = True if config is None else bool(config.norm_adv_by_std_in_grpo)
    scores = token_level_rewards.sum(dim=-1).double().cpu().numpy()
    traj_ids = np.asarray(non_tensor_batch["traj_id"])
    session_ids = np.asarray(non_tensor_batch["session_id"])
    contributions = non_tensor_batch.get("session_contribution")
    row_advantage = np.zeros(len(scores))
    groups = np.asarray(index)
    for group in dict.fromkeys(groups.tolist()):
        rows = np.flatnonzero(groups == group)
        trajectories = list(dict.fromkeys(traj_ids[rows].tolist()))
        rewards = [scores[rows[traj_ids[rows] == t]].sum() for t in trajectories]
        sessions = list(dict.fromkeys(zip(traj_ids[rows].tolist(), session_ids[rows].tolist())))
        first_row: dict[tuple[Any, Any], int] = {}  # a session's D is read from its first row
        for r in rows:
            first_row.setdefault((traj_ids[r], session_ids[r]), int(r))
        session_traj = np.array([trajectories.index(t) for t, _ in sessions])
        d = None if contributions is None else np.array([float(contributions[first_row[key]]) for key in sessions])
        values = adv.mosaic(rewards, session_traj, d, lambda_use=lambda_use, beta=beta, clip=clip,
                            normalize_std=normalize_std)
        of_session = dict(zip(sessions, values))
        for r in rows:
            row_advantage[r] = of_session[(traj_ids[r], session_ids[r])]
    advantages = torch.tensor(row_advantage, dtype=torch.float32, device=response_mask.device)[:, None] * response_mask
    return advantages, advantages


def mosaic_advantage(data: DataProto, config: Any = None, **settings: Any) -> DataProto:
    """Set ``data.batch["advantages"]`` and ``["returns"]`` by :func:`compute_mosaic_advantage`, passing it the
    non-tensor data (what verl's own ``compute_advantage`` does for ``"gdpo"`` only); returns ``data``."""
    advantages, returns = compute_mosaic_advantage(
        data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"], config=config,
        non_tensor_batch=data.non_tensor_batch, **settings)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data
