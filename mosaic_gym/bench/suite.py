"""Run the benchmarks in one process, print one table, write ``bench.json`` and the plots.

Each benchmark is declared once, as a :class:`~mosaic_gym.bench.registry.Benchmark` in its own module, and
named in :data:`~mosaic_gym.bench.registry.REGISTRY` (see :mod:`mosaic_gym.bench.registry` for how one is
written). This module only runs them in turn and puts their reports and summary rows together; ``mosaic bench``
is its command line (``python -m mosaic_gym.bench.suite`` is the same command).

Example:
    >>> from mosaic_gym.bench.common import figure
    >>> rows = [{"bench": "env", **figure("env steps/s", 18000.0, "steps/s", "bare renders", 1200.0, "pages/s")}]
    >>> print(table(rows))
    | benchmark | figure | value | bare baseline | baseline value | ratio |
    |---|---|---|---|---|---|
    | env | env steps/s | 18,000 steps/s | bare renders | 1,200 pages/s | 15 |
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from mosaic_gym.bench.common import machine, settings_argv
from mosaic_gym.bench.registry import load, select

PACKAGES = ("gymnasium", "numpy", "lxml", "bm25s", "playwright", "torch", "transformers", "tokenizers",
            "matplotlib", "ray")


def run_suite(settings: str = "full", only: Sequence[str] | None = None, threads: int | None = None,
              out: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Run the chosen benchmarks; with ``out``, write ``out/bench.json`` and the benchmarks' plots.

    Args:
        settings: every benchmark's settings, one of :data:`~mosaic_gym.bench.common.SETTINGS`: ``full``,
            ``quick`` (about 3 minutes in all on two shared cores) or ``smoke`` (about 2.5 minutes, nearly
            all of it starting processes: Ray, a model server, Chromium; checks the report, not speed).
        only: names from :data:`~mosaic_gym.bench.registry.REGISTRY` (default: those whose
            :attr:`~mosaic_gym.bench.registry.Benchmark.suites` hold ``settings``).
        threads: torch CPU threads for the model benchmarks (default: 1 unless ``full``, else torch's choice).
        out: the folder for the results (created if missing).
        progress: a progress bar on stderr.

    Returns:
        ``{"machine", "settings", "seconds", "figures", "benchmarks", "errors", "files"}``: every benchmark's
        report under its name, and the summary rows of all of them (each tagged with its ``bench``). A
        benchmark that fails leaves its error under ``errors`` and the others still run.
    """
    from tqdm.auto import tqdm

    names = select(only)
    settings_argv(settings)
    threads = threads or (None if settings == "full" else 1)
    result: dict[str, Any] = {"bench": "suite", "settings": settings, "machine": machine(PACKAGES), "seconds": {},
                              "figures": [], "benchmarks": {}, "errors": {}, "files": []}
    plots = {}
    bar = tqdm(names, desc="bench", unit="benchmark", disable=not progress, file=sys.stderr)
    for name in bar:
        # Each module loads only at its turn: the benchmarks before the first torch one measure memory without it.
        benchmark = load(name)
        if not only and settings not in benchmark.suites:
            continue
        bar.set_postfix_str(name)
        if benchmark.torch and "torch_threads" not in result["machine"]:
            import torch

            from mosaic_gym.bench.common import torch_machine

            if threads:
                # Two threads on two shared cores fight other work; one keeps short runs steady.
                torch.set_num_threads(threads)
            result["machine"].update(torch_machine())
        # What the previous benchmark left (sites hold reference cycles) is collected before the next starts.
        gc.collect()
        start = time.perf_counter()
        try:
            report = benchmark.run(settings)
        except Exception as err:  # one broken benchmark (say, no Chromium) must not lose the others' results
            result["errors"][name] = f"{type(err).__name__}: {err}"
            continue
        finally:
            result["seconds"][name] = round(time.perf_counter() - start, 1)
        result["benchmarks"][name] = report
        result["figures"] += [{"bench": name, **row} for row in benchmark.figures(report)]
        if benchmark.plot is not None:
            plots[name] = benchmark.plot, benchmark.plot_file
    bar.close()
    result["machine"]["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, (plot, plot_file) in plots.items():
            result["files"].append(str(plot(result["benchmarks"][name], out / plot_file)))
        result["files"].insert(0, str(out / "bench.json"))
        (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The summary rows as a Markdown table."""
    lines = ["| benchmark | figure | value | bare baseline | baseline value | ratio |", "|---|---|---|---|---|---|"]
    for row in rows:
        baseline = "-" if row["baseline_value"] is None else f"{number(row['baseline_value'])} {row['baseline_unit']}"
        ratio = "-" if row["ratio"] is None else number(row["ratio"])
        lines.append(f"| {row['bench']} | {row['name']} | {number(row['value'])} {row['unit']} | "
                     f"{row['baseline'] or '-'} | {baseline} | {ratio} |")
    return "\n".join(lines)


def number(value: float) -> str:
    """Three significant figures, thousands separated: 18,203 -> "18,200"; 0.0123 -> "0.0123"."""
    if abs(value) >= 100:
        return f"{float(f'{value:.3g}'):,.0f}"
    return f"{value:.3g}"


def summary(result: dict[str, Any]) -> str:
    """The machine in one line, the table, and any errors."""
    m = result["machine"]
    torch = f", torch {m['packages']['torch']} on {m['torch_threads']} thread(s)" if "torch_threads" in m else ""
    took = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result["seconds"].items())
    head = (f"{m['platform']}, {m['cpus']} CPUs (load {m['load_average_1min']}), Python {m['python']}{torch}\n"
            f"{result['settings']} run: {took}")
    errors = "".join(f"\n{name} failed: {error}" for name, error in result["errors"].items())
    return f"{head}\n\n{table(result['figures'])}{errors}"


if __name__ == "__main__":
    from mosaic_gym.cli import main

    sys.exit(main(["bench", *sys.argv[1:]]))
