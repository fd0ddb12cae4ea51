"""Where a run's metrics go besides ``metrics.jsonl``: TensorBoard event files and Weights & Biases.

Both are optional and only used when asked for: TensorBoard needs the ``tensorboard`` package
(``pip install 'mosaic-gym[tensorboard]'``; ``torch.utils.tensorboard`` writes the events), W&B the ``wandb``
package. Asked for but not installed, a reporter is skipped with one warning that names the install, and the
run goes on with ``metrics.jsonl`` alone. Each reporter gets an iteration's metrics as
:func:`algos.learn.train.rl_iteration` returns them; every numeric value becomes a scalar under its own name.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["ReporterWarning", "TensorBoardReporter", "WandbReporter", "make_reporters", "scalars"]


class ReporterWarning(UserWarning):
    """A reporter that was asked for and cannot run (its package is not installed): it is skipped."""


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics a dashboard can plot: finite numbers (not booleans, not None), as floats.

    Example:
        >>> scalars({"iteration": 3, "success": 0.5, "d_positive": None, "ok": True, "nan": float("nan")})
        {'success': 0.5}
    """
    return {k: float(v) for k, v in metrics.items()
            if k != "iteration" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class TensorBoardReporter:
    """Writes each iteration's metrics as TensorBoard scalars in ``log_dir`` (``tensorboard --logdir``).

    The event file opens at the first write: its step is where this process starts (0, or the iteration a
    resumed run continues from), and events a killed run wrote from that step on are purged, so a resumed
    run's curves hold each iteration once.
    """

    def __init__(self, log_dir: str | Path):
        self.log_dir = Path(log_dir)
        self.writer: SummaryWriter | None = None

    def write(self, metrics: dict[str, Any], step: int) -> None:
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=step or None)
        for name, value in scalars(metrics).items():
            self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class WandbReporter:
    """Logs each iteration's metrics to a W&B run (``wandb.init(project=..., config=...)``; W&B's own settings,
    e.g. ``WANDB_MODE=offline``, apply)."""

    def __init__(self, project: str, config: dict[str, Any], run_dir: str | Path):
        import wandb

        self.run = wandb.init(project=project, config=config, dir=str(run_dir), name=Path(run_dir).name)

    def write(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(scalars(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


def make_reporters(run_dir: str | Path, tensorboard: bool = False, wandb_project: str | None = None,
                   config: dict[str, Any] | None = None) -> list[Any]:
    """The reporters asked for that can run here; each one asked for whose package is missing is skipped with a
    :class:`ReporterWarning`. TensorBoard writes into ``run_dir/tensorboard``."""
    reporters: list[Any] = []
    if tensorboard:
        if importlib.util.find_spec("tensorboard") is None:
            warnings.warn("--tensorboard: the tensorboard package is not installed (pip install "
                          "'mosaic-gym[tensorboard]'); metrics go to metrics.jsonl only", ReporterWarning, stacklevel=2)
        else:
            reporters.append(TensorBoardReporter(Path(run_dir) / "tensorboard"))
    if wandb_project is not None:
        if importlib.util.find_spec("wandb") is None:
            warnings.warn("--wandb: the wandb package is not installed (pip install wandb); metrics go to "
                          "metrics.jsonl only", ReporterWarning, stacklevel=2)
        else:
            reporters.append(WandbReporter(wandb_project, config or {}, run_dir))
    return reporters
