"""The examples run as a user runs them and do what their docstrings say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym

import envs  # noqa: F401  (registers the environments)
from agents import Agent
from helpers import SITE_SIZE, load_module

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    return load_module(EXAMPLES / f"{name}.py", f"example_{name}")


def test_custom_agent_example_runs_from_the_command_line():
    done = subprocess.run([sys.executable, str(EXAMPLES / "custom_agent.py"), "--episodes", "3",
                           "--site-size", str(SITE_SIZE)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("episode ") for line in lines) == 3
    assert re.fullmatch(r"success: \d\.\d\d over 3 episodes", lines[-1])


def test_custom_agent_is_a_plain_agent_that_solves_easy_tasks(capsys):
    example = _load("custom_agent")
    assert issubclass(example.SearchOpenAnswer, Agent)
    success = example.main(["--episodes", "4", "--site-size", str(SITE_SIZE)])
    assert f"success: {success:.2f} over 4 episodes" in capsys.readouterr().out
    assert success > 0  # the rules do answer some one-hop questions
    # Every action it takes is one the env accepts: a plain agent needs nothing beyond act().
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, hops=1, max_steps=8, candidates=True)
    agent = example.SearchOpenAnswer()
    observation, info = env.reset(seed=0)
    done = False
    while not done:
        observation, _, terminated, truncated, info = env.step(agent.act(observation, info))
        assert info["action_error"] is None
        done = terminated or truncated


def test_budgetmix_example_quick_run_writes_every_curve(tmp_path):
    import json

    import matplotlib.image

    results = _load("budgetmix").main(["--quick", "--out", str(tmp_path)])
    assert list(results) == ["warm_start", "fixed", "budgetmix"]
    for r in results.values():
        assert sorted(r["pass_at_1"]) == [2, 4, 8] and all(0.0 <= v <= 1.0 for v in r["pass_at_1"].values())
    assert json.loads((tmp_path / "results.json").read_text())["budgetmix"]["budgets"] == "2,3,4,6,8"
    image = matplotlib.image.imread(tmp_path / "pass_at_1.png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    for name in results:
        assert (tmp_path / name / "final" / "config.json").is_file()
