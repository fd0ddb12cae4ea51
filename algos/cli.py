"""The ``mosaic`` command line: ``train``, ``eval``, ``site build|serve`` and ``bench``.

Each subcommand lives in its own module under :mod:`algos.commands` with ``add_parser(subparsers)`` and
``run(args) -> int``; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "train": "algos.commands.train",
    "eval": "algos.commands.eval",
    "site": "algos.commands.site",
    "bench": "algos.commands.bench",
    "rollout": "algos.commands.rollout",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mosaic",
        description="mosaic-gym: multi-session agent environments and the learners that train LLM policies.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
            continue
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
