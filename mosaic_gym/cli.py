"""The ``mosaic`` command line: ``train``, ``eval``, ``rollout``, ``site build|serve``, ``bench``, ``study``, ``view``.

Each subcommand lives in its own module under :mod:`mosaic_gym.commands` with ``add_parser(subparsers)`` and
``run(args) -> int``; this file only wires them together. A flag two commands take is defined once
(:mod:`mosaic_gym.commands.common`), and ``mosaic train``'s are built from its settings' dataclasses.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

COMMANDS = {
    "train": "mosaic_gym.commands.train",
    "eval": "mosaic_gym.commands.eval",
    "site": "mosaic_gym.commands.site",
    "bench": "mosaic_gym.commands.bench",
    "rollout": "mosaic_gym.commands.rollout",
    "study": "mosaic_gym.commands.study",
    "view": "mosaic_gym.commands.view",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mosaic",
        description="mosaic-gym: multi-session agent environments and the learners that train LLM policies.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        # No command is optional: one that fails to import is a broken install, and says so.
        importlib.import_module(module).add_parser(sub)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("mosaic-gym")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
