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
