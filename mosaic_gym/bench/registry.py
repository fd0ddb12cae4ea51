"""The benchmarks: each declared once, as a :class:`Benchmark` in its own module, and the one command line they share.

A benchmark module ``mosaic_gym/bench/bench_<name>.py`` holds what it measures, then declares itself::

    BENCHMARK = Benchmark("env", "env steps/s on the text backend beside the bare page-render rate",
                          measure, figures, quick="sites of 300 and 1000 entities", smoke="a site of 150",
                          defaults={"full": {"sizes": (1000, 3000)}, "quick": {...}, "smoke": {...}},
                          options=options)

    if __name__ == "__main__":
        sys.exit(BENCHMARK.main())

and :data:`REGISTRY` names that module. ``measure(args)`` is the whole benchmark as one JSON-ready dict, from the
parsed options (``args.settings`` is one of :data:`~mosaic_gym.bench.common.SETTINGS`; an option the user left
at ``None`` is filled from ``defaults[args.settings]``); ``figures(report)`` are its summary rows
(:func:`~mosaic_gym.bench.common.figure`: a measured value beside its bare baseline). The rest is shared:
``python -m mosaic_gym.bench.bench_<name> [--quick|--smoke] [its options] [--out FILE]`` (:meth:`Benchmark.main`)
prints the report; ``mosaic bench --only <name>`` (:mod:`mosaic_gym.bench.suite`) runs :meth:`Benchmark.run`,
the same parse and measure at the chosen settings, and puts the rows in one table.

Example:
    >>> from mosaic_gym.bench.common import figure
    >>> def measure(args):
    ...     return {"bench": "demo", "settings": args.settings, "items": args.items}
    >>> demo = Benchmark("demo", "a demonstration", measure, lambda r: [figure("items", r["items"], "items")],
    ...                  quick="3 items", smoke="1 item", defaults={"full": {"items": 10}, "quick": {"items": 3},
    ...                  "smoke": {"items": 1}}, options=lambda p: p.add_argument("--items", type=int))
    >>> demo.run("smoke")
    {'bench': 'demo', 'settings': 'smoke', 'items': 1}
    >>> demo.parse(["--quick", "--items", "5"]).items
    5
    >>> [row["value"] for row in demo.figures(demo.run())]
    [10]
    >>> select(["env", "site"])
    ['site', 'env']
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from mosaic_gym.bench.common import SETTINGS, add_settings_flags, emit, fill_defaults, settings_argv

#: Every benchmark ``mosaic bench`` knows, in the order it runs them: its name and the module that declares it
#: (as ``BENCHMARK``). A plain run takes those whose :attr:`Benchmark.suites` hold its settings; ``--only``
#: takes any of them.
REGISTRY = {
    "site": "mosaic_gym.bench.bench_site",
    "env": "mosaic_gym.bench.bench_env",
    "playwright": "mosaic_gym.bench.bench_playwright",
    "rollout": "mosaic_gym.bench.bench_rollout",
    "trainer": "mosaic_gym.bench.bench_trainer",
    "iteration": "mosaic_gym.bench.bench_iteration",
    "scale": "mosaic_gym.bench.bench_scale",
    "server": "mosaic_gym.bench.bench_server",
    "html": "mosaic_gym.bench.bench_html",
    "actions": "mosaic_gym.bench.bench_actions",
    "credit": "mosaic_gym.bench.bench_credit",
    "attention": "mosaic_gym.bench.bench_attention",
}

Report = dict[str, Any]
Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: what it measures, its summary rows, its settings and its own options.

    Attributes:
        name: its name in :data:`REGISTRY` and on ``mosaic bench --only``.
        help: one line for ``mosaic bench --help``: what it measures, beside what.
        measure: ``measure(args) -> report``, the whole benchmark as one JSON-ready dict.
        figures: ``figures(report) -> rows``, its rows of the ``mosaic bench`` table (none by default).
        quick: what ``--quick`` runs (its help); ``smoke`` likewise for ``--smoke``.
        defaults: per settings, the value of each option the user left at ``None``.
        options: ``options(parser)`` adds its own flags (``--quick``, ``--smoke`` and ``--out`` are shared).
        suites: the settings under which a plain ``mosaic bench`` runs it (``()``: only with ``--only``).
        torch: it imports torch: ``--threads`` sets torch's CPU threads, and ``mosaic bench`` loads torch (and
            records its threads and device) just before the first such benchmark.
        plot: ``plot(report, path) -> path`` writes a PNG: ``--plot FILE``, and ``plot_file`` in ``mosaic bench
            --out DIR``.
        failed: ``failed(report)`` says the report breaks a promise the benchmark checks: its command exits 1.
    """

    name: str
    help: str
    measure: Callable[[argparse.Namespace], Report]
    figures: Callable[[Report], Rows] = lambda report: []
    quick: str = "smaller settings"
    smoke: str = "the smallest settings: checks that it runs and reports"
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    options: Callable[[argparse.ArgumentParser], Any] | None = None
    suites: tuple[str, ...] = SETTINGS
    torch: bool = False
    plot: Callable[[Report, Path], Path] | None = None
    plot_file: str = ""
    failed: Callable[[Report], bool] | None = None

    def __post_init__(self) -> None:
        unknown = set(self.suites) - set(SETTINGS)
        if unknown:
            raise ValueError(f"benchmark {self.name!r}: unknown suites {sorted(unknown)}: choose among "
                             f"{', '.join(SETTINGS)}")
        if bool(self.plot) != bool(self.plot_file):
            raise ValueError(f"benchmark {self.name!r}: give both plot and plot_file, or neither")

    @property
    def module(self) -> str:
        """The module that declares it (``python -m`` runs it alone), by its name also when it runs as
        ``__main__``."""
        name = self.measure.__module__
        spec = getattr(sys.modules.get(name), "__spec__", None)
        return spec.name if name == "__main__" and spec is not None else name

    def parser(self) -> argparse.ArgumentParser:
        """Its command line: the module's docstring as the help, the settings flags, its options, ``--out``."""
        parser = argparse.ArgumentParser(prog=f"python -m {self.module}",
                                         description=inspect.getdoc(sys.modules[self.measure.__module__]),
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        add_settings_flags(parser, quick=self.quick, smoke=self.smoke)
        if self.options is not None:
            self.options(parser)
        if self.torch:
            parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
        if self.plot is not None:
            parser.add_argument("--plot", type=Path, metavar="FILE", help=f"also write the plot ({self.plot_file}) "
                                                                          "here")
        parser.add_argument("--out", type=Path, metavar="FILE", help="also write the JSON here")
        return parser

    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """Its options from ``argv``, each left at ``None`` filled from :attr:`defaults` for the chosen settings."""
        args = self.parser().parse_args(argv)
        return fill_defaults(args, {settings: self.defaults.get(settings, {}) for settings in SETTINGS})

    def measure_args(self, args: argparse.Namespace) -> Report:
        """:attr:`measure` on parsed ``args``, torch's threads set first where ``--threads`` says."""
        if self.torch and getattr(args, "threads", None):
            import torch

            torch.set_num_threads(args.threads)
        return self.measure(args)

    def run(self, settings: str = "full") -> Report:
        """The benchmark at ``settings`` (one of :data:`~mosaic_gym.bench.common.SETTINGS`), every option at its
        default: what ``mosaic bench`` runs."""
        return self.measure_args(self.parse(settings_argv(settings)))

    def main(self, argv: Sequence[str] | None = None) -> int:
        """``python -m mosaic_gym.bench.bench_<name>``: print the report as JSON (and write it to ``--out``);
        1 if it breaks a promise it checks (:attr:`failed`), else 0."""
        args = self.parse(argv)
        report = self.measure_args(args)
        emit(report, args.out)
        if self.plot is not None and args.plot is not None:
            self.plot(report, args.plot)
        return 1 if self.failed is not None and self.failed(report) else 0


def load(name: str) -> Benchmark:
    """The benchmark registered as ``name`` (imports its module); a clear error for an unknown name."""
    select([name])
    benchmark = importlib.import_module(REGISTRY[name]).BENCHMARK
    if benchmark.name != name:
        raise ValueError(f"{REGISTRY[name]} declares benchmark {benchmark.name!r}, registered as {name!r}")
    return benchmark


def select(only: Sequence[str] | None) -> list[str]:
    """The names of ``only`` (default: every registered benchmark) in :data:`REGISTRY`'s order; a clear error
    for an unknown one. (Which of them a plain run takes, :attr:`Benchmark.suites`, is known once each is
    loaded, at its turn: a module that imports torch must not load before the benchmarks that measure memory
    without it.)"""
    if not only:
        return list(REGISTRY)
    unknown = [name for name in only if name not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown benchmark {', '.join(unknown)}: choose among {', '.join(REGISTRY)}")
    return [name for name in REGISTRY if name in only]


def listing(width: int = 12) -> str:
    """Every registered benchmark's name and help line, and the runs of ``mosaic bench`` that leave it out
    (imports every benchmark module: seconds, for torch)."""
    lines = []
    for name in REGISTRY:
        benchmark = load(name)
        left_out = [s for s in SETTINGS if s not in benchmark.suites]
        note = "" if not left_out else (" (only with --only)" if len(left_out) == len(SETTINGS)
                                        else f" (not in a {'/'.join(left_out)} run without --only)")
        lines.append(textwrap.fill(benchmark.help + note, 112, initial_indent=f"  {name:<{width}}",
                                   subsequent_indent=" " * (2 + width)))
    return "\n".join(lines)
