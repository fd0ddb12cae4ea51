"""Benchmark the env: text-backend steps a second with a scripted agent, beside the bare page-render rate.

Per builtin site size, the oracle (compacting and forking) plays episodes and its actions are recorded; the
same actions are then replayed through ``env.step`` and timed. Three copies of the site (same seed and size,
byte-identical pages) keep the passes apart: the oracle plays on the first; the env replays on the second,
whose pages no one has rendered (``cold``: every page met for the first time is rendered, searched and
converted inside the step), then again on the now-filled caches (``warm``, best of ``repeat``: the steady state
of a training run, whose groups revisit the same pages); the bare baseline renders every distinct page the
replay showed through ``site.render`` plus ``html_to_view`` on the third. ``ratio`` is env steps/s over bare
pages/s: above 1, a step costs less than rendering one page. A cold step's time is split, as measured inside
the pass, into showing pages (the backend) and the env's own work (parsing, contexts, mentions, info).

Context length: one session (window ``window``, large enough that nothing compacts) reads multi-part pages
(search, open, scroll down to the end, find, scroll back up) from an empty context to near its window; the same
``block`` of reading steps is timed from snapshots at several context lengths (fastest of ``block_repeat``).
Beside each, the time to copy a string as long as the block's last observation: the observation is the whole
context, so that copy is the one part of a step that must grow with it.

Prints one JSON object (and writes it to ``--out``); ``--plot`` writes steps/s against site size and per-step
cost against context length as a PNG.

Usage:
    python -m mosaic_gym.bench.bench_env                 # sites of 1000, 3000 and 10000 entities; a 32k window
    python -m mosaic_gym.bench.bench_env --quick         # sites of 300 and 1000; a 16k-token window
    python -m mosaic_gym.bench.bench_env --smoke         # a site of 150; a 4k-token window; a few steps
    python -m mosaic_gym.bench.bench_env --out env.json --plot env.png
"""

from __future__ import annotations

import gc
import itertools
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TypedDict


import gymnasium as gym

import envs  # noqa: F401  (registers the environments)
from agents import OracleAgent
from mosaic_gym.bench.common import Recorder, figure, machine, webqa_env
from mosaic_gym.bench.registry import Benchmark
from envs.actions import format_action
from envs.backends import TextBackend
from envs.web.browser import CHUNK_TOKENS, html_to_view
from envs.web.builtin import BuiltinSite

ENV_ID = "mosaic/WebQA-v0"
PACKAGES = ("gymnasium", "lxml", "bm25s", "numpy")
TARGET_STEPS_PER_S = 5000
COPIES = 20  # observation copies timed together: one alone is too short to time steadily


class Config(TypedDict):
    """One settings' sizes: the site sizes, the oracle steps replayed and the replays timed; the context window,
    the block of actions repeated near it and its repeats."""

    sizes: tuple[int, ...]
    steps: int
    repeat: int
    window: int
    block: int
    block_repeat: int


QUICK: Config = {"sizes": (300, 1000), "steps": 600, "repeat": 2, "window": 16384, "block": 8, "block_repeat": 10}
FULL: Config = {"sizes": (1000, 3000, 10000), "steps": 3000, "repeat": 3, "window": 32768, "block": 12,
                "block_repeat": 30}
SMOKE: Config = {"sizes": (150,), "steps": 40, "repeat": 1, "window": 4096, "block": 4, "block_repeat": 1}
CONFIGS: dict[str, Config] = {"full": FULL, "quick": QUICK, "smoke": SMOKE}


@dataclass
class Episode:
    """A recorded episode: its reset seed and the actions taken."""

    seed: int
    actions: list[str]


def fresh_site(size: int, seed: int) -> BuiltinSite:
    """A new copy of the site with its search index built (untimed) and no page rendered yet."""
    site = BuiltinSite(seed=seed, size=size)
    site.index  # noqa: B018  (built here so that no timed step pays for it)
    return site


def record(site: BuiltinSite, steps: int) -> list[Episode]:
    """Oracle episodes (compacting at half the window, forking sub-questions) until ``steps`` steps."""
    env = gym.make(ENV_ID, site=site)
    agent = OracleAgent(env, compact_at=0.5, fork=True)
    episodes: list[Episode] = []
    total = 0
    while total < steps:
        seed = len(episodes)
        observation, info = env.reset(seed=seed)
        agent.reset()
        actions: list[str] = []
        done = False
        while not done:
            action = agent.act(observation, info)
            observation, _, terminated, truncated, info = env.step(action)
            actions.append(action)
            done = terminated or truncated
        episodes.append(Episode(seed, actions))
        total += len(actions)
    env.close()
    return episodes


def replay(env: gym.Env, episodes: list[Episode]) -> tuple[float, float]:
    """Seconds spent in ``env.step`` and in ``env.reset`` replaying ``episodes``."""
    step_s = reset_s = 0.0
    clock = time.perf_counter
    for episode in episodes:
        start = clock()
        env.reset(seed=episode.seed)
        reset_s += clock() - start
        for action in episode.actions:
            start = clock()
            env.step(action)
            step_s += clock() - start
    return step_s, reset_s


def bare_render(site: BuiltinSite, urls: list[str]) -> float:
    """Seconds to render ``urls`` (pages not rendered before) with ``site.render`` and ``html_to_view``."""
    start = time.perf_counter()
    for url in urls:
        html = site.render(url)
        if html is not None:
            html_to_view(html, url)
    return time.perf_counter() - start


def bench_size(size: int, seed: int, steps: int, repeat: int) -> dict[str, Any]:
    """Cold and warm replays of about ``steps`` oracle steps, and the bare renders of the pages they showed."""
    episodes = record(BuiltinSite(seed=seed, size=size), steps)
    total = sum(len(e.actions) for e in episodes)

    env = gym.make(ENV_ID, site=fresh_site(size, seed))
    recorder = Recorder(webqa_env(env).backend)
    # Each timed pass starts from a collected heap: the sites just built leave garbage whose collection would
    # otherwise land in whichever pass comes next.
    gc.collect()
    cold_s, cold_reset_s = replay(env, episodes)
    view_s, page_steps, urls = recorder.seconds, len(recorder.urls), list(dict.fromkeys(recorder.urls))
    warm = (float("inf"), 0.0)
    for _ in range(repeat):
        gc.collect()
        warm = min(warm, replay(env, episodes))
    env.close()
    site = fresh_site(size, seed)
    gc.collect()
    bare_s = bare_render(site, urls)

    bare_per_s = len(urls) / bare_s
    cold_per_s = total / cold_s
    warm_per_s = total / warm[0]
    return {
        "size": size,
        "episodes": len(episodes),
        "steps": total,
        "page_steps": page_steps,
        "distinct_pages": len(urls),
        "cold_steps_per_s": round(cold_per_s, 1),
        "cold_steps_per_s_with_resets": round(total / (cold_s + cold_reset_s), 1),
        # A cold step's time split: showing pages (the backend: render, convert, cache) and the env's own work.
        "cold_view_us_per_step": round(1e6 * view_s / total, 1),
        "cold_env_us_per_step": round(1e6 * (cold_s - view_s) / total, 1),
        "warm_steps_per_s": round(warm_per_s, 1),
        "warm_steps_per_s_with_resets": round(total / sum(warm), 1),
        "warm_us_per_step": round(1e6 * warm[0] / total, 1),
        "reset_us": round(1e6 * warm[1] / len(episodes), 1),
        "bare_pages_per_s": round(bare_per_s, 1),
        "bare_us_per_step": round(1e6 * bare_s / total, 1),
        "ratio_cold": round(cold_per_s / bare_per_s, 3),
        "ratio_warm": round(warm_per_s / bare_per_s, 3),
    }


def reading(site: BuiltinSite, skip: int = 0) -> Iterator[str]:
    """Actions that read the site's multi-part pages one after another (after the first ``skip`` of them), each
    valid in any state: search the title, open the page, scroll down to its end, find a word, scroll back up."""
    backend = TextBackend(site)
    pages = (v for v in (backend.view(d.path) for d in site.documents()) if v is not None and len(v.chunks) > 1)
    for view in itertools.islice(pages, skip, None):
        yield format_action("search", view.title)
        yield format_action("open", view.url)
        yield from [format_action("scroll", "down")] * (len(view.chunks) - 1)
        yield format_action("find", view.title.split()[0])
        yield format_action("scroll", "up")


def context_scaling(size: int, seed: int, window: int, block: int, repeat: int) -> dict[str, Any]:
    """Per-step time of the same ``block`` reading steps, started at context lengths from empty to the window.

    One session reads pages until its context reaches each level (0, 1/8, 1/4, 1/2 and 3/4 of ``window``, and
    as near the window as the block fits) and is snapshotted there. Then, ``repeat`` times, the env takes the
    block from every snapshot in turn (caches warm; the levels interleaved so that they share the machine's
    load) and each step's fastest time counts. Beside each level: the time to copy a string as long as the
    observation, the one cost of a step that must grow with the context (the observation is the whole context).
    """
    site = fresh_site(size, seed)
    env = gym.make(ENV_ID, site=site, max_steps=1_000_000, session_max_tokens=window)
    actions = list(itertools.islice(reading(site), block))
    filler = reading(site, skip=len(actions))

    def take_block(snapshot: Any, fastest: list[float]) -> tuple[str, dict[str, Any]]:
        env.reset(options={"snapshot": snapshot})
        for i, action in enumerate(actions):
            start = time.perf_counter()
            observation, _, _, _, info = env.step(action)
            fastest[i] = min(fastest[i], time.perf_counter() - start)
            if info["action_error"] or info["context_tokens"] > window:
                raise RuntimeError(f"the reading block failed or overflowed the window at {action}")
        return observation, info

    observation, info = env.reset(seed=seed)
    snapshots = [envs.view(env).snapshot()]
    starts = [info["context_tokens"]]
    growth = take_block(snapshots[0], [float("inf")] * len(actions))[1]["context_tokens"] - starts[0]
    env.reset(options={"snapshot": snapshots[0]})
    for level in (window // 8, window // 4, window // 2, 3 * window // 4, window - growth - 4 * CHUNK_TOKENS):
        while info["context_tokens"] < level:
            observation, _, _, _, info = env.step(next(filler))
        snapshots.append(envs.view(env).snapshot())
        starts.append(info["context_tokens"])
    fastest = [[float("inf")] * len(actions) for _ in snapshots]
    ends = [0] * len(snapshots)
    copies = [float("inf")] * len(snapshots)
    gc.collect()
    for _ in range(repeat + 1):
        for k, snapshot in enumerate(snapshots):
            observation, info = take_block(snapshot, fastest[k])
            ends[k] = info["context_tokens"]
            start = time.perf_counter()
            for _ in range(COPIES):
                observation + " "  # noqa: B018  (a copy as long as the last observation)
            copies[k] = min(copies[k], (time.perf_counter() - start) / COPIES)
    env.close()
    rows = [
        {"context_tokens": start, "block_end_tokens": end, "us_per_step": round(1e6 * sum(times) / len(times), 1),
         "steps_per_s": round(len(times) / sum(times), 1), "context_copy_us": round(1e6 * copy, 1)}
        for start, end, times, copy in zip(starts, ends, fastest, copies)
    ]
    return {
        "size": size,
        "window": window,
        "block": actions,
        "repeat": repeat,
        "levels": rows,
        "short_steps_per_s": rows[0]["steps_per_s"],
        "long_steps_per_s": rows[-1]["steps_per_s"],
        "ratio_long_to_short": round(rows[-1]["steps_per_s"] / rows[0]["steps_per_s"], 3),
    }


def measure(args: Any) -> dict[str, Any]:
    """The whole benchmark as one JSON-ready dict, at ``args.settings`` (``quick`` and ``smoke`` have smaller
    sites and windows) with the site seed ``args.seed``."""
    settings, seed = args.settings, args.seed
    config = CONFIGS[settings]
    sizes = [bench_size(size, seed, config["steps"], config["repeat"]) for size in config["sizes"]]
    largest = sizes[-1]
    return {
        "bench": "env",
        "settings": settings,
        "machine": machine(PACKAGES),
        "config": {"env_id": ENV_ID, "seed": seed, "agent": "OracleAgent(compact_at=0.5, fork=True)",
                   **config},
        "sites": sizes,
        "context": context_scaling(largest["size"], seed, config["window"], config["block"],
                                   config["block_repeat"]),
        "target_steps_per_s": TARGET_STEPS_PER_S,
        "meets_target": largest["warm_steps_per_s"] >= TARGET_STEPS_PER_S,
    }


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows: steps/s on the largest site (warm and cold) beside the bare page-render rate, and
    steps/s near the window beside steps/s at an empty context."""
    site, context = result["sites"][-1], result["context"]
    bare = "bare site.render + html_to_view, same pages"
    short, long = context["levels"][0], context["levels"][-1]
    return [
        figure(f"env steps/s, text backend, {site['size']} entities, warm caches", site["warm_steps_per_s"],
               "steps/s", bare, site["bare_pages_per_s"], "pages/s"),
        figure(f"env steps/s, text backend, {site['size']} entities, every page new", site["cold_steps_per_s"],
               "steps/s", bare, site["bare_pages_per_s"], "pages/s"),
        figure(f"env steps/s at {long['context_tokens']:,} context tokens ({context['window']:,} window)",
               long["steps_per_s"], "steps/s", f"the same steps at {short['context_tokens']:,} tokens",
               short["steps_per_s"]),
    ]


def plot(result: dict[str, Any], path: Path) -> Path:
    """Steps/s against site size (cold, warm, bare renders) and per-step cost against context length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [s["size"] for s in result["sites"]]
    for key, label in (("warm_steps_per_s", "env steps/s, warm caches"),
                       ("cold_steps_per_s", "env steps/s, pages first met"),
                       ("bare_pages_per_s", "bare site.render + html_to_view, pages/s")):
        left.plot(sizes, [s[key] for s in result["sites"]], marker="o", label=label)
    left.axhline(result["target_steps_per_s"], color="grey", linestyle=":",
                 label=f"target: {result['target_steps_per_s']:,} steps/s")
    left.set(xscale="log", yscale="log", xlabel="builtin site size (entities)", ylabel="per second",
             title="Steps/s against site size")
    left.set_xticks(sizes, [f"{size:,}" for size in sizes])
    left.minorticks_off()
    left.legend(fontsize=8)
    levels = result["context"]["levels"]
    tokens = [r["context_tokens"] for r in levels]
    right.plot(tokens, [r["us_per_step"] for r in levels], marker="o", label="env step")
    right.plot(tokens, [r["context_copy_us"] for r in levels], marker="o", label="copying the observation string")
    right.legend(fontsize=8)
    right.set(xlabel="context length when the block starts (tokens)", ylabel="microseconds per step", ylim=(0, None),
              title=f"Per-step cost against context length ({result['context']['size']:,} entities)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


BENCHMARK = Benchmark(
    "env", "env steps/s on the text backend beside the bare page-render rate; per-step cost against context "
    "length", measure, figures, quick="sites of 300 and 1000 entities, a 16k window",
    smoke="a site of 150 entities, a 4k window, a few steps",
    options=lambda parser: parser.add_argument("--seed", type=int, default=0, help="builtin site seed"),
    plot=plot, plot_file="env_scaling.png")


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
