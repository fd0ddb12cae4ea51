"""Where Mosaic's credit differs from broadcast's: the comparison's invariants over classes of groups."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from algos.credit.compare import compare_credit, credit_groups


def _records(groups, mosaic):
    """Training records of groups of trajectories, ``groups[g][t] = (reward, n_sessions)``; broadcast's advantage
    is z(R) over the group and Mosaic's is ``mosaic(broadcast, g, t, s)``."""
    out = []
    for g, trajs in enumerate(groups):
        rewards = np.array([r for r, _ in trajs], float)
        z = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for t, (reward, n) in enumerate(trajs):
            out.append({"source": "train", "iteration": 0, "group": g, "reward": reward, "success": reward >= 0.5,
                        "sessions": [{"kind": "root" if s == 0 else "compact", "credit_broadcast": float(z[t]),
                                      "credit_mosaic": float(mosaic(float(z[t]), g, t, s)),
                                      "credit_contribution": 0.0} for s in range(n)]})
    return out


groups_st = st.lists(st.lists(st.tuples(st.sampled_from([0.0, 1.0]), st.integers(1, 3)), min_size=2, max_size=6),
                     min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(groups_st)
def test_identical_columns_differ_nowhere(groups):
    c = compare_credit(_records(groups, lambda b, g, t, s: b))
    assert c["pairs"]["reversed"] in (0.0, None) and c["pairs"]["split"] in (0.0, None)
    assert all(v["differ"] in (0.0, None) for k, v in c["groups"].items() if k != "n")
    assert all(s["new_credit"] == 0.0 and s["flipped"] == 0.0 for s in c["sessions"].values())
    assert c["failures_credited"] in (0.0, None) and c["successes_blamed"] in (0.0, None)
    assert c["correlation"] in (None, 1.0)


@settings(max_examples=60, deadline=None)
@given(groups_st, st.floats(0.1, 5.0))
def test_an_increasing_rescaling_reorders_nothing(groups, scale):
    c = compare_credit(_records(groups, lambda b, g, t, s: scale * b))
    assert c["pairs"]["reversed"] in (0.0, None) and c["pairs"]["split"] in (0.0, None)


@settings(max_examples=60, deadline=None)
@given(groups_st)
def test_a_negated_column_reverses_every_pair_broadcast_orders(groups):
    records = _records(groups, lambda b, g, t, s: -b)
    ordered = total = 0
    for group in credit_groups(records):
        b = [s[2] for s in group["sessions"]]
        for i in range(len(b)):
            for j in range(i + 1, len(b)):
                total += 1
                ordered += abs(b[i] - b[j]) > 1e-6
    c = compare_credit(records)
    assert c["groups"]["n"] == len(groups)
    assert c["pairs"]["reversed"] == round(ordered / total, 3)
    assert c["pairs"]["split"] == 0.0


def test_session_credit_inside_one_trajectory_splits_what_broadcast_ties():
    """Two trajectories of one all-failure group: broadcast gives all four sessions 0; Mosaic tells the first
    session of each apart from its successor."""
    records = _records([[(0.0, 2), (0.0, 2)]], lambda b, g, t, s: 0.5 if s == 0 else -0.5)
    c = compare_credit(records)
    assert c["groups"]["all_failure"] == {"share": 1.0, "differ": 1.0, "reversed": 0.0, "split": round(4 / 6, 3)}
    assert c["sessions"]["failure/root"]["new_credit"] == 1.0 and c["failures_credited"] == 0.5


def test_records_without_mosaic_credit_are_skipped():
    records = _records([[(1.0, 1), (0.0, 1)]], lambda b, g, t, s: b)
    for r in records:
        r["sessions"][0]["credit_contribution"] = None  # a broadcast run: no D
    assert compare_credit(records)["groups"]["n"] == 0
    assert compare_credit([{**records[0], "source": "eval"}])["groups"]["n"] == 0


@pytest.mark.parametrize("key, value", [("credit_broadcast", "x"), ("credit_mosaic", float("nan")),
                                        ("credit_mosaic", float("inf")), ("credit_broadcast", None),
                                        ("credit_broadcast", True)])
def test_a_credit_that_is_not_a_finite_number_is_an_error_naming_the_record(key, value):
    records = _records([[(1.0, 1), (0.0, 1)]], lambda b, g, t, s: b)
    records[1]["sessions"][0][key] = value
    with pytest.raises(ValueError, match=rf"iteration 0, group 0: {key} is .*not a finite number"):
        compare_credit(records)
