"""``mosaic bench``: a run measures every benchmark and writes well-formed results.

The shape of a report does not depend on its settings, so the check runs the smallest (``--smoke``, seconds).
Speeds depend on the machine and on whatever else runs on it, so nothing here asserts one.
"""

from __future__ import annotations

import pytest

from helpers import bench_smoke
from mosaic_gym.bench import bench_env, suite
from mosaic_gym.cli import main

BENCHMARKS = {"site", "env", "playwright", "rollout", "trainer", "iteration", "scale", "server"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# The suite's own checks run on the benchmarks that take seconds; each of the others (a subprocess training
# run, Ray workers, a model server) has its own file, tests/test_bench_*.py, so that pytest -n runs them side
# by side.
CHEAP = ("site", "env", "rollout", "trainer")


def test_the_suite_knows_every_benchmark():
    assert set(suite.BENCHMARKS) == BENCHMARKS == set(CHEAP) | {"playwright", "iteration", "scale", "server"}


def test_bench_reports_each_benchmark_beside_its_baseline(tmp_path, capsys):
    result = bench_smoke(tmp_path, CHEAP)
    machine = result["machine"]
    assert machine["cpus"] >= 1 and machine["torch_threads"] == 1
    assert all(machine["packages"][name] for name in ("gymnasium", "torch", "transformers", "playwright"))
    env = result["benchmarks"]["env"]
    assert env["settings"] == "smoke" and [site["size"] for site in env["sites"]] == list(env["config"]["sizes"])
    levels = [level["context_tokens"] for level in env["context"]["levels"]]
    assert levels == sorted(levels) and levels[-1] > env["config"]["window"] // 2
    assert (tmp_path / "env_scaling.png").read_bytes()[:8] == PNG_MAGIC
    printed = capsys.readouterr().out
    assert "| benchmark | figure | value | bare baseline | baseline value | ratio |" in printed
    assert printed.count("\n| ") == 1 + len(result["figures"])  # the header, then one line per figure


def test_settings_are_one_flag_and_a_benchmark_refuses_unknown_ones(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--quick", "--smoke"])
    assert "not allowed with argument --quick" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown settings 'tiny': choose among full, quick, smoke"):
        bench_env.run("tiny")


def test_unknown_benchmark_is_refused_naming_the_choices(capsys):
    assert main(["bench", "--only", "env,gpu"]) == 2
    assert "unknown benchmark gpu: choose among site, env, playwright, rollout, trainer, iteration, scale, server" in capsys.readouterr().err
