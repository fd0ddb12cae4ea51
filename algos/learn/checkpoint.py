"""Checkpoints that resume exactly: model, optimiser, every RNG, the step, written atomically, loaded safely.

One file, ``checkpoint.pt``, replaced atomically (written to a temporary file in the same folder, flushed to
disk, then renamed over the old one), so a kill at any moment leaves the last good checkpoint readable. A kill
during the write leaves its temporary file behind; :func:`remove_stale_temps` clears those when a run starts.

Loading never runs code: ``torch.load(weights_only=True)`` unpickles tensors and plain data only, so the
payload holds nothing else (every RNG state as tensors, lists and ints; settings as JSON-like dicts). A file
that is not such a checkpoint (truncated, empty, random bytes, another model's weights, a crafted pickle) is
refused with a :class:`CheckpointError`: one line naming the file and what is wrong.

Damage that still unpickles (flipped bytes in a tensor's data, which torch does not check) is caught by the
payload's ``sha256``: a digest of every entry, tensors by dtype, shape and bytes (:func:`payload_digest`),
checked on load. Weights and optimiser values must be finite. A checkpoint of format 2 (written before the
checksum) is still read: refusing it would end runs that nothing is wrong with, and every other check applies
to it; :func:`check_training_state` says in the run's log that its damage could not be detected.
:func:`check_training_state` also refuses a training state no run writes (an unknown phase, an iteration
outside ``0 .. iterations``, a history of another length) or one whose settings contradict the run's
``config.json``.

Example:
    >>> import torch, tempfile, pathlib
    >>> model = torch.nn.Linear(2, 2); opt = torch.optim.AdamW(model.parameters())
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "checkpoint.pt"
    >>> save_checkpoint(path, model, opt, step=3, extra={"note": "hi"})
    >>> load_checkpoint(path, model, opt)["step"]
    3
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import random
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from algos.learn.config import RESUMABLE, TrainConfig, changed_settings, config_from_json

# 1: RNG states as numpy arrays and tuples, which only an unsafe (code-running) load can read; 2: no checksum;
# 3: the payload's sha256 in it.
FORMAT = 3
READABLE_FORMATS = (2, 3)
KEYS = ("format", "model", "optimizer", "step", "rng", "extra")
PHASES = ("warm_start", "rl")  # algos.learn.train's phases: cloning demonstrations, then RL iterations


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message is one line naming the file and the problem."""

    def __init__(self, path: str | Path, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"cannot resume from {path}: {problem}")

    def __reduce__(self):  # (a study's run in another process raises it: it crosses back pickled)
        return type(self), (self.path, self.problem)


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
    payload["sha256"] = payload_digest(payload)
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
    _check_digest(path, payload)
    _check_finite(path, payload)
    return payload


def payload_digest(payload: dict[str, Any]) -> str:
    """The sha256 of every entry of ``payload`` but ``"sha256"``: keys in order, plain values by type and repr,
    tensors and arrays by dtype, shape and bytes. The same before saving and after a load, whatever the file's
    layout; a value that is not plain data is a ``TypeError`` (a safe load could not read it back)."""
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in payload.items() if k != "sha256"})
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        digest.update(f"tensor {data.dtype} {tuple(data.shape)};".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(value, (np.ndarray, np.generic)):
        array = np.ascontiguousarray(value)
        digest.update(f"array {array.dtype.str} {array.shape};".encode())
        digest.update(array.tobytes())
    elif isinstance(value, dict):
        digest.update(f"dict {len(value)};".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _feed(digest, item)
    elif value is None or isinstance(value, (bool, int, float, str, bytes)):
        digest.update(f"{type(value).__name__} {value!r};".encode())
    else:
        raise TypeError(f"a checkpoint holds tensors and plain data only, not a {type(value).__name__}")


def _check_digest(path: Path, payload: dict[str, Any]) -> None:
    if payload["format"] == 2:  # written before the checksum (check_training_state notes it in the run's log)
        return
    stored = payload.get("sha256")
    if not isinstance(stored, str):
        raise CheckpointError(path, "it has no 'sha256' entry (a checkpoint of format 3 carries its checksum)")
    try:
        actual = payload_digest(payload)
    except TypeError as err:
        raise CheckpointError(path, f"not a checkpoint's payload ({err})") from None
    if actual != stored:
        raise CheckpointError(path, f"its contents do not match their checksum (sha256 {actual[:12]}..., recorded "
                                    f"{stored[:12]}...): the file was damaged after it was written; resume from a "
                                    "copy of the run, or start it again")


def _check_finite(path: Path, payload: dict[str, Any]) -> None:
    """Refuse NaN or infinite weights and optimiser values (loaded, they would fail mid-iteration)."""
    for entry, floats in (("model", False), ("optimizer", True), ("extra", False)):
        bad = next(_non_finite(payload[entry], entry, floats), None)
        if bad is not None:
            raise CheckpointError(path, f"{bad} holds NaN or infinite values (a run that diverged, or a damaged "
                                        "file): resume from an earlier copy of the run, or start it again")


def _non_finite(value: Any, name: str, floats: bool):
    """The names of the floating tensors (and, with ``floats``, the Python floats) in ``value`` not all finite.
    (A run's history holds NaN on purpose, e.g. the stderr of one task: plain floats in ``extra`` may be NaN.)"""
    if isinstance(value, torch.Tensor):
        if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
            yield f"its {name}"
    elif isinstance(value, float):
        if floats and not math.isfinite(value):
            yield f"its {name}"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{name}[{key!r}]", floats)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _non_finite(item, f"{name}[{index}]", floats)


def check_training_state(path: str | Path, payload: dict[str, Any], saved: TrainConfig,
                         log: Callable[[str], Any] = print) -> None:
    """Refuse a training checkpoint whose state no run of :func:`algos.learn.train.train` writes, or whose settings
    contradict ``saved`` (the run's ``config.json``) beyond :data:`algos.learn.config.RESUMABLE`.

    Checked: the phase is one of :data:`PHASES`; the iteration is an int in ``0 .. iterations`` of the run that
    wrote it (``0`` in the warm start), equal to the checkpoint's step and to the length of its history; the
    generators' states and the reference model fit what the run restores them into. A checkpoint of format 2
    (no checksum) is read, and ``log`` says so.
    """
    path = Path(path)
    extra = payload["extra"]
    state = extra.get("state")
    if not isinstance(state, dict) or not {"iteration", "phase", "history", "summary"} <= set(state):
        raise CheckpointError(path, "its training state is not a dict of iteration, phase, history and summary")
    phase, iteration = state["phase"], state["iteration"]
    if phase not in PHASES:
        raise CheckpointError(path, f"its phase is {_short(phase)}, not one of {', '.join(PHASES)}")
    if type(iteration) is not int or iteration < 0:
        raise CheckpointError(path, f"its iteration is {_short(iteration)}, not a count of RL iterations (0 or more)")
    try:
        written_by = config_from_json(extra.get("config"), path.parent)
    except (TypeError, ValueError) as err:
        raise CheckpointError(path, f"its settings are unreadable ({_line(err)})") from None
    most = 0 if phase == "warm_start" else written_by.iterations
    if iteration > most:
        raise CheckpointError(path, f"its iteration {iteration} is beyond the {most} RL iterations of the run that "
                                    f"wrote it in its {phase} phase")
    if not isinstance(state["history"], list) or not isinstance(state["summary"], dict):
        raise CheckpointError(path, "its training state's history is not a list or its summary not a dict")
    if payload["step"] != iteration or len(state["history"]) != iteration:
        raise CheckpointError(path, f"its iteration ({iteration}) differs from its step ({_short(payload['step'])}) "
                                    f"or the iterations in its history ({len(state['history'])})")
    _check_generators(path, extra, saved.pg.device)
    reference = extra.get("ref_model")
    if reference is not None and (not isinstance(reference, dict) or {k: _shape(v) for k, v in reference.items()}
                                  != {k: _shape(v) for k, v in payload["model"].items()}):
        raise CheckpointError(path, "its reference model is not the shape of its model")
    changed = changed_settings(saved, written_by, free=RESUMABLE)
    if changed:
        name, in_config, in_checkpoint = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise CheckpointError(path, f"its settings contradict the run's config.json: {name} is {in_config!r} there, "
                                    f"{in_checkpoint!r} in the checkpoint{more}; it belongs to another run")
    if payload["format"] == 2:
        log(f"{path} was written before checkpoints carried a checksum (format 2): resuming from it, its training "
            "state checked, but damage to its values cannot be detected")


def _check_generators(path: Path, extra: dict[str, Any], device: str) -> None:
    """The run's generators take the states (numpy's for the sampler, torch's for the agent on ``device``),
    tried on copies (the agent's on the CPU only: a GPU's generator needs the GPU)."""
    try:
        np.random.default_rng().bit_generator.state = extra["rng"]
        agent = extra["agent_rng"]
        if not isinstance(agent, torch.Tensor) or agent.dtype != torch.uint8:
            raise TypeError(f"the agent's is a {type(agent).__name__}, not a byte tensor")
        if device == "cpu":
            torch.Generator().set_state(agent)
    except (ValueError, TypeError, KeyError, RuntimeError, OverflowError) as err:
        raise CheckpointError(path, f"its generator states are unreadable ({_line(err)})") from None


def _shape(value: Any) -> Any:
    return (value.dtype, tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_payload(path: Path, payload: Any) -> None:
    if not isinstance(payload, dict):
        raise CheckpointError(path, f"it holds a {type(payload).__name__}, not a checkpoint's dict")
    missing = [k for k in KEYS if k not in payload]
    if missing:
        raise CheckpointError(path, f"it has no {', '.join(repr(k) for k in missing)} entry")
    if type(payload["format"]) is not int or payload["format"] not in READABLE_FORMATS:
        raise CheckpointError(path, f"its format is {_short(payload['format'])}, this version reads "
                                    f"{' and '.join(map(str, READABLE_FORMATS))}")
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
