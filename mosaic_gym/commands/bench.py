"""``mosaic bench``: run the benchmarks, print one table, write ``bench.json`` and the plots.

The benchmarks are installed with the package (:mod:`mosaic_gym.bench`), so the command works in any install,
not only in a clone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bench.common import add_settings_flags
from .common import quiet_progress

DESCRIPTION = """\
Run the benchmarks and print one table: every figure beside its bare baseline (the same work with nothing of
ours around it, measured in the same run) and the ratio of the two. OUT/bench.json holds the machine, the
package versions, every benchmark's full report and the table's rows; OUT/env_scaling.png plots env steps/s
against site size and per-step cost against context length.
"""

AFTER_LISTING = """
Each also runs alone, with more options: python -m mosaic_gym.bench.bench_<name> --help
"""


class _WithListing(argparse.RawDescriptionHelpFormatter):
    """Adds the registered benchmarks, each with its help line, below the description: read from their modules
    only when the help is printed, since importing them takes seconds (torch)."""

    def add_text(self, text: str | None) -> None:
        if text == DESCRIPTION:
            from ..bench.registry import listing

            text = f"{DESCRIPTION}\n{listing()}\n{AFTER_LISTING}"
        super().add_text(text)


EXAMPLES = """examples:
  mosaic bench --quick                      # about 2 minutes on two idle cores
  mosaic bench --smoke                      # about 1 minute: every benchmark runs and reports, figures too
                                            # short to trust (most of it starting Ray, a model server, Chromium)
  mosaic bench --only iteration --quick     # seconds: the RL iteration rows alone, the fork preset's included
  mosaic bench --out bench-results          # the full run: about 20 minutes on two idle cores
  mosaic bench --only env,trainer --threads 2
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run the benchmarks: a table of figures beside their bare baselines, JSON and plots",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=_WithListing,
    )
    add_settings_flags(p, quick="small settings: about 2 minutes on two idle cores, half of it starting Ray "
                                "workers and a model server (twice)",
                       smoke="the smallest settings: about 1 minute on two idle cores, nearly all of it "
                             "starting processes (Ray, a model server, Chromium, the memory run's); checks that "
                             "every benchmark runs and reports, its figures are too short to trust")
    p.add_argument("--only", type=lambda text: [n.strip() for n in text.split(",") if n.strip()], default=None,
                   metavar="NAME,...", help="run only these benchmarks, e.g. env,trainer (default: every "
                                            "one listed above that is part of the chosen run)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for the model benchmarks (default: 1 with --quick or --smoke, "
                        "else torch's choice)")
    p.add_argument("--out", type=Path, default=Path("bench-results"), metavar="DIR",
                   help="folder for bench.json and the PNG plot (default: bench-results)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars (the benchmarks' own too)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..bench import suite
    from ..bench.registry import select

    try:
        select(args.only)
    except ValueError as err:
        print(f"mosaic bench: {err}", file=sys.stderr)
        return 2
    with quiet_progress(args.no_progress):  # (the benchmarks' own bars too: warm starts, rollouts)
        result = suite.run_suite(settings=args.settings, only=args.only, threads=args.threads, out=args.out,
                                 progress=not args.no_progress)
    print(suite.summary(result))
    print("wrote " + ", ".join(result["files"]))
    return 1 if result["errors"] else 0
