"""``mosaic view RUN_DIR``: see a run's trajectories (session trees, steps, credit) in a browser."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .common import HelpFormatter

PORT = 8002  # (8000: transformers serve and vLLM; 8001: mosaic site serve)

if TYPE_CHECKING:
    from mosaic_gym.viewer import Problems

DESCRIPTION = """\
Show the trajectory logs (*.traj.jsonl.gz) under RUN_DIR. The page opens on the run's summary: its curves
(metrics.jsonl: training success, sessions, steps, and KL, entropy, clip fraction, unequal groups and probe_*
metrics when logged; held-out success before and after RL from summary.json), the groups where Mosaic's credit
differs most from broadcast's, and Pass@(K,T) heatmaps (passkt.json). A group shows its trajectories side by
side, each session coloured by its advantage (Mosaic's and broadcast's, with its contribution D). The list of
trajectories filters by task, success, sessions, iteration, group and "credit differs"; one trajectory shows
its session tree (compactions as a chain, forks as branches) with each session's credit, and each session's
steps (actions, errors, tool results) with the summary or fork task it started from and its handoff.

Lines of a log that cannot be shown (too long, not JSON, nested too deep, an unknown format_version, fields
missing, session ids not 0..n-1) are skipped, each named as file:line on stderr and on the page.

Logs come from `mosaic rollout --out DIR`, `mosaic eval --out DIR` and `mosaic train` (OUT/trajectories/).
"""

EXAMPLES = """examples:
  mosaic rollout --agent oracle --fork --compact-at 0.5 --session-max-tokens 1500 \\
      --env-kwargs '{"families": "compare"}' --episodes 3 --out runs/look
  mosaic view runs/look                        # serves http://127.0.0.1:8002/ until Ctrl-C
  mosaic view runs/mosaic --html mosaic.html   # one self-contained file to share (works offline)
  mosaic view runs/look --screenshot view.png  # a PNG of the page (headless Chromium)
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("view", help="see a run's trajectories: session trees, steps, credit (a web page)",
                              description=DESCRIPTION, epilog=EXAMPLES, formatter_class=HelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (any depth of logs below it) or one log file")
    p.add_argument("--port", type=int, default=PORT,
                   help="port on 127.0.0.1 (0: any free port; 8000 is left to inference servers, 8001 to mosaic "
                        "site serve)")
    p.add_argument("--html", metavar="OUT", default=None, help="write one static HTML file instead of serving")
    p.add_argument("--screenshot", metavar="PNG", default=None,
                   help="write a PNG of the page instead of serving, the group whose credits differ most opened "
                        "(without credit: the trajectory with the most sessions)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from algos.logs import LogError

    from mosaic_gym import viewer

    if args.html and args.screenshot:
        print("mosaic view: give --html or --screenshot, not both", file=sys.stderr)
        return 2
    try:
        if args.html:
            problems = viewer.Problems()
            out = viewer.write_html(args.run_dir, args.html, problems)
            _report(problems)
            print(f"wrote {out}")
            return 0
        if args.screenshot:
            print(f"wrote {viewer.screenshot(args.run_dir, args.screenshot)}")
            return 0
        server = viewer.ViewerServer(args.run_dir, args.port)
        _report(server.problems)
    except (FileNotFoundError, LogError, ValueError) as err:
        print(f"mosaic view: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the port is taken
        print(f"mosaic view: cannot listen on 127.0.0.1:{args.port} ({err}); try --port 0", file=sys.stderr)
        return 2
    print(f"{len(server.entries)} trajectories: {server.url} (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _report(problems: Problems) -> None:
    """Each line the page could not show, one line each on stderr."""
    for line in problems.report():
        print(f"mosaic view: {line}", file=sys.stderr)
