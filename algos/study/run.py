"""Running a claim: every (arm, seed) is one ``mosaic train`` run in its own folder, resumed where it stopped,
never run again once finished, side by side in worker processes when asked (:func:`run_claim`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


from algos.learn.config import TrainConfig
from algos.study.presets import run_configs, warm_start_configs
from algos.study.summary import finished, summarize


def run_claim(claim: str, out: str | Path, seeds: int = 3, quick: bool = False, iterations: int | None = None,
              jobs: int = 1, log: Any = print, log_groups: int | None = None) -> dict[str, Any]:
    """Run (or resume) every run of ``claim`` that has not finished, ``jobs`` at a time, then :func:`summarize`.

    Each seed's warm start runs first, once for all arms; then the arms' runs of that seed, which start RL from
    it. A run has finished when its ``summary.json`` records the iterations asked; any other run is resumed from
    its checkpoint (or started). With ``jobs > 1`` each run trains in its own process (torch threads split
    between them); the results are the same as run one after another (each run is deterministic alone).
    """
    todo: list[TrainConfig] = []  # an arm's run needs its warm_start_from to have finished first
    for arm, seed, config in run_configs(claim, out, seeds, quick, iterations, log_groups):
        if _needs_run(arm.name, seed, config, log):
            todo.append(config)
    needed = {c.warm_start_from for c in todo}
    for seed, config in enumerate(warm_start_configs(claim, out, seeds, quick)):
        # Its checkpoint is what the arms start from (a folder without it, e.g. a clone of committed results,
        # computes it again: the same warm start).
        if config.out not in needed:
            continue
        if not (Path(config.out) / "checkpoint.pt").is_file() and finished(Path(config.out)) is not None:
            log(f"warm start seed {seed}: computing it again, its checkpoint is not in {config.out}")
            todo.append(config)
        elif _needs_run("warm start", seed, config, log):
            todo.append(config)
    # Seed by seed, every arm of a seed together: a study stopped early still holds complete pairs.
    todo.sort(key=lambda c: (c.seed, c.warm_start_from is not None))
    if jobs <= 1 or len(todo) <= 1:
        for config in todo:
            _train_quietly(config)
    else:
        _run_parallel(todo, jobs, log)
    return summarize(claim, out, seeds, quick=quick)


def _run_parallel(todo: list[TrainConfig], jobs: int, log: Any) -> None:
    """Train ``todo`` in ``jobs`` processes, in its order, each run once the warm start it needs has finished."""
    import multiprocessing as mp
    import os
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    threads = max(1, (os.cpu_count() or 1) // jobs)
    pending = {c.out for c in todo}
    waiting = list(todo)
    running: dict[Future, TrainConfig] = {}
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        while waiting or running:
            for config in [c for c in waiting if c.warm_start_from not in pending][: jobs - len(running)]:
                waiting.remove(config)
                running[pool.submit(_train_quietly, config, threads)] = config
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                config = running.pop(future)
                future.result()  # a run that failed stops the study, with its error
                pending.discard(config.out)
                log(f"finished {config.out}")


def _needs_run(name: str, seed: int, config: TrainConfig, log: Any) -> bool:
    """Whether the run has not finished (its ``summary.json`` records the iterations asked); one that has not is
    set to resume from its checkpoint, if it has a ``config.json``."""
    folder = Path(config.out)
    done = finished(folder)
    if done is not None and done.get("iterations", -1) == config.iterations:
        log(f"{name} seed {seed}: finished ({folder})")
        return False
    config.resume = (folder / "config.json").exists()
    log(f"{name} seed {seed}: {'resuming' if config.resume else 'starting'} ({folder})")
    return True


def _train_quietly(config: TrainConfig, threads: int | None = None) -> None:
    """One run of the study (its report is its ``summary.json``)."""
    import torch

    from algos.learn.train import train

    if threads is not None:
        torch.set_num_threads(threads)
    train(config, log=lambda *a: None)
