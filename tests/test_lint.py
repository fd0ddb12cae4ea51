"""ruff over the packages, tests, scripts and examples, with the rules in pyproject.toml ([tool.ruff]): the suite
fails on an unused import, an undefined name or a syntax error anywhere, as a reviewer would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    beside = Path(sys.executable).with_name("ruff")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: run the README's setup (it installs the dev extra, which holds ruff)")
    return [found]


def test_ruff_finds_nothing():
    done = subprocess.run([*_ruff(), "check", "--no-cache", "envs", "agents", "algos", "mosaic_gym", "tests",
                           "scripts", "examples"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_would_catch_an_unused_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    done = subprocess.run([*_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "F401" in done.stdout
