"""The verl 'mosaic' advantage estimator equals algos.credit.advantages.mosaic on the same groups, rows in any order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from algos.credit import advantages as adv

from verl import DataProto  # (the verl extra: scripts/setup.sh installs it)
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from algos.bridges.verl import compute_mosaic_advantage, mosaic_advantage

LENGTH = 6  # response tokens per row


@st.composite
def batches(draw):
    """Groups of trajectories of several sessions, a reward on each trajectory's last row, rows shuffled."""
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        trajectories = []
        for _ in range(draw(st.integers(1, 4))):
            sessions = draw(st.integers(1, 4))
            trajectories.append({
                "reward": draw(st.sampled_from([0.0, 1.0, 0.5])),
                "d": draw(st.lists(st.floats(-2, 2), min_size=sessions, max_size=sessions)),
                "rows_per_session": draw(st.lists(st.integers(1, 2), min_size=sessions, max_size=sessions)),
            })
        groups.append(trajectories)
    order_seed = draw(st.integers(0, 2**16))
    return groups, order_seed, draw(st.booleans())


def rows_of(groups, order_seed):
    """One row per (sequence of a) session, in a shuffled order: what a verl batch of agent-loop outputs holds."""
    rows = []
    for g, trajectories in enumerate(groups):
        for i, t in enumerate(trajectories):
            last = sum(t["rows_per_session"]) - 1
            n = 0
            for sid, (d, count) in enumerate(zip(t["d"], t["rows_per_session"])):
                for _ in range(count):
                    rows.append({"uid": f"prompt-{g}", "traj_id": f"prompt-{g}-run-{i}", "session_id": sid,
                                 "d": d, "reward": t["reward"] if n == last else 0.0, "key": (g, i, sid)})
                    n += 1
    order = np.random.default_rng(order_seed).permutation(len(rows))
    return [rows[k] for k in order]


def expected(groups, normalize_std):
    """Each (group, trajectory, session)'s advantage from algos.credit.advantages.mosaic, per group."""
    out = {}
    for g, trajectories in enumerate(groups):
        keys = [(g, i, sid) for i, t in enumerate(trajectories) for sid in range(len(t["d"]))]
        values = adv.mosaic([t["reward"] for t in trajectories], [i for _, i, _ in keys],
                            [d for t in trajectories for d in t["d"]], normalize_std=normalize_std)
        out.update(zip(keys, values))
    return out


def as_data(rows, with_contribution=True):
    rewards = torch.zeros(len(rows), LENGTH)
    rewards[:, -1] = torch.tensor([r["reward"] for r in rows])
    mask = torch.ones(len(rows), LENGTH)
    mask[::2, -2:] = 0  # rows of different response lengths
    non_tensor = {"uid": np.array([r["uid"] for r in rows], dtype=object),
                  "traj_id": np.array([r["traj_id"] for r in rows], dtype=object),
                  "session_id": np.array([r["session_id"] for r in rows], dtype=object)}
    if with_contribution:
        non_tensor["session_contribution"] = np.array([r["d"] for r in rows], dtype=object)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors=non_tensor)


class Config:
    """The one field of verl's AlgoConfig the estimator reads."""

    def __init__(self, norm_adv_by_std_in_grpo: bool):
        self.norm_adv_by_std_in_grpo = norm_adv_by_std_in_grpo


@settings(max_examples=60, deadline=None)
@given(batches())
def test_the_estimator_equals_algos_mosaic_on_the_same_groups(batch):
    groups, order_seed, normalize_std = batch
    rows = rows_of(groups, order_seed)
    data = mosaic_advantage(as_data(rows), config=Config(normalize_std))
    want = expected(groups, normalize_std)
    mask = data.batch["response_mask"]
    for r, row in enumerate(rows):
        got = data.batch["advantages"][r]
        np.testing.assert_allclose(got[mask[r] > 0].numpy(), want[row["key"]], rtol=1e-5, atol=1e-5)
        assert torch.all(got[mask[r] == 0] == 0)  # nothing outside the response
    assert torch.equal(data.batch["returns"], data.batch["advantages"])


def test_it_is_registered_under_mosaic_and_reads_the_non_tensor_data():
    assert get_adv_estimator_fn("mosaic") is compute_mosaic_advantage
    groups = [[{"reward": 1.0, "d": [0.3, -0.1], "rows_per_session": [1, 1]},
               {"reward": 0.0, "d": [0.2], "rows_per_session": [1]}]]
    rows = rows_of(groups, 0)
    data = as_data(rows, with_contribution=False)
    got = compute_mosaic_advantage(data.batch["token_level_rewards"], data.batch["response_mask"],
                                   data.non_tensor_batch["uid"], non_tensor_batch=data.non_tensor_batch)[0]
    # Without contributions: the trajectory-level term alone (reward and session usage), as algos computes it.
    want = adv.mosaic([1.0, 0.0], [0, 0, 1])
    keys = [(0, 0, 0), (0, 0, 1), (0, 1, 0)]
    for r, row in enumerate(rows):
        assert float(got[r, 0]) == pytest.approx(want[keys.index(row["key"])], abs=1e-6)


@pytest.mark.parametrize("missing", ["traj_id", "session_id"])
def test_a_batch_without_trajectory_or_session_ids_gets_one_clear_error(missing):
    rows = rows_of([[{"reward": 1.0, "d": [0.0], "rows_per_session": [1]}]], 0)
    data = as_data(rows)
    data.non_tensor_batch.pop(missing)
    with pytest.raises(ValueError, match="traj_id, session_id"):
        mosaic_advantage(data)
    with pytest.raises(ValueError, match="non-tensor data"):  # what verl's compute_advantage passes (no such data)
        compute_mosaic_advantage(data.batch["token_level_rewards"], data.batch["response_mask"],
                                 data.non_tensor_batch["uid"])
