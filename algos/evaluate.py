"""Pass@(K,T): sampling breadth K by interaction depth T, with the unbiased estimator of Chen et al. (2021).

The estimator functions come first and depend on nothing but numpy and matplotlib: ``pass_at_k`` for one
task, ``pass_at_kt_table`` over tasks, and the table's CSV, Markdown and heatmap forms.

Example:
    >>> table = pass_at_kt_table([[3, None], [None, None]], ks=[1, 2], ts=[2, 4])
    >>> table.tolist()
    [[0.0, 0.25], [0.0, 0.5]]
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

__all__ = ["pass_at_k", "pass_at_kt_table", "plot_heatmap", "table_markdown", "write_table_csv"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n - c, k) / C(n, k)``.

    Computed as ``1 - prod_{i = n-c+1}^{n} (1 - k / i)`` (Chen et al. 2021), which never forms the large
    binomials; exactly 1 when ``n - c < k`` (every k-subset holds a correct sample).

    Args:
        n: samples drawn for the task.
        c: how many of them are correct.
        k: the sampling breadth, ``1 <= k <= n``.

    Returns:
        The probability that at least one of ``k`` samples drawn without replacement is correct.

    Raises:
        ValueError: if ``k > n`` (draw more samples), ``k < 1`` or ``c`` is outside ``[0, n]``.

    Example:
        >>> pass_at_k(4, 1, 2)
        0.5
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")
    if k > n:
        raise ValueError(f"pass@k needs at least k samples: got k={k} but only n={n}; draw n >= k samples per task")
    if not 0 <= c <= n:
        raise ValueError(f"c must lie in [0, n={n}], got c={c}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def _check_axis(values: Sequence[int], name: str) -> list[int]:
    axis = [int(value) for value in values]
    if not axis:
        raise ValueError(f"{name} must hold at least one value")
    if any(value < 1 for value in axis):
        raise ValueError(f"{name} must be positive integers, got {axis}")
    return axis


def pass_at_kt_table(
    correct_steps: Sequence[Sequence[int | None]],
    ks: Sequence[int],
    ts: Sequence[int],
) -> np.ndarray:
    """Pass@(K,T) averaged over tasks: ``c_T`` counts the samples correct within ``T`` steps.

    This reads every T from the same samples (the *truncate* protocol when they ran at the largest T); for
    the *rerun* protocol call it once per T on the runs capped at that T.

    Args:
        correct_steps: one list per task, one entry per sample: the steps it had used when it answered
            correctly, or ``None`` if it never did.
        ks: sampling breadths K, each at most the number of samples of every task.
        ts: step budgets T.

    Returns:
        ``(len(ks), len(ts))`` array; entry ``[a, b]`` is the mean over tasks of
        ``pass_at_k(n, c_{ts[b]}, ks[a])``.

    Raises:
        ValueError: for no tasks, a task with fewer samples than the largest K, or non-positive K or T.

    Example:
        >>> pass_at_kt_table([[1, 5, None, None]], ks=[1], ts=[1, 5]).tolist()
        [[0.25, 0.5]]
    """
    k_axis = _check_axis(ks, "ks")
    t_axis = _check_axis(ts, "ts")
    if not correct_steps:
        raise ValueError("correct_steps must hold at least one task")
    table = np.zeros((len(k_axis), len(t_axis)))
    for task_index, samples in enumerate(correct_steps):
        if len(samples) < max(k_axis):
            raise ValueError(
                f"task {task_index} has {len(samples)} samples but the largest K is {max(k_axis)}; "
                "draw at least max(ks) samples per task"
            )
        steps = np.array([np.inf if step is None else step for step in samples], dtype=np.float64)
        for b, budget in enumerate(t_axis):
            correct = int(np.sum(steps <= budget))
            for a, k in enumerate(k_axis):
                table[a, b] += pass_at_k(len(samples), correct, k)
    return table / len(correct_steps)


def _check_table(table: np.ndarray, ks: Sequence[int], ts: Sequence[int]) -> np.ndarray:
    array = np.asarray(table, dtype=np.float64)
    if array.shape != (len(ks), len(ts)):
        raise ValueError(f"table must have shape (len(ks), len(ts)) = {(len(ks), len(ts))}, got {array.shape}")
    return array


def write_table_csv(path: str | Path, table: np.ndarray, ks: Sequence[int], ts: Sequence[int]) -> Path:
    """Writes the table as CSV: header ``K\\T,<T1>,<T2>,...``, then one row per K.

    Example:
        >>> import tempfile, os
        >>> out = write_table_csv(os.path.join(tempfile.mkdtemp(), "p.csv"), np.array([[0.5]]), [1], [8])
        >>> out.read_text().splitlines()
        ['K\\\\T,8', '1,0.5']
    """
    array = _check_table(table, ks, ts)
    path = Path(path)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["K\\T", *ts])
        for k, row in zip(ks, array):
            writer.writerow([k, *(repr(float(value)) for value in row)])
    return path


def table_markdown(table: np.ndarray, ks: Sequence[int], ts: Sequence[int], digits: int = 3) -> str:
    """Formats the table as Markdown, one row per K, one column per T.

    Example:
        >>> print(table_markdown(np.array([[0.25, 0.5]]), [1], [4, 8]))
        | K \\ T | 4 | 8 |
        |---|---|---|
        | 1 | 0.250 | 0.500 |
    """
    array = _check_table(table, ks, ts)
    lines = [
        "| K \\ T | " + " | ".join(str(t) for t in ts) + " |",
        "|---|" + "---|" * len(ts),
    ]
    for k, row in zip(ks, array):
        lines.append(f"| {k} | " + " | ".join(f"{value:.{digits}f}" for value in row) + " |")
    return "\n".join(lines)


def plot_heatmap(
    path: str | Path,
    table: np.ndarray,
    ks: Sequence[int],
    ts: Sequence[int],
    title: str = "Pass@(K,T)",
    *,
    figsize: tuple[float, float] | None = None,
    dpi: int = 100,
) -> Path:
    """Saves an annotated K x T heatmap as PNG: T across, K down, colour fixed to [0, 1].

    Args:
        path: where to write the PNG.
        table: ``(len(ks), len(ts))`` Pass@(K,T) values.
        ks: the K of each row.
        ts: the T of each column.
        title: the figure title.
        figsize: inches (width, height); by default it grows with the table.
        dpi: pixels per inch, so the image is ``figsize * dpi`` pixels.

    Returns:
        The path written.

    Example:
        >>> import tempfile, os
        >>> plot_heatmap(os.path.join(tempfile.mkdtemp(), "p.png"), np.array([[0.5]]), [1], [8]).suffix
        '.png'
    """
    array = _check_table(table, ks, ts)
    if figsize is None:
        figsize = (2.0 + 0.8 * len(ts), 1.6 + 0.5 * len(ks))
    # A bare Figure, not pyplot: no global backend state, safe beside other plotting code.
    figure = Figure(figsize=figsize, dpi=dpi)
    axes = figure.subplots()
    image = axes.imshow(array, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(len(ts)), [str(t) for t in ts])
    axes.set_yticks(range(len(ks)), [str(k) for k in ks])
    axes.set_xlabel("T (step budget)")
    axes.set_ylabel("K (samples)")
    axes.set_title(title)
    for a in range(len(ks)):
        for b in range(len(ts)):
            # Dark text on the bright end of viridis, light text on the dark end.
            colour = "black" if array[a, b] > 0.6 else "white"
            axes.text(b, a, f"{array[a, b]:.2f}", ha="center", va="center", color=colour, fontsize=8)
    figure.colorbar(image, ax=axes, label="Pass@(K,T)")
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, format="png")
    return path
