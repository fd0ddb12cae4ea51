"""``mosaic bench``: a run measures every benchmark and writes well-formed results.

The shape of a report does not depend on its settings, so the check runs the smallest (``--smoke``, seconds).
Speeds depend on the machine and on whatever else runs on it, so nothing here asserts one.
"""

from __future__ import annotations

import pytest

import json

from helpers import bench_smoke
from mosaic_gym.bench import bench_env, bench_site, bench_trainer
from mosaic_gym.bench.common import SETTINGS
from mosaic_gym.bench.registry import REGISTRY, Benchmark, load
from mosaic_gym.cli import main

# The benchmarks a plain run takes; the others (html, actions, credit) run with --only.
BENCHMARKS = {"site", "env", "playwright", "rollout", "trainer", "iteration", "scale", "server"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# The suite's own checks run on the benchmarks that take seconds; each of the others (a subprocess training
# run, Ray workers, a model server) has its own file, tests/test_bench_*.py, so that pytest -n runs them side
# by side.
CHEAP = ("site", "env", "rollout", "trainer")


def test_every_registered_module_declares_its_benchmark_once():
    assert BENCHMARKS == set(CHEAP) | {"playwright", "iteration", "scale", "server"}
    benchmarks = {name: load(name) for name in REGISTRY}
    assert all(isinstance(b, Benchmark) and b.name == name and b.module == REGISTRY[name]
               for name, b in benchmarks.items())
    for settings in SETTINGS:
        assert {name for name, b in benchmarks.items() if settings in b.suites} == BENCHMARKS
    assert [name for name, b in benchmarks.items() if b.torch] == ["rollout", "trainer", "iteration", "attention"]


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
        bench_env.BENCHMARK.run("tiny")


def test_unknown_benchmark_is_refused_naming_the_choices(capsys):
    assert main(["bench", "--only", "env,gpu"]) == 2
    assert ("unknown benchmark gpu: choose among site, env, playwright, rollout, trainer, iteration, scale, server, "
            "html, actions, credit") in capsys.readouterr().err


def test_a_benchmark_alone_prints_the_report_mosaic_bench_gets(tmp_path, capsys):
    # python -m mosaic_gym.bench.bench_site --smoke --out FILE: the same parse and measure as mosaic bench's run.
    assert bench_site.BENCHMARK.main(["--smoke", "--seed", "3", "--out", str(tmp_path / "site.json")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "site.json").read_text())
    suite_report = bench_site.BENCHMARK.run("smoke")
    assert set(printed) == set(suite_report) and printed["settings"] == suite_report["settings"] == "smoke"
    assert [s["size"] for s in printed["sites"]] == [s["size"] for s in suite_report["sites"]]
    assert printed["sites"][0]["tasks"] > 0 and printed["corpora"] == []


def test_a_benchmarks_options_take_their_settings_defaults_and_refuse_bad_values(capsys):
    trainer = bench_trainer.BENCHMARK
    assert (trainer.parse(["--smoke"]).site_size, trainer.parse([]).site_size) == (150, 300)
    assert trainer.parse(["--quick", "--episodes", "7", "--threads", "2"]).episodes == 7
    with pytest.raises(SystemExit):
        trainer.parse(["--repeat", "0"])
    assert "argument --repeat: must be at least 1, not 0" in capsys.readouterr().err


def test_benchmarks_outside_the_plain_run_report_with_only(tmp_path):
    result = bench_smoke(tmp_path, ("html", "actions"))
    actions = result["benchmarks"]["actions"]
    assert actions["config"]["per_class"] == 1 and actions["exceptions"] == 0
    assert {row["bench"] for row in result["figures"]} == {"html", "actions"}


def test_the_help_lists_every_registered_benchmark_from_its_declaration(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    printed = capsys.readouterr().out
    for name in REGISTRY:
        line = next(line for line in printed.splitlines() if line.startswith(f"  {name} "))
        assert load(name).help.split()[0] in line
    assert " ".join(printed.split()).count("(only with --only)") == 4  # html, actions, credit, attention
