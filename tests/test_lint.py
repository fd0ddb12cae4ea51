"""ruff over the packages, tests, scripts and examples, and mypy over the packages, with the rules in pyproject.toml
([tool.ruff], [tool.mypy]): the suite fails on an unused import, an undefined name, a syntax error or a type error, as a
reviewer would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    """The dev tool ``name`` (ruff, mypy): the one beside this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return [str(beside)]
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run the README's setup (it installs the dev extra, which holds {name})")
    return [found]


def test_ruff_finds_nothing():
    done = subprocess.run([*_tool("ruff"), "check", "--no-cache", "envs", "agents", "algos", "mosaic_gym", "tests",
                           "scripts", "examples"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_would_catch_an_unused_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    done = subprocess.run([*_tool("ruff"), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "F401" in done.stdout


def test_mypy_finds_nothing_in_the_packages():
    """mypy over the four packages with the settings in pyproject.toml ([tool.mypy]): an error in any module fails
    here (no module is exempt any more)."""
    done = subprocess.run([*_tool("mypy"), "envs", "agents", "algos", "mosaic_gym"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_would_catch_a_wrong_type(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n")
    done = subprocess.run([*_tool("mypy"), "--config-file", str(ROOT / "pyproject.toml"), str(bad)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "return-value" in done.stdout
