"""The advantage estimators of ``algos.credit.advantages`` on small groups computed by hand (docs/algorithms.md, eqs. 1-8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algos.credit.advantages import (
    broadcast,
    compaction_chain_contributions,
    likelihood_contributions,
    mosaic,
    rollout_contributions,
    session_usage,
)

APPROX = dict(abs=1e-5)


# Broadcast -------------------------------------------------------------------------------------------------


def test_broadcast_gives_every_session_its_trajectorys_z_score():
    # Rewards [1, 0, 0, 0]: mean 1/4, population std sqrt(3)/4, so z = [sqrt(3), -1/sqrt(3) x 3].
    advantages = broadcast([1.0, 0.0, 0.0, 0.0], [0, 0, 1, 2, 3, 3, 3])
    success, failure = math.sqrt(3), -1 / math.sqrt(3)
    assert advantages == pytest.approx([success, success, failure, failure, failure, failure, failure], **APPROX)


def test_broadcast_dr_grpo_variant_only_centres():
    advantages = broadcast([1.0, 0.0, 0.0, 0.0], [0, 1, 2, 3, 3], normalize_std=False)
    assert advantages == pytest.approx([0.75, -0.25, -0.25, -0.25, -0.25])


@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_uniform_groups_get_zero_advantage(reward):
    rewards = [reward] * 4
    rows = [0, 1, 1, 2, 3, 3, 3]
    assert broadcast(rewards, rows) == pytest.approx(np.zeros(7))
    assert broadcast(rewards, rows, normalize_std=False) == pytest.approx(np.zeros(7))
    # All-fail: no successes, so no usage term either.
    assert mosaic([0.0] * 4, rows) == pytest.approx(np.zeros(7))


def test_all_success_group_is_zero_without_usage_term_and_only_ranks_session_counts_with_it():
    rows = [0, 1, 1, 2, 2, 2]
    assert mosaic([1.0, 1.0, 1.0], rows, lambda_use=0.0) == pytest.approx(np.zeros(6))
    assert mosaic([1.0, 1.0, 1.0], [0, 1, 2]) == pytest.approx(np.zeros(3))
    # K = [1, 2, 3]: mean 2, std sqrt(2/3), so U = [sqrt(3/2), 0, -sqrt(3/2)], times lambda_use = 0.5.
    u = math.sqrt(1.5)
    assert mosaic([1.0, 1.0, 1.0], rows) == pytest.approx([0.5 * u, 0, 0, -0.5 * u, -0.5 * u, -0.5 * u], **APPROX)


def test_group_statistics_are_per_trajectory_not_per_session_row():
    # Trajectory 0 with 2x (or 4x) the sessions gets the same per-session A_i, and so do the others.
    rewards = [1.0, 0.0, 0.0]
    few = broadcast(rewards, [0, 1, 2])
    many = broadcast(rewards, [0, 0, 0, 0, 1, 2])
    assert many[:4] == pytest.approx([few[0]] * 4)
    assert many[4:] == pytest.approx(few[1:])
    # The same holds for Mosaic's trajectory term when usage cannot differ (a single success).
    assert mosaic(rewards, [0, 0, 1, 2]) == pytest.approx(broadcast(rewards, [0, 0, 1, 2]))


@settings(max_examples=40, deadline=None)
@given(
    rewards=st.lists(st.sampled_from([0.0, 1.0]) | st.floats(0, 1), min_size=1, max_size=8),
    normalize_std=st.booleans(),
    data=st.data(),
)
def test_single_session_groups_reduce_mosaic_to_broadcast(rewards, normalize_std, data):
    rows = np.arange(len(rewards))
    contributions = data.draw(st.lists(st.floats(-1, 1), min_size=len(rewards), max_size=len(rewards)))
    expected = broadcast(rewards, rows, normalize_std=normalize_std)
    got = mosaic(rewards, rows, contributions, lambda_use=0.0, beta=0.0, normalize_std=normalize_std)
    assert got == pytest.approx(expected, **APPROX)
    # One session each: equal K, so the usage term is zero whatever its weight.
    assert mosaic(rewards, rows, normalize_std=normalize_std) == pytest.approx(expected, **APPROX)


# Session usage -----------------------------------------------------------------------------------------------


def test_session_usage_rewards_fewer_sessions_among_successes_only():
    # Successes K = [1, 2, 3]: U = [sqrt(3/2), 0, -sqrt(3/2)]; failures 0 whatever their K.
    usage = session_usage([1.0, 1.0, 1.0, 0.0, 0.0], [1, 2, 3, 1, 3])
    u = math.sqrt(1.5)
    assert usage == pytest.approx([u, 0.0, -u, 0.0, 0.0], **APPROX)


def test_session_usage_is_zero_with_fewer_than_two_successes():
    assert session_usage([1.0, 0.0, 0.0], [1, 4, 2]) == pytest.approx(np.zeros(3))
    assert session_usage([0.0, 0.0], [1, 4]) == pytest.approx(np.zeros(2))


def test_success_threshold_decides_who_counts_as_a_success():
    rewards, counts = [0.9, 0.6, 0.2], [1, 3, 1]
    assert session_usage(rewards, counts, success_threshold=0.5) == pytest.approx([1.0, -1.0, 0.0], **APPROX)
    assert session_usage(rewards, counts, success_threshold=0.7) == pytest.approx(np.zeros(3))


def test_mosaic_gives_fewer_sessions_more_credit_among_successes_and_failures_no_gain():
    # Trajectories: success in 1 session, success in 3, failure in 1, failure in 3.
    rows = [0, 1, 1, 1, 2, 3, 3, 3]
    advantages = mosaic([1.0, 1.0, 0.0, 0.0], rows)
    # z(R) = [1, 1, -1, -1]; successes K = [1, 3] so U = [1, -1]: A = [1.5, 0.5, -1, -1].
    assert advantages == pytest.approx([1.5, 0.5, 0.5, 0.5, -1.0, -1.0, -1.0, -1.0], **APPROX)
    assert advantages[0] > advantages[1]
    assert advantages[4] == pytest.approx(advantages[5])


# Session-level term ----------------------------------------------------------------------------------------------


def test_useless_session_gets_less_credit_than_useful_one():
    # Trajectory 0 succeeds over a compaction chain whose first session did all the work:
    # V goes 0.5 (group mean) -> 1.0 at the compaction -> 1.0 (= R_0); trajectory 1 fails in one session.
    rewards = [1.0, 0.0]
    d_success = compaction_chain_contributions([1.0], group_mean=0.5, reward=1.0)
    d_failure = compaction_chain_contributions([], group_mean=0.5, reward=0.0)
    contributions = np.concatenate([d_success, d_failure])
    assert contributions == pytest.approx([0.5, 0.0, -0.5])
    advantages = mosaic(rewards, [0, 0, 1], contributions)
    # z(D) = [sqrt(3/2), 0, -sqrt(3/2)]; A_i = [1, -1] (a single success, so no usage term).
    z = math.sqrt(1.5)
    assert advantages == pytest.approx([1 + 0.5 * z, 1.0, -1 - 0.5 * z], **APPROX)
    assert advantages[0] > advantages[1]


def test_fork_tree_credits_the_child_whose_result_raised_the_value():
    # Trajectory 0: a root session and two forked children. Child a's result lifts V(parent) from 0.4 to
    # 0.9; child b's leaves it at 0.9. Trajectory 1 fails with its root only. Group mean 0.5.
    starts = [0.5, 0.4, 0.9, 0.5]  # root_0 (group mean), child a, child b, root_1
    ends = [1.0, 0.9, 0.9, 0.0]  # R_0, after a's result, after b's result, R_1
    contributions = rollout_contributions(starts, ends)
    assert contributions == pytest.approx([0.5, 0.5, 0.0, -0.5])
    advantages = mosaic([1.0, 0.0], [0, 0, 0, 1], contributions)
    # D mean 1/8, deviations [3/8, 3/8, -1/8, -5/8], variance 11/64.
    std = math.sqrt(11 / 64)
    z = np.array([3 / 8, 3 / 8, -1 / 8, -5 / 8]) / std
    assert advantages == pytest.approx(np.array([1, 1, 1, -1]) + 0.5 * z, **APPROX)
    assert advantages[1] > advantages[2]


def test_equal_contributions_add_nothing():
    rewards, rows = [1.0, 0.0, 1.0], [0, 1, 1, 2, 2, 2]
    assert mosaic(rewards, rows, [0.3] * 6) == pytest.approx(mosaic(rewards, rows))


def test_beta_scales_the_session_term():
    rewards, rows, contributions = [1.0, 0.0], [0, 0, 1], [0.5, 0.0, -0.5]
    base = mosaic(rewards, rows, lambda_use=0.0, beta=0.0)
    half = mosaic(rewards, rows, contributions, beta=0.5) - base
    full = mosaic(rewards, rows, contributions, beta=1.0) - base
    assert full == pytest.approx(2 * half)


def test_a_floor_under_the_contribution_spread_keeps_a_rare_failed_continuation_small():
    # Issue 16: an all-success group of 8 two-session trajectories in which one continuation failed (D = -.5
    # and +.5 for the last trajectory's sessions, 0 elsewhere). z(D) makes that unit size: beta * .5 / std(D),
    # std(D) = sqrt(2 * .25 / 16). With a floor of 0.5 above that std, the term is beta * .5 / .5.
    rows = np.repeat(np.arange(8), 2)
    d = [0.0] * 14 + [-0.5, 0.5]
    std = math.sqrt(2 * 0.25 / 16)
    assert mosaic([1.0] * 8, rows, d)[-2:] == pytest.approx([-0.25 / std, 0.25 / std], rel=1e-4)
    assert mosaic([1.0] * 8, rows, d, min_contribution_std=0.5)[-2:] == pytest.approx([-0.5, 0.5], rel=1e-4)
    # Below the spread, the floor changes nothing.
    assert mosaic([1.0] * 8, rows, d, min_contribution_std=0.1) == pytest.approx(mosaic([1.0] * 8, rows, d))


def test_clip_bounds_the_final_advantage():
    # One success among 30: z = sqrt(29) > 5.
    rewards = [1.0] + [0.0] * 29
    rows = list(range(30))
    assert broadcast(rewards, rows)[0] == pytest.approx(math.sqrt(29), rel=1e-4)
    assert mosaic(rewards, rows)[0] == pytest.approx(5.0)
    assert mosaic(rewards, rows, clip=2.0).max() == pytest.approx(2.0)
    assert mosaic(rewards, rows, clip=None)[0] == pytest.approx(math.sqrt(29), rel=1e-4)


def test_mosaic_dr_grpo_variant_centres_the_reward_term_only():
    rows = [0, 1, 1, 2]
    advantages = mosaic([1.0, 1.0, 0.0], rows, normalize_std=False)
    # R - mean = [1/3, 1/3, -2/3]; successes K = [1, 2] so U = [1, -1] (standardised whatever normalize_std).
    assert advantages == pytest.approx([1 / 3 + 0.5, 1 / 3 - 0.5, 1 / 3 - 0.5, -2 / 3], **APPROX)


# Contribution helpers ----------------------------------------------------------------------------------------


def test_compaction_chain_contributions_telescope_to_reward_minus_mean():
    contributions = compaction_chain_contributions([0.25, 0.75, 0.5], group_mean=0.4, reward=1.0)
    assert contributions == pytest.approx([-0.15, 0.5, -0.25, 0.5])
    assert contributions.sum() == pytest.approx(1.0 - 0.4)


def test_likelihood_contributions_are_after_minus_before():
    assert likelihood_contributions([-5.0, -1.0], [-2.0, -1.5]) == pytest.approx([3.0, -0.5])


def test_estimators_do_not_modify_their_inputs():
    rewards, rows, contributions = np.array([1.0, 0.0]), np.array([0, 0, 1]), np.array([0.2, 0.1, 0.0])
    copies = rewards.copy(), rows.copy(), contributions.copy()
    mosaic(rewards, rows, contributions)
    broadcast(rewards, rows)
    for original, copy in zip((rewards, rows, contributions), copies):
        assert np.array_equal(original, copy)


# Validation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: broadcast([[1.0, 0.0]], [0, 1]), "rewards"),
        (lambda: broadcast([], []), "rewards"),
        (lambda: broadcast([1.0, float("nan")], [0, 1]), "rewards"),
        (lambda: broadcast([1.0, 0.0], [0, 2]), "session_traj"),
        (lambda: broadcast([1.0, 0.0], [0, 0]), "session_traj"),
        (lambda: broadcast([1.0, 0.0], [0.0, 1.0]), "session_traj"),
        (lambda: mosaic([1.0, 0.0], [0, 1], [0.1, 0.2, 0.3]), "contributions"),
        (lambda: mosaic([1.0, 0.0], [0, 1], clip=0.0), "clip"),
        (lambda: mosaic([1.0, 0.0], [0, 1], min_contribution_std=-1.0), "min_contribution_std"),
        (lambda: session_usage([1.0, 0.0], [1]), "num_sessions"),
        (lambda: session_usage([1.0, 0.0], [1, 0]), "num_sessions"),
        (lambda: rollout_contributions([0.1, 0.2], [0.3]), "values_end"),
        (lambda: likelihood_contributions([0.1], [-float("inf")]), "logp_after"),
        (lambda: compaction_chain_contributions([0.5], group_mean=float("nan"), reward=1.0), "group_mean"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_argument(call, named):
    with pytest.raises(ValueError, match=named):
        call()
