"""``mosaic bench``: run the benchmarks, print one table, write ``bench.json`` and the plots.

The benchmarks are installed with the package (:mod:`mosaic_gym.bench`), so the command works in any install,
not only in a clone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bench.common import add_settings_flags

DESCRIPTION = """\
Run the benchmarks and print one table: every figure beside its bare baseline (the same work with nothing of
ours around it, measured in the same run) and the ratio of the two. OUT/bench.json holds the machine, the
package versions, every benchmark's full report and the table's rows; OUT/env_scaling.png plots env steps/s
against site size and per-step cost against context length.

  site        builtin site generation, search and page renders
  env         env steps/s on the text backend beside the bare page-render rate
  playwright  Playwright backend step latency beside a bare browser's, and memory per env
  rollout     LLMAgent rollout tokens/s beside bare model.generate on the same prompts
  trainer     PolicyGradient.update tokens/s beside a bare forward + backward on the same tokens
  iteration   an RL iteration, phase by phase: broadcast, Mosaic (rollout), Mosaic (likelihood), and the
              study's fork preset (broadcast, Mosaic); peak RSS of a short mosaic train run beside a bare
              process building the same model
  scale       Ray env pool steps/s with 1 and 2 workers beside the local pool (Playwright, text), and Ray's
              overhead per step (needs the ray extra)
  server      ServerAgent against a real transformers serve: env steps/s with 8 requests in flight beside 1
              (needs the serving extra)

Each also runs alone, with more options: python -m mosaic_gym.bench.bench_<name> --help
"""

EXAMPLES = """examples:
  mosaic bench --quick                      # about 3 minutes on two shared cores
  mosaic bench --smoke                      # about 2.5 minutes: every benchmark runs and reports, figures too
                                            # short to trust (most of it starting Ray, a model server, Chromium)
  mosaic bench --only iteration --quick     # seconds: the RL iteration rows alone, the fork preset's included
  mosaic bench --out bench-results          # the full run
  mosaic bench --only env,trainer --threads 2
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run the benchmarks: a table of figures beside their bare baselines, JSON and plots",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings_flags(p, quick="small settings: about 3 minutes on two shared cores, half of it starting Ray "
                                "workers and a model server (twice)",
                       smoke="the smallest settings: about 2.5 minutes on two shared cores, nearly all of it "
                             "starting processes (Ray, a model server, Chromium, the memory run's); checks that "
                             "every benchmark runs and reports, its figures are too short to trust")
    p.add_argument("--only", type=lambda text: [n.strip() for n in text.split(",") if n.strip()], default=None,
                   metavar="NAME,...", help="run only these benchmarks, e.g. env,trainer (default: all)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads for rollout and trainer (default: 1 with --quick or --smoke, "
                        "else torch's choice)")
    p.add_argument("--out", type=Path, default=Path("bench-results"), metavar="DIR",
                   help="folder for bench.json and the PNG plot (default: bench-results)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..bench import suite

    try:
        suite.select(args.only)
    except ValueError as err:
        print(f"mosaic bench: {err}", file=sys.stderr)
        return 2
    result = suite.run_suite(settings=args.settings, only=args.only, threads=args.threads, out=args.out,
                             progress=not args.no_progress)
    print(suite.summary(result))
    print("wrote " + ", ".join(result["files"]))
    return 1 if result["errors"] else 0
