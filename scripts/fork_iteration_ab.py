"""One RL iteration of the study's fork preset, run by any checkout of this project from one saved warm start:
how docs/performance.md compares today's code with the code an issue was filed on, on the same trajectories.

The warm start (the fork preset's tiny model cloned on its 64 demonstrations, seed 0, as ``mosaic bench --only
iteration`` makes it) is saved once with ``--save-warm-start``; each run then loads it, builds the fork preset's
seed-0 settings from the checkout it is given (``--code``: its own ``algos``, ``agents`` and ``envs``, imported
from there), runs one iteration on one torch thread and prints one JSON line: the phases' seconds, the rollouts'
success, sessions and steps, and the loss (equal across two checkouts that ran the same trajectories).
``--measure-fraction`` is passed to a learner that has it (``PGConfig.measure_fraction``) and ignored by one that
predates it.

Usage (two checkouts side by side, one core each):
    git worktree add /tmp/filed 46f6b5a
    python scripts/fork_iteration_ab.py --save-warm-start /tmp/fork-warm
    python scripts/fork_iteration_ab.py --warm-start /tmp/fork-warm --code /tmp/filed --algo mosaic &
    python scripts/fork_iteration_ab.py --warm-start /tmp/fork-warm --code . --algo mosaic; wait
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--save-warm-start", metavar="DIR", help="warm-start the fork preset's model and save it "
                        "(model and tokenizer) to DIR, with this checkout's code; then exit")
    parser.add_argument("--warm-start", metavar="DIR", help="the saved warm start to run an iteration from")
    parser.add_argument("--code", default=str(ROOT),
                        help="the checkout whose code runs the iteration (default: this one)")
    parser.add_argument("--algo", choices=("broadcast", "mosaic"), default="mosaic")
    parser.add_argument("--measure-fraction", type=float, default=1.0,
                        help="PGConfig.measure_fraction where the checkout has it (default 1, the learner's)")
    args = parser.parse_args()
    if not args.save_warm_start and not args.warm_start:
        parser.error("give --save-warm-start DIR (once) or --warm-start DIR (each run)")
    sys.path.insert(0, str(Path(args.code).resolve() if args.warm_start else ROOT))  # (a warm start: this code's)

    import gymnasium as gym
    import torch

    import envs  # noqa: F401  (registers the environments)

    torch.set_num_threads(1)
    if args.save_warm_start:
        from mosaic_gym.bench.bench_iteration import preset_config, starting_policy

        config = preset_config(argparse.Namespace(settings="full"), "fork")
        model, tokenizer = starting_policy(config, gym.make(config.env_id, **config.env_kwargs), config.bc_episodes)
        model.save_pretrained(args.save_warm_start)
        tokenizer.save_pretrained(args.save_warm_start)
        return

    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from mosaic_gym.bench.bench_iteration import one_iteration

    try:  # (the study's presets moved into a package after 46f6b5a)
        from algos.study.presets import warm_start_configs
    except ImportError:
        from algos.study import warm_start_configs  # type: ignore[no-redef]
    with tempfile.TemporaryDirectory() as tmp:  # (the warm start's folder: unused, the saved one is loaded)
        config = warm_start_configs("fork", tmp, seeds=1, quick=False)[0]
    config = dataclasses.replace(config, iterations=1, algo=args.algo, estimator="rollout")
    if any(f.name == "measure_fraction" for f in dataclasses.fields(config.pg)):
        config = dataclasses.replace(config, pg=dataclasses.replace(config.pg, measure_fraction=args.measure_fraction))
    model = AutoModelForCausalLM.from_pretrained(args.warm_start, dtype=torch.float32).eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.warm_start)
    metrics = one_iteration(config, model, tokenizer, gym.make(config.env_id, **config.env_kwargs))
    kept = {k: v for k, v in metrics.items()
            if k.startswith("time_") or k in ("success", "sessions", "steps", "loss", "sequences_run")}
    print(json.dumps({"code": args.code, "algo": args.algo, "measure_fraction": args.measure_fraction, **kept}))


if __name__ == "__main__":
    main()
