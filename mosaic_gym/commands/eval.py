"""``mosaic eval``: Pass@(K,T) of an agent, written as CSV, Markdown, JSON and a K x T heatmap."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from algos.evaluate import PROTOCOLS, pass_at_kt
from algos.logs import SUFFIX
from envs import view
from .common import (Given, HelpFormatter, add_agent_args, add_config_flag, add_env_args, apply_config, add_flags, add_scale_args, build_agent,
                     int_list, make_env, make_pool, quiet_progress, shared_flags, wants_candidates)

DESCRIPTION = """\
Run an agent n times on each task and measure Pass@(K,T): the chance that at least one of K samples
answers correctly within T steps (the unbiased estimator of Chen et al. 2021, averaged over tasks), with
the mean sessions and steps used under each T.

  truncate  each sample runs once under the largest T; every smaller T is read from it
  rerun     each sample runs again under each T, the budget shown to the agent (env kwarg show_budget)
"""

EXAMPLES = """examples:
  mosaic eval --agent oracle --error-rate 0.3 --site-size 150 --ks 1,2,4 --ts 8,16,32,64 --eval-episodes 8 \\
      --out eval-oracle
  mosaic eval --agent random --candidates --ks 1,4 --ts 4,8,16 --eval-tasks 20 --out eval-random
  mosaic eval --config runs/mosaic/config.json --model runs/mosaic/final --protocol rerun --out eval-trained
  mosaic eval --agent http://127.0.0.1:8000/v1 --model Qwen/Qwen3-4B --ray --num-envs 64 --out eval-served

The tables go to OUT/passkt.csv (K rows, T columns), OUT/passkt.md (with the mean sessions and steps used
under each T), OUT/passkt.json (every run, and these arguments) and OUT/passkt.png (the heatmap); every run's
trajectory to OUT/eval.traj.jsonl.gz (mosaic view OUT shows them with the heatmap).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="Pass@(K,T) of an agent (oracle, random, LLM): a K x T table and heatmap",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    add_config_flag(p)
    add_env_args(p)
    g = p.add_argument_group("agent")
    add_agent_args(g)
    g.add_argument("--candidates", nargs=0, const=True, default=False, action=Given,
                   help="offer info['candidates'] (the random agent then picks among them; on for an LLM in "
                        "choose mode)")
    add_flags(g, ("seed",), {"seed": "(the agent and the runs: sample j of task i runs with seed+i*n+j)"})
    e = p.add_argument_group("Pass@(K,T)")
    e.add_argument("--ks", type=int_list, default="1,2,4", metavar="K,K,...", action=Given,
                   help="sampling breadths K")
    e.add_argument("--ts", type=int_list, default="4,8,16,32", metavar="T,T,...", action=Given,
                   help="step budgets T")
    e.add_argument("--protocol", default="truncate", choices=PROTOCOLS, action=Given,
                   help="truncate: one run under max T, read at each T; rerun: a run under each T")
    shared_flags()["eval_episodes"].add(e, "(mosaic eval: the samples n per task, at least the largest K)")
    shared_flags()["eval_tasks"].add(e, "(mosaic eval: spread evenly over the split)")
    add_flags(e, ("num_envs", "out", "no_progress"),
              {"out": "(default: eval): passkt.csv/.md/.json/.png and the trajectory log eval.traj.jsonl.gz"})
    # the older spellings of --eval-episodes and --eval-tasks
    e.add_argument("--n", dest="eval_episodes", type=int, default=argparse.SUPPRESS, action=Given,
                   help=argparse.SUPPRESS)
    e.add_argument("--tasks", dest="eval_tasks", type=int, default=argparse.SUPPRESS, action=Given,
                   help=argparse.SUPPRESS)
    e.add_argument("--no-log", nargs=0, const=True, default=False, action=Given,
                   help="do not log the trajectories (see them with mosaic view DIR)")
    add_scale_args(p)
    p.set_defaults(run=run, given=(), given_as={})


def spread(items: list[Any], count: int | None) -> list[Any]:
    """``count`` items spread evenly over ``items`` (all of them when ``count`` is None or larger).

    The builtin split lists its tasks by family and hops, so a spread covers every kind where a prefix would not.

    Example:
        >>> spread(list(range(10)), 3)
        [0, 3, 6]
    """
    if count is None or count >= len(items):
        return list(items)
    return [items[i * len(items) // count] for i in range(count)]


def run(args: argparse.Namespace) -> int:
    try:
        apply_config(args)
    except ValueError as err:  # a --config file that is not settings: one line naming it
        print(f"mosaic eval: {err}", file=sys.stderr)
        return 2
    if args.eval_tasks is not None and args.eval_tasks < 1:
        print("mosaic eval: --eval-tasks must be at least 1", file=sys.stderr)
        return 2
    if args.out is None:
        args.out = "eval"
    with quiet_progress(args.no_progress):  # every bar: indexing a corpus, and in the env workers too
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        candidates = {"candidates": True} if wants_candidates(args) else {}
        env = make_env(args, **candidates)
    except (TypeError, ValueError) as err:  # a bad env kwarg or value, explained by the env
        print(f"mosaic eval: {err}", file=sys.stderr)
        return 2
    pool = None
    try:
        agent = build_agent(args, env)
        task_ids = spread([task.id for task in view(env).tasks], args.eval_tasks)
        if args.ray:
            pool = make_pool(args, args.num_envs, **candidates)
        result = pass_at_kt(agent, env, ks=args.ks, ts=args.ts, n=args.eval_episodes, tasks=task_ids, protocol=args.protocol,
                            seed=args.seed, num_envs=args.num_envs, progress=not args.no_progress, pool=pool,
                            log_to=None if args.no_log else os.path.join(args.out, "eval" + SUFFIX))
    except (ValueError, RuntimeError) as err:  # RuntimeError: an inference server that stopped answering
        print(f"mosaic eval: {err}", file=sys.stderr)
        return 2
    finally:
        env.close()
        if pool is not None:
            pool.close()
    settings = {key: value for key, value in vars(args).items() if key not in ("run", "given", "given_as")}
    paths = result.save(args.out, metadata={"args": settings})
    print(result.markdown())
    print("wrote " + ", ".join(str(path) for path in paths.values()))
    if not args.no_log:
        print(f"trajectories: {os.path.join(args.out, 'eval' + SUFFIX)} (mosaic view {args.out})")
    return 0
