"""Pass@(K,T): sampling breadth K by interaction depth T, with the unbiased estimator of Chen et al. (2021).

The estimator functions come first and depend on nothing but numpy and matplotlib: ``pass_at_k`` for one
task, ``pass_at_kt_table`` over tasks, and the table's CSV, Markdown and heatmap forms. Then
``pass_at_kt`` runs an agent on an env's tasks (``n`` samples each, through the batched
:class:`~algos.rollout.Collector`) and returns a :class:`PassAtKTResult`: the table, the sessions and steps
used per T, every run's raw record, and writers for all of it.

Example:
    >>> table = pass_at_kt_table([[3, None], [None, None]], ks=[1, 2], ts=[2, 4])
    >>> table.tolist()
    [[0.0, 0.25], [0.0, 0.5]]
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from matplotlib.figure import Figure

from envs.pool import EnvPool
from envs import view

from algos import logs
from algos.rollout import Collector, Request, Trajectory

__all__ = [
    "PROTOCOLS",
    "PassAtKTResult",
    "Sample",
    "pass_at_k",
    "pass_at_kt",
    "pass_at_kt_table",
    "plot_heatmap",
    "table_markdown",
    "write_table_csv",
]


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


# ----------------------------------------------------------------------------------------------------
# Running an agent: Pass@(K,T) of an agent on an env's tasks
# ----------------------------------------------------------------------------------------------------

PROTOCOLS = ("truncate", "rerun")


@dataclass(frozen=True)
class Sample:
    """One run of one task, as Pass@(K,T) reads it.

    Attributes:
        task_id: the task.
        index: which of the task's ``n`` samples it is; sample ``index`` of a task has the same reset seed
            (``episode_seed``) under every budget, so the protocols and budgets compare paired runs.
        budget: the ``max_steps`` it ran under.
        success: whether it answered correctly.
        steps_used: the steps it had taken when it ended.
        sessions_by_step: how many sessions existed after each of its steps.

    Example:
        >>> run = Sample("t1", 0, budget=16, success=True, steps_used=6, sessions_by_step=(1, 1, 2, 2, 2, 2))
        >>> run.correct_within(4), run.steps_within(4), run.sessions_within(4), run.correct_within(8)
        (False, 4, 2, True)
    """

    task_id: str
    index: int
    budget: int
    success: bool
    steps_used: int
    sessions_by_step: tuple[int, ...]

    def correct_within(self, t: int) -> bool:
        """Whether it answered correctly within ``t`` steps."""
        return self.success and self.steps_used <= t

    def steps_within(self, t: int) -> int:
        """The steps it would have used under budget ``t``."""
        return min(self.steps_used, t)

    def sessions_within(self, t: int) -> int:
        """The sessions it would have used under budget ``t``."""
        return self.sessions_by_step[self.steps_within(t) - 1]


@dataclass
class PassAtKTResult:
    """Pass@(K,T) of one agent: the table, the sessions and steps used per T, and every run.

    Attributes:
        table: ``(len(ks), len(ts))``; ``table[a, b]`` is Pass@(ks[a], ts[b]) averaged over tasks.
        ks: sampling breadths, ascending.
        ts: step budgets, ascending.
        n: samples per task.
        protocol: ``"truncate"`` or ``"rerun"`` (see :func:`pass_at_kt`).
        task_ids: the tasks, in the order they were given.
        mean_sessions: ``(len(ts),)``: sessions used per run under each T, averaged over every run.
        mean_steps: ``(len(ts),)``: steps used per run under each T, averaged over every run.
        samples: every run: ``n`` per task under ``truncate``, ``n`` per task and T under ``rerun``.

    Example:
        >>> result = PassAtKTResult(np.array([[0.5]]), [1], [8], n=2, protocol="truncate", task_ids=["t1"],
        ...                         mean_sessions=np.array([1.5]), mean_steps=np.array([6.0]), samples=[])
        >>> print(result.usage_markdown())
        | T | mean sessions | mean steps |
        |---|---|---|
        | 8 | 1.50 | 6.00 |
    """

    table: np.ndarray
    ks: list[int]
    ts: list[int]
    n: int
    protocol: str
    task_ids: list[str]
    mean_sessions: np.ndarray
    mean_steps: np.ndarray
    samples: list[Sample]

    @property
    def title(self) -> str:
        """A one-line caption: protocol, samples per task, number of tasks."""
        return f"Pass@(K,T), {self.protocol}, n={self.n}, {len(self.task_ids)} tasks"

    def usage_markdown(self, digits: int = 2) -> str:
        """Mean sessions and steps used under each T, as a Markdown table with one row per T."""
        lines = ["| T | mean sessions | mean steps |", "|---|---|---|"]
        for t, sessions, steps in zip(self.ts, self.mean_sessions, self.mean_steps):
            lines.append(f"| {t} | {sessions:.{digits}f} | {steps:.{digits}f} |")
        return "\n".join(lines)

    def markdown(self, digits: int = 3) -> str:
        """A title line, the K x T table and the usage table, in Markdown."""
        return (f"**{self.title}**\n\n{table_markdown(self.table, self.ks, self.ts, digits)}\n\n"
                f"{self.usage_markdown()}\n")

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-ready values."""
        return {
            "protocol": self.protocol,
            "n": self.n,
            "ks": self.ks,
            "ts": self.ts,
            "task_ids": self.task_ids,
            "table": self.table.tolist(),
            "mean_sessions": self.mean_sessions.tolist(),
            "mean_steps": self.mean_steps.tolist(),
            "samples": [{**asdict(s), "sessions_by_step": list(s.sessions_by_step)} for s in self.samples],
        }

    def save(self, out_dir: str | Path, stem: str = "passkt",
             metadata: dict[str, Any] | None = None) -> dict[str, Path]:
        """Writes ``<stem>.csv`` (the table), ``.md`` (:meth:`markdown`), ``.json`` (:meth:`to_dict` plus
        ``metadata``) and ``.png`` (the heatmap) into ``out_dir``, created if missing.

        Returns:
            The paths written, by kind: ``{"csv": ..., "md": ..., "json": ..., "png": ...}``.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {kind: out / f"{stem}.{kind}" for kind in ("csv", "md", "json", "png")}
        write_table_csv(paths["csv"], self.table, self.ks, self.ts)
        paths["md"].write_text(self.markdown())
        paths["json"].write_text(json.dumps({**self.to_dict(), "metadata": metadata or {}}) + "\n")
        plot_heatmap(paths["png"], self.table, self.ks, self.ts, title=self.title)
        return paths


def pass_at_kt(
    agent: Any,
    env_fn_or_env: Callable[[], gym.Env] | gym.Env,
    ks: Sequence[int],
    ts: Sequence[int],
    n: int,
    tasks: Sequence[str] | None = None,
    protocol: str = "truncate",
    seed: int = 0,
    num_envs: int = 8,
    progress: bool = True,
    log_to: str | Path | None = None,
    pool: EnvPool | None = None,
) -> PassAtKTResult:
    """Runs ``agent`` ``n`` times on each task and measures Pass@(K,T) with the unbiased estimator.

    Two protocols (``docs/algorithms.md``, section 5):

    - ``"truncate"``: one run per (task, sample) under budget ``max(ts)``; a run is correct within T when
      it answered correctly having used at most T steps, and its sessions and steps under T are those it had
      used by step T.
    - ``"rerun"``: a separate run per (task, sample, T) under budget T (an env with ``show_budget`` tells
      the agent so): what a budget-aware agent does with less room.

    For an agent that ignores the budget and draws per episode (the oracle, the random agent: see
    :func:`agents.base.step_rng`) the two agree exactly. Runs are batched over ``num_envs`` envs.

    Args:
        agent: any :class:`agents.Agent`.
        env_fn_or_env: a function that makes an env (called up to ``num_envs`` times), or an env: it is then
            the first of the pool, and the rest are made from its spec (an env without one runs alone).
        ks: sampling breadths K (sorted, duplicates dropped); each at most ``n``.
        ts: step budgets T (sorted, duplicates dropped).
        n: samples per task.
        tasks: task ids; default every task of the env's split and hops (``envs.view(env).tasks``).
        protocol: ``"truncate"`` or ``"rerun"``.
        seed: sample ``j`` of the ``i``-th task resets with seed ``seed + i * n + j``.
        num_envs: how many episodes run side by side.
        progress: show a tqdm bar.
        log_to: write every run to this trajectory log (:mod:`algos.logs`, a ``*.traj.jsonl.gz`` file) as
            it ends: its steps, actions and tool results, task index as ``group``, sample and protocol in
            ``meta``.
        pool: where the runs' envs live (e.g. an :class:`envs.pool.RayPool` of ``num_envs`` envs); default:
            envs made here, the first being ``env_fn_or_env``'s (which always lists the tasks).

    Returns:
        The :class:`PassAtKTResult`.

    Raises:
        ValueError: for a K above ``n``, an unknown protocol, no or repeated tasks, non-positive K, T or n.
        KeyError: for a task id the env's site does not have.

    Example:
        >>> import gymnasium as gym, envs
        >>> from agents import OracleAgent
        >>> env = gym.make("mosaic/WebQA-v0", site_size=120, split="test")
        >>> result = pass_at_kt(OracleAgent(env), env, ks=[1], ts=[1, 64], n=1, progress=False)
        >>> result.table.tolist(), len(result.samples) == len(envs.view(env).tasks)
        ([[0.0, 1.0]], True)
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r} is unknown: use one of {PROTOCOLS}")
    k_axis = sorted(set(_check_axis(ks, "ks")))
    t_axis = sorted(set(_check_axis(ts, "ts")))
    if n < 1:
        raise ValueError(f"n (samples per task) must be at least 1, got {n}")
    if k_axis[-1] > n:
        raise ValueError(f"K={k_axis[-1]} is more than the n={n} samples per task (Pass@K picks K of the n "
                         f"samples): draw n >= {k_axis[-1]}, or drop every K above {n}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1, got {num_envs}")
    more: Callable[[], gym.Env] | None
    if isinstance(env_fn_or_env, gym.Env):
        first = env_fn_or_env
        spec = first.spec
        more = (lambda: gym.make(spec)) if spec is not None else None
    else:
        first = env_fn_or_env()
        more = env_fn_or_env
    task_ids = [t.id for t in view(first).tasks] if tasks is None else [str(t) for t in tasks]
    if not task_ids:
        raise ValueError("tasks is empty: give at least one task id (or None for every task of the env)")
    if len(set(task_ids)) < len(task_ids):
        raise ValueError(f"tasks holds repeated ids: {sorted({t for t in task_ids if task_ids.count(t) > 1})}")
    for task_id in task_ids:
        view(first).task(task_id)  # an unknown id fails here, naming the known ones, not mid-run
    unused = [first]

    def make_env() -> gym.Env:
        if unused:
            return unused.pop()
        if more is None:
            raise RuntimeError("pass_at_kt: an env without a spec runs alone; no second env can be made from it")
        return more()

    collector = Collector(make_env, num_envs if more is not None else 1, pool=pool)

    budgets = [t_axis[-1]] if protocol == "truncate" else t_axis
    keys = [(budget, i, task_id, j) for budget in budgets for i, task_id in enumerate(task_ids) for j in range(n)]
    requests = [Request(seed=seed + i * n + j, options={"task_id": task_id, "max_steps": budget}, group=i,
                        transcript=log_to is not None)
                for budget, i, task_id, j in keys]
    log = logs.TrajectoryLog(log_to) if log_to is not None else None
    on_done: Callable[[int, Trajectory], None] | None = None
    if log is not None:
        def write(r: int, traj: Trajectory) -> None:  # as each run ends; its transcript is not kept after
            budget, i, task_id, j = keys[r]
            log.write(logs.from_trajectory(traj, view(first).task(task_id).question, "eval", group=i,
                                           meta={"sample": j, "seed": requests[r].seed, "protocol": protocol}))
            traj.transcript = None

        on_done = write

    try:
        trajectories = collector.run(agent, requests, progress=f"Pass@(K,T) {protocol}" if progress else None,
                                     on_done=on_done)
    finally:
        if log is not None:
            log.close()
        for env in collector.envs:
            if env is not env_fn_or_env:
                env.close()
    samples = [
        Sample(task_id=task_id, index=j, budget=budget, success=bool(traj.tree["success"]),
               steps_used=int(traj.tree["steps_used"]), sessions_by_step=tuple(traj.sessions_by_step))
        for (budget, _, task_id, j), traj in zip(keys, trajectories)
    ]

    table = np.zeros((len(k_axis), len(t_axis)))
    mean_sessions = np.zeros(len(t_axis))
    mean_steps = np.zeros(len(t_axis))
    for b, t in enumerate(t_axis):
        runs = [s for s in samples if s.budget == (t_axis[-1] if protocol == "truncate" else t)]
        by_task: dict[str, list[int | None]] = {task_id: [] for task_id in task_ids}
        for run in runs:
            by_task[run.task_id].append(run.steps_used if run.correct_within(t) else None)
        table[:, b] = pass_at_kt_table(list(by_task.values()), k_axis, [t])[:, 0]
        mean_sessions[b] = np.mean([run.sessions_within(t) for run in runs])
        mean_steps[b] = np.mean([run.steps_within(t) for run in runs])
    return PassAtKTResult(table=table, ks=k_axis, ts=t_axis, n=n, protocol=protocol, task_ids=task_ids,
                          mean_sessions=mean_sessions, mean_steps=mean_steps, samples=samples)
