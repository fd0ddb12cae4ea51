"""The README's screenshot of ``mosaic view`` (docs/viewer.png), reproducible: a small run folder, then a PNG.

The folder holds an oracle rollout that compacts and forks (``mosaic rollout --out``), an oracle evaluation with
errors (``mosaic eval --out``: the Pass@(K,T) heatmap) and, unless ``--no-train``, a short run of the CPU demo
(``mosaic train`` with 8 RL iterations: curves, held-out success, and sessions with their credit). The page is
shot in headless Chromium with the group whose credits differ most opened (``mosaic view --screenshot``).

    python scripts/viewer_screenshot.py --out runs/viewer-demo --png docs/viewer.png   # about 4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mosaic_gym import viewer
from mosaic_gym.cli import main


def build(out: Path, train: bool) -> None:
    env = ["--env-kwargs", '{"families": "compare"}', "--site-size", "150", "--session-max-tokens", "1500"]
    if main(["rollout", "--agent", "oracle", "--fork", "--compact-at", "0.5", "--episodes", "3", *env,
             "--out", str(out / "rollout")]) != 0:
        raise SystemExit("the rollout failed")
    if main(["eval", "--agent", "oracle", "--error-rate", "0.3", "--site-size", "150", "--ks", "1,2,4",
             "--ts", "4,8,16,32", "--n", "4", "--tasks", "8", "--out", str(out / "eval"), "--no-progress"]) != 0:
        raise SystemExit("the evaluation failed")
    if train:
        if main(["train", "--iterations", "8", "--no-progress", "--out", str(out / "train")]) != 0:
            raise SystemExit("the training run failed")


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/viewer-demo", help="the run folder to build (kept where it is)")
    p.add_argument("--png", default="docs/viewer.png", help="the screenshot")
    p.add_argument("--no-train", action="store_true", help="skip the short training run (no curves, no credit)")
    p.add_argument("--reuse", action="store_true", help="shoot the folder as it is; build nothing")
    args = p.parse_args()
    out = Path(args.out)
    if not args.reuse:
        build(out, train=not args.no_train)
    print(f"wrote {viewer.screenshot(out, args.png)}")


if __name__ == "__main__":
    cli()
