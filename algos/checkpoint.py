"""Checkpoints that resume exactly: model, optimiser, every RNG, the step, written atomically.

One file, ``checkpoint.pt``, replaced atomically (written to a temporary file in the same folder, flushed to
disk, then renamed over the old one), so a kill at any moment leaves the last good checkpoint readable.

Example:
    >>> import torch, tempfile, pathlib
    >>> model = torch.nn.Linear(2, 2); opt = torch.optim.AdamW(model.parameters())
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "checkpoint.pt"
    >>> save_checkpoint(path, model, opt, step=3, extra={"note": "hi"})
    >>> load_checkpoint(path, model, opt)["step"]
    3
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_states() -> dict[str, Any]:
    """The state of every global RNG a run touches."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def save_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int,
                    extra: dict[str, Any] | None = None) -> None:
    """Write model, optimiser, RNG states, ``step`` and ``extra`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
               "rng": rng_states(), "extra": extra or {}}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Load what :func:`save_checkpoint` wrote into ``model`` (and ``optimizer``); returns the payload."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}; start without --resume, or point at a run folder")
    payload = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if restore_rng:
        set_rng_states(payload["rng"])
    return payload
