"""Benchmark ServerAgent against a real ``transformers serve``: env steps/s with 1 and with 8 requests in flight.

A tiny model (saved here, with a chat template) is served by ``transformers serve`` on a loopback port, as it
comes (``plain``: requests run side by side, each its own generate call) and with ``--continuous-batching``
(requests in flight share the server's forward passes, as in vLLM and SGLang). The same 8 text envs run the
same episodes through :class:`algos.rollout.Collector` with a :class:`agents.server.ServerAgent` that keeps at
most 1, then at most 8, requests in flight. The figure is env steps/s at 8 against 1: what the overlap buys.

Usage:
    python -m mosaic_gym.bench.bench_server           # both servers; 8 two-step episodes, 64-token replies
    python -m mosaic_gym.bench.bench_server --smoke   # the plain server; 8 one-step episodes, tiny-1m
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import gymnasium as gym

import envs  # noqa: F401  (registers the environments)
from agents.models import TRANSCRIPT_CHAT_TEMPLATE, make_tiny
from agents.server import ServerAgent, TransformersServer
from algos.rollout import Collector, Request
from mosaic_gym.bench.common import figure, machine
from mosaic_gym.bench.registry import Benchmark

ENV_ID = "mosaic/WebQA-v0"
PACKAGES = ("transformers", "torch", "fastapi", "uvicorn")
IN_FLIGHT = (1, 8)
MODES = {"plain": False, "continuous": True}  # the server's --continuous-batching
DEFAULTS = {
    "full": {"episodes": 8, "max_steps": 2, "max_tokens": 64, "size": "1m", "modes": "plain,continuous"},
    "quick": {"episodes": 8, "max_steps": 1, "max_tokens": 32, "size": "1m", "modes": "plain,continuous"},
    "smoke": {"episodes": 8, "max_steps": 1, "max_tokens": 4, "size": "1m", "modes": "plain"},
}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=None, help="episodes timed at each concurrency")
    parser.add_argument("--max-steps", type=int, default=None, help="budget of each episode")
    parser.add_argument("--max-tokens", type=int, default=None, help="tokens a reply may have")
    parser.add_argument("--size", default=None, choices=["1m", "3m", "10m"], help="the tiny model served")
    parser.add_argument("--modes", default=None, help="servers to measure: plain, continuous (comma-separated)")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = {"site_size": 150, "split": "test", "max_steps": args.max_steps}
    requests = [Request(seed=s, options={}, group=s) for s in range(args.episodes)]
    warm_up = [Request(seed=100 + s, options={"max_steps": 1}) for s in range(max(IN_FLIGHT))]
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown server modes {unknown}: choose among {', '.join(MODES)}")
    result: dict[str, Any] = {"bench": "server", "settings": args.settings, "machine": machine(PACKAGES),
                              "model": f"tiny-{args.size}", "envs": max(IN_FLIGHT), "episodes": args.episodes,
                              "max_tokens": args.max_tokens, "modes": {}}
    with tempfile.TemporaryDirectory() as folder:
        texts = ['search("Edra Vane") open(1) answer("Oskarde")'] * 40
        make_tiny(folder, texts, size=args.size, chat_template=TRANSCRIPT_CHAT_TEMPLATE)
        collector = Collector(lambda: gym.make(ENV_ID, **kwargs), max(IN_FLIGHT))
        for mode in modes:
            out = result["modes"][mode] = {}
            with TransformersServer(folder, continuous_batching=MODES[mode]) as server:
                for in_flight in IN_FLIGHT:
                    agent = ServerAgent(server.base_url, server.model, max_tokens=args.max_tokens,
                                        max_in_flight=in_flight)
                    collector.run(agent, warm_up)  # the server's first passes
                    start = time.perf_counter()
                    trajectories = collector.run(agent, requests)
                    seconds = time.perf_counter() - start
                    agent.close()
                    steps = sum(int(t.tree["steps_used"]) for t in trajectories)
                    out[f"in_flight_{in_flight}"] = {"seconds": round(seconds, 3), "steps": steps,
                                                     "steps_per_s": round(steps / seconds, 2)}
        for env in collector.envs:
            env.close()
    return result


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows, one per server: steps/s with 8 requests in flight beside 1 in flight, same episodes."""
    rows = []
    for mode, out in result["modes"].items():
        many, one = out[f"in_flight_{max(IN_FLIGHT)}"], out[f"in_flight_{min(IN_FLIGHT)}"]
        server = "transformers serve" + (" --continuous-batching" if MODES[mode] else "")
        rows.append(figure(f"ServerAgent, {max(IN_FLIGHT)} requests in flight ({server}, {result['model']})",
                           many["steps_per_s"], "env steps/s", f"{min(IN_FLIGHT)} in flight", one["steps_per_s"]))
    return rows


BENCHMARK = Benchmark(
    "server", "ServerAgent against a real transformers serve: env steps/s with 8 requests in flight beside 1 "
    "(needs the serving extra)", measure, figures, quick="fewer, shorter episodes",
    smoke="the plain server, one-step episodes, 4-token replies: checks the report only", defaults=DEFAULTS,
    options=options)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
