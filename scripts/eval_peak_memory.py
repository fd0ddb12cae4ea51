"""Peak memory of a held-out evaluation, and where in the code the peak falls.

Evaluates a finished ``mosaic train`` run's final model on its own test tasks (``algos.learn.train.evaluate``) while a
thread samples this process's resident memory every 2 ms and, at each new peak, the main thread's stack.

Usage:
    python scripts/eval_peak_memory.py RUN [--num-envs N]
    MALLOC_MMAP_THRESHOLD_=65536 python scripts/eval_peak_memory.py RUN   # glibc returning large blocks at once
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import threading
import time
import traceback
from pathlib import Path

import gymnasium as gym
import torch

import envs  # noqa: F401  (registers the environments)
from agents.models import load_model
from algos.learn.config import read_config
from algos.rollout import Collector
from algos.learn.train import evaluate, make_agent

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished mosaic train run (its config.json and final/)")
    parser.add_argument("--num-envs", type=int, help="envs acting at once (default: the run's)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = read_config(args.run / "config.json")
    if args.num_envs:
        config.num_envs = args.num_envs
    model, tokenizer = load_model(str(args.run / "final"))
    agent = make_agent(config, model, tokenizer)
    collector = Collector(lambda: gym.make(config.env_id, **config.env_kwargs, split="test"), config.num_envs)
    main_thread, peak, where, done = threading.main_thread().ident, [0], [[]], threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = rss()
            if now > peak[0] + 5 * 2**20:
                stack = traceback.extract_stack(sys._current_frames()[main_thread])
                peak[0], where[0] = now, [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in stack[-12:]]
            time.sleep(0.002)

    floor = rss()
    thread = threading.Thread(target=sample)
    thread.start()
    start = time.perf_counter()
    result = evaluate(agent, collector, config, "held-out")
    seconds = time.perf_counter() - start
    done.set()
    thread.join()
    print(json.dumps({"floor_mib": floor >> 20, "peak_sampled_mib": peak[0] >> 20,
                      "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
                      "seconds": round(seconds, 1), "success": result["success"], "num_envs": config.num_envs,
                      "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
                      # equal digests: the same held-out results to the last digit (per task and every metric)
                      "result_sha256": hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()[:16]},
                     indent=2))
    print("peak at:\n  " + "\n  ".join(where[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
