"""Helpers for the tests (not fixtures: those are in conftest.py): the small site's size and the test model, the
stream of an agent's steps, the shape of a bench report, float32 tolerances, and a script or example loaded as a
module. Tests import them from here
(``from helpers import SITE_SIZE``), never from conftest.

:func:`float32_tol` is the tolerance for comparing one float32 quantity computed along two paths (a stored score
and a recomputed one, a batch and a single pass, two micro-batchings): the paths sum in different orders, and
torch's CPU kernels pick their order by the CPU (AVX-512, AVX2, none), so the last bits differ by machine.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType

import numpy as np

SITE_SIZE = 150
# The smallest tiny Llama (about 85k parameters): it runs every code path a tiny-1m run does, 3-4x faster. Tests
# that check learning, not plumbing, keep tiny-1m.
TEST_MODEL = "tiny-100k"


def record_stream(env, agent, steps: int) -> list[tuple]:
    """``steps`` agent steps in ``env`` (reset with seeds 0, 1, ... whenever an episode ends), as a list of
    (action, obs, reward, terminated, truncated, info), with ("reset", obs, info) after each reset."""
    out, seed = [], 0
    obs, info = env.reset(seed=seed)
    while len(out) < steps:
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            seed += 1
            obs, info = env.reset(seed=seed)
            out.append(("reset", obs, info))
    return out


BENCH_ROW_KEYS = {"bench", "name", "value", "unit", "baseline", "baseline_value", "baseline_unit", "ratio"}


def bench_smoke(tmp_path, only: tuple[str, ...]) -> dict:
    """``mosaic bench --smoke --only ONLY``'s results, checked for the shape every report has."""
    from mosaic_gym.cli import main

    assert main(["bench", "--smoke", "--only", ",".join(only), "--out", str(tmp_path), "--no-progress"]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["settings"] == "smoke" and result["errors"] == {}
    assert set(result["benchmarks"]) == set(only) == set(result["seconds"])
    rows = result["figures"]
    assert {row["bench"] for row in rows} == set(only)
    for row in rows:
        assert set(row) == BENCH_ROW_KEYS, row
        assert isinstance(row["value"], (int, float)) and math.isfinite(row["value"]), row
        if row["baseline_value"] is not None:
            assert row["ratio"] == round(row["value"] / row["baseline_value"], 4), row
    return result

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2**-23, about 1.19e-7


def float32_tol(n_terms: int, scale: float = 1.0) -> float:
    """The absolute difference two float32 paths may show on a value that sums ``n_terms`` terms of magnitude
    ``scale``: each path's rounding error is at most about ``n_terms * eps/2 * scale`` (the worst-case bound of a
    recursive sum, Higham, Accuracy and Stability of Numerical Algorithms, 2002, eq. 4.4), so two differ by at
    most ``n_terms * eps * scale``.

    Example:
        >>> round(float32_tol(2000, 1.0), 6)
        0.000238
    """
    if n_terms < 1 or not scale > 0:
        raise ValueError(f"n_terms must be at least 1 and scale positive, got {n_terms}, {scale}")
    return n_terms * FLOAT32_EPS * scale


def load_module(path: Path, name: str) -> ModuleType:
    """The Python file at ``path`` (a script or an example, which are no package) run as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"{path} is not a Python file"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
