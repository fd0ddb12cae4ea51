"""``import mosaic_gym``: the front door registers the ids, and a shadowed package is named, not mistaken."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mosaic_gym


def python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_gym_make_with_the_module_prefix_needs_no_import(tmp_path):
    done = python('import gymnasium as gym; env = gym.make("mosaic_gym:mosaic/WebQA-v0", site_size=120); '
                  'print(env.reset(seed=0)[1]["session_kind"])', tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "root"


def test_the_front_door_lists_the_ids_and_a_version():
    assert set(mosaic_gym.ENV_IDS) == {"mosaic/WebQA-v0", "mosaic/WebQA-Compact-v0", "mosaic/WebQA-Fork-v0",
                                       "mosaic/WebQA-Single-v0"}
    assert mosaic_gym.__version__


@pytest.mark.parametrize("name, shadow", [
    ("envs", "envs/__init__.py"),       # the user's own envs/ folder beside their script
    ("agents", "agents.py"),            # a module file
    ("algos", "algos/__init__.py"),
])
def test_a_shadowed_package_is_named(tmp_path, name, shadow):
    file = tmp_path / shadow
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("")
    done = python("import mosaic_gym", tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("mosaic_gym.ShadowedPackageError: the module ")
    assert f"{name!r} found at {file}" in last and f"rename your own {name!r}" in last


def test_an_already_imported_stranger_is_named(monkeypatch):
    import types

    stranger = types.ModuleType("agents")
    stranger.__file__ = "/elsewhere/site-packages/agents/__init__.py"
    monkeypatch.setitem(sys.modules, "agents", stranger)
    with pytest.raises(mosaic_gym.ShadowedPackageError, match="found at /elsewhere/site-packages/agents"):
        mosaic_gym.check_packages()
