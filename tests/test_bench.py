"""``mosaic bench``: a run measures every benchmark and writes well-formed results.

The shape of a report does not depend on its settings, so the check runs the smallest (``--smoke``, seconds).
Speeds depend on the machine and on whatever else runs on it, so nothing here asserts one.
"""

from __future__ import annotations

import json
import math

import pytest

from mosaic_gym.bench import bench_env
from mosaic_gym.cli import main

BENCHMARKS = {"site", "env", "playwright", "rollout", "trainer", "iteration", "scale", "server"}
ROW_KEYS = {"bench", "name", "value", "unit", "baseline", "baseline_value", "baseline_unit", "ratio"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_bench_reports_every_benchmark_beside_its_baseline(tmp_path, capsys):
    assert main(["bench", "--smoke", "--out", str(tmp_path), "--no-progress"]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())

    assert result["settings"] == "smoke" and result["errors"] == {}
    assert set(result["benchmarks"]) == BENCHMARKS == set(result["seconds"])
    machine = result["machine"]
    assert machine["cpus"] >= 1 and machine["torch_threads"] == 1
    assert all(machine["packages"][name] for name in ("gymnasium", "torch", "transformers", "playwright"))

    rows = result["figures"]
    assert {row["bench"] for row in rows} == BENCHMARKS
    for row in rows:
        assert set(row) == ROW_KEYS, row
        assert isinstance(row["value"], (int, float)) and math.isfinite(row["value"]), row
        if row["baseline_value"] is not None:
            assert row["ratio"] == round(row["value"] / row["baseline_value"], 4), row
    env = result["benchmarks"]["env"]
    assert env["settings"] == "smoke" and [site["size"] for site in env["sites"]] == list(env["config"]["sizes"])
    levels = [level["context_tokens"] for level in env["context"]["levels"]]
    assert levels == sorted(levels) and levels[-1] > env["config"]["window"] // 2

    iteration = result["benchmarks"]["iteration"]
    assert iteration["same_trajectories"], iteration["rows"]  # the three rows ran the same episodes
    assert iteration["rows"]["broadcast"]["continuations_s"] == iteration["rows"]["broadcast"]["scoring_s"] == 0
    assert iteration["rows"]["mosaic-rollout"]["continuations_s"] > 0 < iteration["rows"]["mosaic-likelihood"]["scoring_s"]
    memory = iteration["memory"]
    # (at smoke size a run's peak can be the bare process's own, reached while both load the same libraries)
    assert memory["peak_rss_mb"] >= memory["bare_peak_rss_mb"] > 0

    scale = result["benchmarks"]["scale"]  # every pool ran the local pool's episodes
    assert all(scale[b][f"ray_{w}_workers"]["same_trajectories"] for b in ("playwright", "text") for w in (1, 2))
    server = result["benchmarks"]["server"]
    assert all(runs[f"in_flight_{n}"]["steps"] > 0 for runs in server["modes"].values() for n in (1, 8))

    assert (tmp_path / "env_scaling.png").read_bytes()[:8] == PNG_MAGIC
    printed = capsys.readouterr().out
    assert "| benchmark | figure | value | bare baseline | baseline value | ratio |" in printed
    assert printed.count("\n| ") == 1 + len(rows)  # the header, then one line per figure


def test_settings_are_one_flag_and_a_benchmark_refuses_unknown_ones(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--quick", "--smoke"])
    assert "not allowed with argument --quick" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown settings 'tiny': choose among full, quick, smoke"):
        bench_env.run("tiny")


def test_unknown_benchmark_is_refused_naming_the_choices(capsys):
    assert main(["bench", "--only", "env,gpu"]) == 2
    assert "unknown benchmark gpu: choose among site, env, playwright, rollout, trainer, iteration, scale, server" in capsys.readouterr().err
