"""Checkpoints that resume exactly: model, optimiser, every RNG, the step, written atomically, loaded safely.

One file, ``checkpoint.pt``, replaced atomically (written to a temporary file in the same folder, flushed to
disk, then renamed over the old one), so a kill at any moment leaves the last good checkpoint readable. A kill
during the write leaves its temporary file behind; :func:`remove_stale_temps` clears those when a run starts.

Loading never runs code: ``torch.load(weights_only=True)`` unpickles tensors and plain data only, so the
payload holds nothing else (every RNG state as tensors, lists and ints; settings as JSON-like dicts). A file
that is not such a checkpoint (truncated, empty, random bytes, another model's weights, a crafted pickle) is
refused with a :class:`CheckpointError`: one line naming the file and what is wrong.

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
import pickle
import random
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = 2  # 1: RNG states as numpy arrays and tuples, which only an unsafe (code-running) load can read
KEYS = ("format", "model", "optimizer", "step", "rng", "extra")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message is one line naming the file and the problem."""

    def __init__(self, path: str | Path, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"cannot resume from {path}: {problem}")


def rng_states() -> dict[str, Any]:
    """The state of every global RNG a run touches, as tensors, lists and ints (what a safe load can read)."""
    version, internal, gauss = random.getstate()
    numpy = np.random.get_state(legacy=False)
    return {"python": [version, list(internal), gauss],
            "numpy": {**numpy, "state": {"key": numpy["state"]["key"].tolist(), "pos": numpy["state"]["pos"]}},
            "torch": torch.get_rng_state()}


def set_rng_states(states: dict[str, Any]) -> None:
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = states["numpy"]
    key = np.asarray(numpy["state"]["key"], dtype=np.uint32)
    np.random.set_state({**numpy, "state": {"key": key, "pos": numpy["state"]["pos"]}})
    torch.set_rng_state(states["torch"])


def save_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int,
                    extra: dict[str, Any] | None = None) -> None:
    """Write model, optimiser, RNG states, ``step`` and ``extra`` to ``path`` atomically.

    ``extra`` must hold tensors and plain data only (dicts, lists, str, numbers, None): anything else would
    make the checkpoint unreadable by the safe load.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
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


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Delete the temporary files that writes of ``path`` killed midway left beside it; returns them.

    Only the writer of a run makes them, and a run has one writer, so any found when it starts are stale.
    """
    path = Path(path)
    stale = sorted(path.parent.glob(f"{path.name}.*.tmp")) if path.parent.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Load what :func:`save_checkpoint` wrote into ``model`` (and ``optimizer``); returns the payload."""
    payload = read_checkpoint(path)
    restore_checkpoint(path, payload, model, optimizer, restore_rng)
    return payload


def restore_checkpoint(path: str | Path, payload: dict[str, Any], model: torch.nn.Module,
                       optimizer: torch.optim.Optimizer | None = None, restore_rng: bool = True) -> None:
    """Put a payload that :func:`read_checkpoint` returned into ``model``, ``optimizer`` and the global RNGs.

    The weights are checked against the model before anything is loaded, so weights of another model
    (:class:`CheckpointError`) leave it as it was.
    """
    path = Path(path)
    _check_weights(path, payload["model"], model)
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        try:
            optimizer.load_state_dict(payload["optimizer"])
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise CheckpointError(path, f"its optimiser state does not fit this optimiser ({_line(err)})") from None
    if restore_rng:
        try:
            set_rng_states(payload["rng"])
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise CheckpointError(path, f"its RNG states are unreadable ({_line(err)})") from None


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The payload of ``path``, read safely (no code runs) and checked to have every part a resume needs."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "there is no such file")
    if path.stat().st_size == 0:
        raise CheckpointError(path, "the file is empty (a write that never finished?)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        reason = _unpickler_reason(err)
        if reason.startswith("Unsupported operand"):  # not a pickle at all
            raise CheckpointError(path, f"not a checkpoint, or a damaged one ({reason})") from None
        if "numpy" in reason:  # format 1 kept numpy's RNG state as an array
            raise CheckpointError(path, "written by an older version (its RNG states need a load that could run "
                                        "code, which is refused): start the run again") from None
        raise CheckpointError(path, "refused: it holds objects other than tensors and plain data, and loading "
                                    f"them could run code ({reason})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError, TypeError, KeyError,
            AttributeError, IndexError) as err:
        raise CheckpointError(path, f"not a checkpoint, or a truncated one ({_line(err)})") from None
    _check_payload(path, payload)
    return payload


def _check_payload(path: Path, payload: Any) -> None:
    if not isinstance(payload, dict):
        raise CheckpointError(path, f"it holds a {type(payload).__name__}, not a checkpoint's dict")
    missing = [k for k in KEYS if k not in payload]
    if missing:
        raise CheckpointError(path, f"it has no {', '.join(repr(k) for k in missing)} entry")
    if payload["format"] != FORMAT:
        raise CheckpointError(path, f"its format is {payload['format']!r}, this version reads {FORMAT}")
    for key, kind in (("rng", dict), ("extra", dict), ("step", int)):
        if not isinstance(payload[key], kind):
            raise CheckpointError(path, f"its {key!r} entry is a {type(payload[key]).__name__}, not a {kind.__name__}")
    weights = payload["model"]
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(path, "its 'model' entry is not a dict of tensors")


def _check_weights(path: Path, weights: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    """Refuse weights of another model: other parameter names, shapes or dtypes."""
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
    if missing or unexpected:
        raise CheckpointError(path, f"its weights are another model's ({len(missing)} of this model's tensors "
                                    f"missing, e.g. {(missing or ['none'])[0]!r}; {len(unexpected)} unknown, "
                                    f"e.g. {(unexpected or ['none'])[0]!r})")
    for name, tensor in own.items():
        got = weights[name]
        if got.shape != tensor.shape or got.dtype != tensor.dtype:
            raise CheckpointError(path, f"its weights are another model's ({name} is {got.dtype} "
                                        f"{tuple(got.shape)}, this model's is {tensor.dtype} {tuple(tensor.shape)})")


def _unpickler_reason(err: Exception) -> str:
    """What torch's safe unpickler objected to (``Unsupported global: GLOBAL io.open ...``), without its advice."""
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\. |\n|$)", str(err))
    return _line(found.group(1) if found else err)


def _line(err: Any, limit: int = 160) -> str:
    """The first line of an error's text, shortened: the CLI prints one line."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if isinstance(err, BaseException):
        text = f"{type(err).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
