"""Where Mosaic's credit departs from broadcast's, on the same groups (docs/algorithms.md, section 8).

A Mosaic run's training log (:mod:`algos.logs`) holds, for every session of every logged group, its advantage
under broadcast (eq. 1) and under Mosaic (eq. 5), both computed from the same rewards, and Mosaic's from the
run's own contributions D (:func:`algos.logs.credit_by_session`). :func:`compare_credit` reads those records and
says where the two columns part:

- in which *groups*: all successes, all failures (broadcast gives every session 0 there) or mixed rewards;
- for which *sessions*: the root's first session, a compaction's successor, or a fork; in a success or a failure;
- and *how*: credit where broadcast gives none, a flipped sign, or the same sign rescaled; and, what moves the
  policy differently, pairs of sessions of one group that the two order differently (*reversed*: one ranks a
  above b, the other b above a) or that only Mosaic tells apart (*split*: broadcast ties them, as it ties all
  sessions of one trajectory and all of a group with equal rewards).

Example:
    >>> def record(group, reward, credit):
    ...     kinds = ["root"] + ["fork"] * (len(credit) - 1)
    ...     return {"source": "train", "iteration": 0, "group": group, "reward": reward, "success": reward >= 0.5,
    ...             "sessions": [{"kind": k, "credit_broadcast": b, "credit_mosaic": m, "credit_contribution": d}
    ...                          for k, (b, m, d) in zip(kinds, credit)]}
    >>> records = [record(0, 1.0, [(1.0, 1.3, 0.5), (1.0, 0.9, 0.0)]),  # a success whose fork added nothing
    ...            record(0, 0.0, [(-1.0, -1.2, 0.0), (-1.0, 1.0, 0.5)]),  # a failure whose fork did its part
    ...            record(1, 0.0, [(0.0, 0.0, 0.0)]), record(1, 0.0, [(0.0, 0.0, 0.0)])]  # nothing to tell apart
    >>> c = compare_credit(records)
    >>> c["groups"]["mixed"]
    {'share': 0.5, 'differ': 1.0, 'reversed': 0.167, 'split': 0.333}
    >>> c["groups"]["all_failure"]
    {'share': 0.5, 'differ': 0.0, 'reversed': 0.0, 'split': 0.0}
    >>> c["sessions"]["failure/fork"]["flipped"], c["failures_credited"], c["successes_blamed"]
    (1.0, 0.25, 0.0)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["GROUP_KINDS", "ROLES", "TOL", "compare_credit", "credit_groups"]

TOL = 1e-6
"""Two advantages closer than this are equal; an advantage within it of 0 is none."""

GROUP_KINDS = ("all_success", "mixed", "all_failure")
ROLES = ("root", "compact", "fork")
_OUTCOMES = ("success", "failure")


def _group_kind(rewards: list[float], successes: list[bool]) -> str:
    if max(rewards) - min(rewards) > TOL:
        return "mixed"
    return "all_success" if all(successes) else "all_failure"


def _share(flags: list[bool]) -> float | None:
    return round(float(np.mean(flags)), 3) if flags else None


def _mean(xs: list[float]) -> float | None:
    return round(float(np.mean(xs)), 3) if xs else None


def _pairs(b: list[float], m: list[float]) -> tuple[int, int, int]:
    """Over the pairs of sessions of one group: how many, how many the two columns order oppositely, and how
    many broadcast ties and Mosaic does not."""
    b_, m_ = np.asarray(b), np.asarray(m)
    i, j = np.triu_indices(len(b_), 1)
    db, dm = b_[i] - b_[j], m_[i] - m_[j]
    tie_b, tie_m = np.abs(db) <= TOL, np.abs(dm) <= TOL
    reversed_ = ~tie_b & ~tie_m & (np.sign(db) != np.sign(dm))
    return len(i), int(reversed_.sum()), int((tie_b & ~tie_m).sum())


def credit_groups(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The logged training groups that hold both columns: per group its kind (:data:`GROUP_KINDS`) and one
    ``(outcome, role, broadcast, mosaic)`` per session, in the log's order.

    Records without both columns (eval or rollout records, and broadcast runs, which estimate no D) are skipped.

    Raises:
        ValueError: naming the record, for a reward or an advantage that is not a finite number.
    """
    by_group: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("source") != "train" or not r["sessions"]:
            continue
        if any(s.get("credit_mosaic") is None or s.get("credit_contribution") is None for s in r["sessions"]):
            continue
        by_group[(r.get("iteration"), r.get("group"))].append(r)
    return [{"kind": _group_kind([_finite(t, t, "reward") for t in group], [bool(t["success"]) for t in group]),
             "sessions": [("success" if t["success"] else "failure", s["kind"], _finite(t, s, "credit_broadcast"),
                           _finite(t, s, "credit_mosaic")) for t in group for s in t["sessions"]]}
            for group in by_group.values()]


def _finite(record: dict[str, Any], holder: dict[str, Any], key: str) -> float:
    value = holder.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ValueError(f"training record of iteration {record.get('iteration')!r}, group {record.get('group')!r}: "
                         f"{key} is {value!r}, not a finite number (a damaged or hand-made log)")
    return float(value)


def compare_credit(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Broadcast's and Mosaic's advantages side by side over the training records of a Mosaic run.

    Reads the groups :func:`credit_groups` keeps.

    Returns:
        ``groups``: the number of groups (``n``) and, per kind, its share of the groups and the share of those
        where some session's two advantages differ, and the shares of its pairs of sessions (two sessions of
        one group) that are ``reversed`` and ``split`` (see above). ``sessions``: per ``"<outcome>/<role>"``,
        the number of sessions, the mean of each column, and the shares that differ, get credit where broadcast
        gives none (broadcast 0, Mosaic not), and have their sign flipped. ``failures_credited``: the share of a failed
        trajectory's sessions with a positive Mosaic advantage (broadcast's is never positive there).
        ``successes_blamed``: the share of a success's sessions with a negative Mosaic advantage.
        ``correlation``: Pearson's r of the two columns over the sessions of mixed groups (None below 3).
    """
    kinds: dict[str, list[bool]] = {k: [] for k in GROUP_KINDS}
    pairs = {k: np.zeros(3, int) for k in GROUP_KINDS}  # pairs, reversed, split
    rows: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    failed_credited, success_blamed, mixed_b, mixed_m = [], [], [], []
    for group in credit_groups(records):
        kind, differs = group["kind"], False
        for outcome, role, b, m in group["sessions"]:
            differ = abs(m - b) > TOL
            differs |= differ
            row = rows[f"{outcome}/{role}"]
            row["broadcast"].append(b)
            row["mosaic"].append(m)
            row["differ"].append(differ)
            row["new_credit"].append(abs(b) <= TOL and abs(m) > TOL)
            row["flipped"].append(abs(b) > TOL and m * b < 0 and abs(m) > TOL)
            if outcome == "failure":
                failed_credited.append(m > TOL)
            else:
                success_blamed.append(m < -TOL)
            if kind == "mixed":
                mixed_b.append(b)
                mixed_m.append(m)
        kinds[kind].append(differs)
        pairs[kind] += _pairs([s[2] for s in group["sessions"]], [s[3] for s in group["sessions"]])
    n = sum(len(v) for v in kinds.values())
    correlation = None
    if len(mixed_b) >= 3 and np.std(mixed_b) > TOL and np.std(mixed_m) > TOL:
        correlation = round(float(np.corrcoef(mixed_b, mixed_m)[0, 1]), 3)
    sessions = {}
    for outcome in _OUTCOMES:
        for role in ROLES:
            cell = rows.get(f"{outcome}/{role}")
            if cell:
                sessions[f"{outcome}/{role}"] = {
                    "n": len(cell["broadcast"]), "broadcast": _mean(cell["broadcast"]), "mosaic": _mean(cell["mosaic"]),
                    **{k: _share(cell[k]) for k in ("differ", "new_credit", "flipped")}}
    groups = {k: {"share": round(len(v) / n, 3) if n else None, "differ": _share(v),
                  **{name: round(float(pairs[k][c] / pairs[k][0]), 3) if pairs[k][0] else None
                     for c, name in ((1, "reversed"), (2, "split"))}} for k, v in kinds.items()}
    total = sum(pairs.values(), np.zeros(3, int))
    return {"groups": {"n": n, **groups},
            "pairs": {name: round(float(total[c] / total[0]), 3) if total[0] else None
                      for c, name in ((1, "reversed"), (2, "split"))},
            "sessions": sessions, "failures_credited": _share(failed_credited),
            "successes_blamed": _share(success_blamed), "correlation": correlation}
