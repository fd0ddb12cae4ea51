"""What the benchmarks share: the machine they ran on, summary figures, a recorder of the pages an env shows,
and JSON output.

Example:
    >>> info = machine(["numpy"])
    >>> sorted(info)
    ['cpus', 'load_average_1min', 'packages', 'platform', 'processor', 'python']
    >>> figure("env steps/s", 18000.0, "steps/s", "bare renders", 1200.0)["ratio"]
    15.0
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import gymnasium as gym

    from envs.webqa import WebQAEnv


def machine(packages: Sequence[str]) -> dict[str, Any]:
    """Platform, processor, CPU count, how busy the CPUs were (other work slows every number down), the Python
    version and the versions of ``packages`` (``None`` for one not installed)."""
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "packages": versions,
    }


def torch_machine() -> dict[str, Any]:
    """What torch runs on: its CPU threads and the CUDA device, if any (imports torch)."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


#: Every benchmark's settings, largest first. ``full`` measures; ``quick`` is a first look (about two minutes
#: for the suite on two cores); ``smoke`` only checks that a benchmark runs and reports in full (seconds; its
#: figures are too short to trust).
SETTINGS = ("full", "quick", "smoke")


def add_settings_flags(parser: Any, quick: str, smoke: str) -> None:
    """``--quick`` and ``--smoke`` (one at most), described by ``quick`` and ``smoke``; ``args.settings`` is the
    chosen one of :data:`SETTINGS`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", dest="settings", action="store_const", const="quick", default="full", help=quick)
    group.add_argument("--smoke", dest="settings", action="store_const", const="smoke", help=smoke)


def settings_argv(settings: str) -> list[str]:
    """The command-line flag of ``settings`` (none for ``full``); a clear error for an unknown one."""
    if settings not in SETTINGS:
        raise ValueError(f"unknown settings {settings!r}: choose among {', '.join(SETTINGS)}")
    return [] if settings == "full" else [f"--{settings}"]


def fill_defaults(args: Any, defaults: Mapping[str, Mapping[str, Any]]) -> Any:
    """Set every option the user left at ``None`` from ``defaults[args.settings]``; returns ``args``."""
    for key, value in defaults[args.settings].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def at_least(low: int, why: str = "") -> Any:
    """An argparse ``type``: an integer of at least ``low``; else the option's one-line error, ending in ``why``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}{why}, not {value}")
        return value

    return parse


def load_bench_model(args: Any) -> tuple[Any, Any, str]:
    """``args.model`` loaded on the GPU if there is one, else the CPU; returns ``(model, tokenizer, device)``."""
    import torch

    from agents.models import load_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_model(args.model)
    # functools.wraps on PreTrainedModel.to makes typeshed see it unbound (wanting self): a stub limitation.
    return model.to(device), tokenizer, device  # type: ignore[arg-type]


def model_report(bench: str, args: Any, model: Any, device: str, packages: Sequence[str], env_id: str
                 ) -> dict[str, Any]:
    """The head of a model benchmark's report: its name and settings, the machine (with torch's threads and
    CUDA device), the env, and the model (``args.model``) with its size and device."""
    return {"bench": bench, "settings": args.settings, "machine": {**machine(packages), **torch_machine()},
            "env": env_id, "model": args.model, "parameters": model.num_parameters(), "device": device}


def figure(name: str, value: float, unit: str, baseline: str | None = None, baseline_value: float | None = None,
           baseline_unit: str | None = None) -> dict[str, Any]:
    """One row of a summary: a measured ``value`` beside its bare ``baseline`` (what the same work costs with
    nothing of ours around it, measured in the same run) and ``ratio`` = value / baseline value."""
    ratio = round(value / baseline_value, 4) if baseline_value else None
    return {"name": name, "value": value, "unit": unit, "baseline": baseline, "baseline_value": baseline_value,
            "baseline_unit": baseline_unit or unit if baseline else None, "ratio": ratio}


def webqa_env(env: gym.Env) -> WebQAEnv:
    """The :class:`~envs.webqa.WebQAEnv` under ``env``'s wrappers (``env.unwrapped``), for a benchmark that drives
    its backend itself; a ``TypeError`` for any other env.

    Example:
        >>> import gymnasium as gym, envs
        >>> type(webqa_env(gym.make("mosaic/WebQA-v0", site_size=120)).backend).__name__
        'TextBackend'
        >>> webqa_env(gym.make("CartPole-v1"))
        Traceback (most recent call last):
        TypeError: CartPoleEnv is not a WebQA env (mosaic/WebQA-*): it has no backend to drive
    """
    from envs.webqa import WebQAEnv

    inner = env.unwrapped
    if not isinstance(inner, WebQAEnv):
        raise TypeError(f"{type(inner).__name__} is not a WebQA env (mosaic/WebQA-*): it has no backend to drive")
    return inner


class Recorder:
    """Wraps a backend's ``view`` to remember which urls a step showed, and the seconds spent showing them."""

    def __init__(self, backend: Any):
        self.urls: list[str] = []
        self.seconds = 0.0
        self._view = backend.view
        backend.view = self.view

    def view(self, url: str) -> Any:
        self.urls.append(url)
        start = time.perf_counter()
        try:
            return self._view(url)
        finally:
            self.seconds += time.perf_counter() - start


def emit(result: dict[str, Any], out: Path | None) -> None:
    """Print ``result`` as JSON, and write it to ``out`` too when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n")
