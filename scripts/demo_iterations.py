"""Does the embedded demo learn more with more RL iterations? Held-out success after 10, 20, ... iterations,
over seeds, paired.

Each seed is one ``mosaic train`` run (the demo's defaults, ``--seed K``) extended by ``--resume
--iterations N`` stage by stage: a run is deterministic, so its first 10 iterations are the 10-iteration run's,
and every stage is evaluated on the same held-out episodes (the same tasks and reset seeds) as its warm start.
So per seed the stages differ only in the iterations run, and the comparisons are paired by seed. After each
stage the run's ``summary.json`` is kept as ``summary_itN.json``; a stage already kept is not run again (run
the command again to finish a stopped study).

Writes ``OUT/results.json``, ``OUT/results.md`` (held-out success, and the training batches' success over each
stage's last 10 iterations) and ``OUT/iterations.png`` (held-out success against iterations,
one line per seed and the mean).

Usage:
    python scripts/demo_iterations.py --seeds 4 --stages 10,20,40 --jobs 2 --out runs/demo-iterations
    python scripts/demo_iterations.py --out runs/demo-iterations --summary-only
    python scripts/demo_iterations.py --quick --out /tmp/demo-it     # tiny settings: the pipeline in a minute
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from algos.learn.config import write_text_atomic
from algos.study import interval

QUICK = ["--model", "tiny-100k", "--bc-episodes", "4", "--bc-epochs", "1", "--tasks-per-iter", "1",
         "--group-size", "2", "--num-envs", "2", "--eval-episodes", "1", "--eval-tasks", "2", "--log-groups", "0"]


def stage_summary(folder: Path, stage: int) -> Path:
    return folder / f"summary_it{stage}.json"


def run_seed(seed: int, stages: list[int], out: Path, extra: list[str], threads: int, log: Any) -> None:
    """Every stage of one seed's run that is not kept yet, in order (each a resume of the last)."""
    folder = out / f"seed{seed}"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    for stage in stages:
        if stage_summary(folder, stage).is_file():
            continue
        resume = (folder / "checkpoint.pt").is_file()
        cmd = [sys.executable, "-m", "mosaic_gym.cli", "train", "--seed", str(seed), "--iterations", str(stage),
               "--out", str(folder), *(["--resume"] if resume else []), *extra]
        log(f"seed {seed}: {stage} iterations ({'resuming' if resume else 'starting'})")
        with (out / f"seed{seed}.log").open("a") as f:
            done = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise SystemExit(f"seed {seed}: mosaic train stopped with exit code {done.returncode} at stage {stage}; "
                             f"its output is in {out / f'seed{seed}.log'} (run this command again to resume it)")
        text = (folder / "summary.json").read_text()
        if json.loads(text).get("iterations") != stage:
            raise SystemExit(f"seed {seed}: {folder / 'summary.json'} does not record {stage} iterations")
        write_text_atomic(stage_summary(folder, stage), text)  # (a kill leaves the stage not kept, not half kept)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise SystemExit(f"{path} is damaged ({err}): delete it and run the command again") from None


def summarize(out: Path, stages: list[int], seeds: int) -> dict[str, Any]:
    """Per stage, over the seeds that finished it: held-out success, RL's paired gain over the warm start, and
    the paired difference from the first stage; each a mean with its 95% t-interval over seeds."""
    runs: dict[int, dict[int, dict[str, Any]]] = {}
    for seed in range(seeds):
        for stage in stages:
            path = stage_summary(out / f"seed{seed}", stage)
            if path.is_file():
                runs.setdefault(seed, {})[stage] = _read(path)
    first = stages[0]
    warm = {s: r[first]["success_warm_start"]["success"] for s, r in runs.items() if first in r}
    history = {s: [json.loads(line)["success"] for line in (out / f"seed{s}" / "metrics.jsonl").read_text().splitlines()]
               for s in runs if (out / f"seed{s}" / "metrics.jsonl").is_file()}

    def train_success(seed: int, stage: int) -> float | None:  # the training batches' success, its last 10 iterations
        done = history.get(seed, [])[:stage]
        return float(np.mean(done[-10:])) if len(done) == stage else None
    rows = []
    for stage in stages:
        done = {s: r[stage] for s, r in runs.items() if stage in r}
        success = {s: r["success_final"]["success"] for s, r in done.items()}
        rows.append({
            "iterations": stage,
            "seeds": sorted(done),
            "success": interval(list(success.values())),
            "gain_over_warm_start": interval([success[s] - warm[s] for s in success if s in warm]),
            f"minus_{first}_iterations": interval([success[s] - runs[s][first]["success_final"]["success"]
                                                  for s in success if first in runs[s]]),
            "sessions": interval([r["success_final"]["sessions"] for r in done.values()]),
            "train_success_last_10": interval([train_success(s, stage) for s in done]),
            f"train_success_last_10_minus_{first}": interval(
                [train_success(s, stage) - train_success(s, first) for s in done
                 if train_success(s, stage) is not None and train_success(s, first) is not None]),
            "per_seed": {str(s): round(v, 4) for s, v in success.items()},
        })
    return {"stages": stages, "warm_start": interval(list(warm.values())),
            "warm_start_per_seed": {str(s): round(v, 4) for s, v in warm.items()}, "rows": rows}


def _cell(c: dict[str, Any], signed: bool = True) -> str:
    """``mean ± half-width``; a difference (``signed``) shows its sign."""
    if c["mean"] is None:
        return "n/a"
    return f"{c['mean']:{'+' if signed else ''}.3f}" + (f" ± {c['ci95']:.3f}" if c["ci95"] is not None else "")


def markdown(results: dict[str, Any]) -> str:
    first = results["stages"][0]
    lines = [f"Held-out success after the warm start: {results['warm_start']['mean']:.3f} "
             f"(± {results['warm_start']['ci95'] or 0:.3f}, {results['warm_start']['n']} seeds). "
             f"Means over seeds with 95% t-intervals; differences paired by seed.", "",
             f"| RL iterations | seeds | held-out success | gain over warm start | minus {first} iterations | "
             f"training success, last 10 iterations | minus at {first} |",
             "|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        lines.append(f"| {row['iterations']} | {len(row['seeds'])} | {_cell(row['success'], signed=False)} | "
                     f"{_cell(row['gain_over_warm_start'])} | {_cell(row[f'minus_{first}_iterations'])} | "
                     f"{_cell(row['train_success_last_10'], signed=False)} | {_cell(row[f'train_success_last_10_minus_{first}'])} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    xs = [0] + [r["iterations"] for r in results["rows"]]
    for seed, warm in results["warm_start_per_seed"].items():
        ys = [warm] + [r["per_seed"].get(seed, np.nan) for r in results["rows"]]
        ax.plot(xs, ys, color="0.7", marker=".", lw=1)
    means = [results["warm_start"]["mean"]] + [r["success"]["mean"] for r in results["rows"]]
    halves = [results["warm_start"]["ci95"] or 0] + [r["success"]["ci95"] or 0 for r in results["rows"]]
    ax.errorbar(xs, means, yerr=halves, color="C0", marker="o", capsize=3, label="mean over seeds, 95% CI")
    ax.set_xlabel("RL iterations (0: warm start)")
    ax.set_ylabel("held-out success")
    ax.set_title("mosaic train (demo defaults): more iterations")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/demo-iterations"), help="the study's folder")
    p.add_argument("--seeds", type=int, default=4, help="seeds 0..N-1, one run each (default 4)")
    p.add_argument("--stages", default="10,20,40", help="iterations at which to evaluate, increasing (default 10,20,40)")
    p.add_argument("--jobs", type=int, default=1, help="seeds trained at once, each in its own process (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny settings (the pipeline, not a result)")
    p.add_argument("--summary-only", action="store_true", help="only rebuild the results from the kept stages")
    args = p.parse_args(argv)
    try:
        stages = [int(s) for s in args.stages.split(",")]
    except ValueError:
        stages = []
    if not stages or stages != sorted(set(stages)) or stages[0] < 1:
        p.error(f"--stages {args.stages!r}: give increasing iteration counts >= 1, e.g. 10,20,40")
    if args.seeds < 1 or args.jobs < 1:
        p.error("--seeds and --jobs must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        extra = QUICK if args.quick else []
        with ThreadPoolExecutor(args.jobs) as pool:
            for future in [pool.submit(run_seed, s, stages, args.out, extra, threads, print) for s in range(args.seeds)]:
                future.result()
    results = summarize(args.out, stages, args.seeds)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "results.md").write_text(markdown(results))
    plot(results, args.out / "iterations.png")
    print(markdown(results))


if __name__ == "__main__":
    main()
