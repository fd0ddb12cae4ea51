"""Training curves a person would rather look at than read: success, sessions, steps, advantages."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

PANELS = (
    ("success", "success rate (train groups)"),
    ("sessions", "sessions per trajectory"),
    ("steps", "steps per trajectory"),
    ("adv_std", "advantage std / |max|"),
)


def plot_training(history: Sequence[dict[str, Any]], path: str | Path, title: str = "training") -> Path:
    """A 2x2 PNG of the per-iteration metrics in ``history`` (dicts as in ``metrics.jsonl``)."""
    path = Path(path)
    fig = Figure(figsize=(10, 7), dpi=100)
    its = [m["iteration"] for m in history]
    for k, (key, label) in enumerate(PANELS):
        ax = fig.add_subplot(2, 2, k + 1)
        ax.plot(its, [m.get(key, float("nan")) for m in history], marker=".", label=key)
        if key == "adv_std":
            ax.plot(its, [m.get("adv_abs_max", float("nan")) for m in history], marker=".", label="|adv| max")
            ax.legend(loc="best", fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    return path


STUDY_PANELS = (("success", "success rate (train groups)"), ("sessions", "sessions per trajectory"),
                ("utility", "session utility (share of sessions with gold progress)"),
                ("groups_k_varies_success", "groups whose successes differ in sessions"))


def _band(runs: Sequence[Sequence[dict[str, Any]]], key: str) -> tuple[list[int], list[float], list[float]]:
    """Per iteration: the mean over runs of ``key`` and its standard error (runs of unequal length are cut)."""
    import numpy as np

    length = min((len(h) for h in runs), default=0)
    its, means, errs = [], [], []
    for i in range(length):
        values = [v for h in runs if (v := h[i].get(key)) is not None]
        if values:
            its.append(runs[0][i]["iteration"])
            means.append(float(np.mean(values)))
            errs.append(float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0)
    return its, means, errs


def _line_with_band(ax: Any, xs: Sequence[float], means: Sequence[float], halves: Sequence[float], label: str) -> None:
    """A curve of ``means`` with a band of ``halves`` around it, in the curve's colour."""
    line, = ax.plot(xs, means, marker=".", label=label)
    ax.fill_between(xs, [m - h for m, h in zip(means, halves)], [m + h for m, h in zip(means, halves)],
                    color=line.get_color(), alpha=0.2)


def plot_study(arms: dict[str, Sequence[Sequence[dict[str, Any]]]], path: str | Path, title: str = "study") -> Path:
    """A 2x2 PNG: each arm's per-iteration success, sessions, session utility and group diversity, the mean
    over seeds with a band of one standard error."""
    path = Path(path)
    fig = Figure(figsize=(11, 7.5), dpi=100)
    for k, (key, label) in enumerate(STUDY_PANELS):
        ax = fig.add_subplot(2, 2, k + 1)
        for name, runs in arms.items():
            its, means, errs = _band(runs, key)
            _line_with_band(ax, its, means, errs, f"{name} ({len(runs)} seeds)")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_pass_at_t(curves: dict[str, dict[str, dict[str, dict[str, Any]]]], path: str | Path,
                   title: str = "Pass@(1,T)") -> Path:
    """Pass@(1,T) against T for each arm, after the warm start (dashed) and after RL (solid), with 95%
    intervals over seeds; ``curves[arm][stage][T] = {"mean", "ci95"}``."""
    path = Path(path)
    fig = Figure(figsize=(6.5, 4.5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for name, stages in curves.items():
        color = None
        for stage, style in (("warm_start", "--"), ("final", "-")):
            if stage not in stages:
                continue
            ts = sorted(stages[stage], key=int)
            means = [stages[stage][t]["mean"] for t in ts]
            errs = [stages[stage][t]["ci95"] or 0.0 for t in ts]
            bar = ax.errorbar([int(t) for t in ts], means, yerr=errs, linestyle=style, marker="o", capsize=3,
                              color=color, label=f"{name} ({'after RL' if stage == 'final' else 'warm start'})")
            color = bar.lines[0].get_color()
    ax.set_xlabel("step budget T")
    ax.set_ylabel("held-out Pass@(1,T)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_credit(groups: Sequence[dict[str, Any]], path: str | Path, title: str = "credit") -> Path:
    """Each session's Mosaic advantage against its broadcast advantage on the same group, one panel per group
    kind, coloured by session kind, filled for a success and hollow for a failure; the diagonal is where the two
    agree. ``groups`` are :func:`algos.credit.compare.credit_groups`' (any number of runs pooled)."""
    from algos.credit.compare import GROUP_KINDS, ROLES

    path = Path(path)
    fig = Figure(figsize=(13, 4.5), dpi=100)
    colors = dict(zip(ROLES, ("tab:blue", "tab:orange", "tab:green")))
    for k, kind in enumerate(GROUP_KINDS):
        ax = fig.add_subplot(1, len(GROUP_KINDS), k + 1)
        sessions = [s for g in groups if g["kind"] == kind for s in g["sessions"]]
        for role in ROLES:
            for outcome in ("success", "failure"):
                xs = [b for o, r, b, _ in sessions if r == role and o == outcome]
                ys = [m for o, r, _, m in sessions if r == role and o == outcome]
                if xs:
                    ax.scatter(xs, ys, s=14, alpha=0.6, label=f"{role}, {outcome}", edgecolors=colors[role],
                               facecolors=colors[role] if outcome == "success" else "none")
        values = [v for s in sessions for v in s[2:]]
        if values:
            lo, hi = min(values) - 0.1, max(values) + 0.1
            ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8, linestyle="--")
            ax.legend(loc="best", fontsize=7)
        n = sum(g["kind"] == kind for g in groups)
        ax.set_title(f"{kind.replace('_', ' ')} ({n} groups)", fontsize=10)
        ax.set_xlabel("broadcast advantage")
        ax.set_ylabel("Mosaic advantage")
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_probe(curves: dict[str, Sequence[dict[str, Any]]], path: str | Path, threshold: float | None = None,
               title: str = "probe") -> Path:
    """Each arm's probe curve (mean and 95% band over seeds, from :func:`algos.study.interval` cells) against the
    updates taken, with the threshold as a line."""
    path = Path(path)
    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for name, curve in curves.items():
        _line_with_band(ax, list(range(len(curve))), [c["mean"] for c in curve], [c["ci95"] or 0.0 for c in curve],
                        f"{name} ({curve[0]['n']} seeds)")
    if threshold is not None:
        ax.axhline(threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {threshold}")
    ax.set_xlabel("updates (0: after the warm start)")
    ax.set_ylabel("P(right decision), mean over probe states")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    return path
