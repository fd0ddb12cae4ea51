"""``mosaic study CLAIM``: the project's study, one command per claim (Mosaic vs broadcast where the policy
chooses its sessions, budgets, recovery), every arm and seed its own resumable run (:mod:`algos.study`)."""

from __future__ import annotations

import argparse

from .common import HelpFormatter, add_flags, at_least, quiet_progress

DESCRIPTION = """\
Run one claim of the study: both arms from the same warm start, with several seeds, then a results JSON,
a Markdown table and plots in OUT/CLAIM/. Seed k's warm start is computed once, in OUT/PRESET/warm-start/seedK,
and every (arm, seed) is a `mosaic train` run in OUT/PRESET/ARM/seedK that starts RL from it. Run the
command again to resume what was stopped (finished runs are kept, and the summary is rebuilt from whatever
has finished). Claims share runs: recovery reads the compaction runs,
and budgets adds one BudgetMix arm beside the compaction preset's Mosaic arm.

  compaction  Mosaic vs broadcast where compaction is optional on easy tasks and needed on long ones
  fork        Mosaic vs broadcast on compare tasks, forking the sub-questions or not
  budgets     RL's gain against the step budget T; BudgetMix against a fixed budget, Pass@(1,T) across T
  recovery    where RL's gain lies: recovering from errors, or better single steps
"""

EXAMPLES = """examples:
  mosaic study compaction --quick              # minutes: checks the pipeline, numbers mean nothing
  mosaic study compaction --seeds 3 --jobs 2   # the full claim (51 minutes on 2 shared cores)
  mosaic study recovery --seeds 3              # reuses the compaction runs
  mosaic study budgets --seeds 3 --out runs/study
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from algos.study import CLAIMS

    p = subparsers.add_parser("study", help="the study: Mosaic vs broadcast, budgets, recovery (seeds, intervals)",
                              description=DESCRIPTION, epilog=EXAMPLES, formatter_class=HelpFormatter)
    p.add_argument("claim", choices=sorted(CLAIMS), help="which claim to run")
    p.add_argument("--seeds", type=at_least(1, "give 1 or more seeds per arm"), default=3,
                   help="seeds per arm (at least 2 for an interval)")
    p.add_argument("--quick", action="store_true", help="tiny runs on a small site: checks the pipeline in minutes")
    p.add_argument("--iterations", type=at_least(0, "give 0 or more RL iterations"), default=None,
                   help="RL iterations per run (default: the preset's); more extends finished runs")
    p.add_argument("--jobs", type=at_least(1, "give 1 or more runs side by side"), default=1,
                   help="runs trained side by side, each in its own process")
    p.add_argument("--log-groups", type=at_least(0, "give 0 or more groups (0: none)"), default=None,
                   help="groups per iteration each run logs to its trajectories/ (default: mosaic train's; see "
                        "them with mosaic view OUT)")
    add_flags(p, ("out",), {"out": "(default: runs/study): the study's folder (runs and results)"})
    p.add_argument("--summary-only", action="store_true", help="rebuild the results from finished runs; run nothing")
    add_flags(p, ("no_progress",))
    p.set_defaults(run=run)


PRESET_OVERRIDES = ("iterations", "log_groups")
"""The flags of ``mosaic train`` that ``mosaic study`` takes too, unset by default: each run then keeps its
preset's value (:data:`algos.study.PRESETS`), not ``mosaic train``'s default."""


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        args.out = "runs/study"
    with quiet_progress(args.no_progress):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from algos.learn.checkpoint import CheckpointError
    from algos.learn.config import ConfigError
    from algos.logs import LogError
    from algos.study import markdown, run_claim, summarize

    try:
        if args.summary_only:
            results = summarize(args.claim, args.out, args.seeds, quick=args.quick)
        else:
            results = run_claim(args.claim, args.out, args.seeds, quick=args.quick, iterations=args.iterations,
                                jobs=args.jobs, log_groups=args.log_groups)
    except (LogError, CheckpointError, ConfigError) as err:  # a run's log, checkpoint or config.json that is
        # damaged, or holds what no run writes: each says which file
        raise SystemExit(f"mosaic study: {err}") from None
    print(markdown(results))
    print(f"results: {args.out}/{args.claim}/results.json, results.md, curves.png")
    return 0
