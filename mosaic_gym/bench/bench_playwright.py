"""Benchmark the Playwright backend: env step latency beside the bare cost of showing the same page, and memory.

One run, one Chromium. The env (``backend="playwright"``) steps through a scripted sequence of actions
(search, open a result, scroll, find, open a link, search again, open, answer; then the next episode). After
every step that showed a page, the same page is shown twice more in a bare browser context of the same
browser, interleaved so both see the same machine load: ``page.goto`` with a route that fulfils the
pre-rendered HTML, and ``page.set_content(html)``; both wait for ``load``, as the backend does. Each timed
operation starts once the page shown before it has painted. Steps a second count step and reset time only.
The text backend runs the same script for reference. Memory: the summed RSS, PSS and USS of this process
and every process it started (Playwright's driver and Chromium), read from ``/proc``, with 1 env and with N
envs sharing the browser; then the private memory (USS) of each extra bare browser context showing the same
page (``set_content``, nothing else), the least one more env could cost.

Prints one JSON object (and writes it to ``--out``).

Usage:
    python -m mosaic_gym.bench.bench_playwright          # builtin site of 500 entities, 240 steps, 1 vs 5 envs
    python -m mosaic_gym.bench.bench_playwright --quick  # 150 entities, 48 steps, 1 vs 3 envs
    python -m mosaic_gym.bench.bench_playwright --smoke  # 150 entities, 8 steps, 1 vs 2 envs
    python -m mosaic_gym.bench.bench_playwright --site tests/fixtures/corpus_html --out bench_playwright.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any


import gymnasium as gym
from playwright.sync_api import Browser, Page

import envs  # noqa: F401  (registers the environments)
from mosaic_gym.bench.common import Recorder, at_least, figure, machine, webqa_env
from mosaic_gym.bench.registry import Benchmark
from envs.actions import format_action
from envs.playwright_backend import ORIGIN, PlaywrightBackend, child_processes
from envs.web import Task

ENV_ID = "mosaic/WebQA-Single-v0"
PACKAGES = ("playwright", "gymnasium", "lxml")
TARGET_RATIO = 1.5
TARGET_MIB_PER_ENV = 100
MIB = 1024 * 1024
# Two animation frames: the page just shown has painted, so the next timed operation starts on an idle browser
# (as it would after an agent's think time) instead of paying for the last one's rendering.
# Pages without JavaScript (the backend's default) never run the callbacks, so they are not settled this way:
# see settle().
SETTLE = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def settle(page: Page | None, javascript: bool) -> None:
    """Wait for two animation frames where the page runs scripts; a page without them has nothing to wait for
    (and ``page.evaluate`` of a promise there would wait forever: it has no timeout), nor has no page (a
    backend with scripts on closes each view's tab once read)."""
    if javascript and page is not None:
        page.evaluate(SETTLE)


def playwright_backend(env: gym.Env) -> PlaywrightBackend:
    """The backend of ``env`` made with ``backend="playwright"``, which this benchmark drives itself; a
    ``TypeError`` for another backend."""
    backend = webqa_env(env).backend
    if not isinstance(backend, PlaywrightBackend):
        raise TypeError(f"the env runs a {type(backend).__name__}, not a PlaywrightBackend")
    return backend


def browser_of(page: Page) -> Browser:
    """The browser that ``page``'s context belongs to (a context Playwright launched persistent has none)."""
    browser = page.context.browser
    if browser is None:
        raise RuntimeError("the env's page is in a persistent browser context: there is no browser to open a "
                           "bare context in")
    return browser


def script(task: Task) -> list[str]:
    """One episode's actions: five of the eight show a page; the last answers, ending the episode."""
    query = task.search_queries[0] if task.search_queries else task.question
    return [
        format_action("search", query),
        format_action("open", 1),
        format_action("scroll", "down"),
        format_action("find", query.split()[0]),
        format_action("open", 2),
        format_action("search", f"{query} history"),
        format_action("open", 2),
        format_action("answer", "I do not know"),
    ]


def make_env(args: argparse.Namespace, backend: str) -> gym.Env:
    # A large window and budget: the script, not the env's limits, decides when an episode ends.
    return gym.make(ENV_ID, site=args.site, site_size=args.site_size, backend=backend, max_steps=10_000,
                    session_max_tokens=1_000_000)


def step_times(args: argparse.Namespace, backend: str, bare: "Bare | None" = None) -> dict[str, Any]:
    """Run the script for ``args.steps`` steps; with ``bare``, show every page again in the bare context."""
    env = make_env(args, backend)
    recorder = Recorder(webqa_env(env).backend)
    page_steps: list[float] = []
    all_steps: list[float] = []
    resets: list[float] = []
    bare_goto: list[float] = []
    bare_set: list[float] = []
    seed = 0
    spent = 0.0
    while len(all_steps) < args.steps:
        start = time.perf_counter()
        _, info = env.reset(seed=seed)
        resets.append(time.perf_counter() - start)
        task = envs.view(env).task(info["task_id"])
        for action in script(task):
            recorder.urls.clear()
            start = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            elapsed = time.perf_counter() - start
            spent += elapsed
            all_steps.append(elapsed)
            if recorder.urls:
                page_steps.append(elapsed)
                if bare is not None:
                    shown = playwright_backend(env)
                    settle(shown.page, shown.javascript)
                    url = recorder.urls[-1]
                    html = envs.view(env).site.render(url)
                    if html is None:
                        raise RuntimeError(f"the site renders no page at {url}, which the env just showed")
                    goto_s, set_s = bare.show(url, html)
                    bare_goto.append(goto_s)
                    bare_set.append(set_s)
            if terminated or truncated or len(all_steps) >= args.steps:
                break
        seed += 1
    env.close()
    out = {
        "steps": len(all_steps),
        "page_steps": len(page_steps),
        "page_step_median_ms": ms(statistics.median(page_steps)),
        "step_median_ms": ms(statistics.median(all_steps)),
        "steps_per_s": round(len(all_steps) / spent, 2),
        "steps_per_s_with_resets": round(len(all_steps) / (spent + sum(resets)), 2),
        "reset_median_ms": ms(statistics.median(resets)),
    }
    if bare is not None:
        out["bare_goto_median_ms"] = ms(statistics.median(bare_goto))
        out["bare_set_content_median_ms"] = ms(statistics.median(bare_set))
    return out


class Bare:
    """A bare context of the backend's browser: the least Playwright work that shows a page."""

    def __init__(self, backend: PlaywrightBackend):
        assert backend.page is not None, "start an episode first"
        self.html = ""
        self.javascript = backend.javascript  # the same page settings as the env's, for a fair baseline
        self.context = browser_of(backend.page).new_context(service_workers="block",
                                                            java_script_enabled=self.javascript)
        self.context.route("**/*", self.serve)
        self.goto_page = self.context.new_page()
        self.set_page = self.context.new_page()

    def serve(self, route: Any) -> None:
        if route.request.url.startswith(ORIGIN + "/"):
            route.fulfill(status=200, content_type="text/html; charset=utf-8", body=self.html)
        else:
            route.abort("blockedbyclient")

    def show(self, url: str, html: str) -> tuple[float, float]:
        self.html = html
        start = time.perf_counter()
        self.goto_page.goto(ORIGIN + url, wait_until="load")
        goto_s = time.perf_counter() - start
        settle(self.goto_page, self.javascript)
        start = time.perf_counter()
        self.set_page.set_content(html, wait_until="load")
        set_s = time.perf_counter() - start
        settle(self.set_page, self.javascript)
        return goto_s, set_s


def memory() -> dict[str, int]:
    """Bytes of RSS, PSS and USS (private) summed over this process and every process it started (driver,
    Chromium). Summed RSS counts Chromium's shared code once per process; PSS shares it out; USS leaves it out."""
    pids = [os.getpid(), *child_processes("")]
    totals = {"Rss": 0, "Pss": 0, "Private_Clean": 0, "Private_Dirty": 0}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in totals:
                        totals[key] += int(value.split()[0]) * 1024
        except OSError:
            continue  # ended while we looked
    return {"rss": totals["Rss"], "pss": totals["Pss"], "uss": totals["Private_Clean"] + totals["Private_Dirty"],
            "processes": len(pids)}


def memory_per_env(args: argparse.Namespace) -> dict[str, Any]:
    """Memory with 1 env, then with ``args.envs`` envs, each after a reset and a few page-showing steps; then,
    beside the first env, with 1 and with ``args.envs`` bare browser contexts showing that env's page."""
    opened: list[gym.Env] = []
    samples = {}
    for count in (1, args.envs):
        while len(opened) < count:
            env = make_env(args, "playwright")
            _, info = env.reset(seed=len(opened))
            for action in script(envs.view(env).task(info["task_id"]))[:5]:
                env.step(action)
            opened.append(env)
        time.sleep(0.5)  # let freshly started renderer processes settle before reading their memory
        samples[count] = {**memory(), "chromium_processes": len(child_processes())}
    first_backend = playwright_backend(opened[0])
    first = first_backend.page
    if first is None:
        raise RuntimeError("the first env has no page after its steps: its browser could not be brought back")
    html, browser = first.content(), browser_of(first)
    for env in opened[1:]:
        env.close()
    bare: list[Any] = []
    bare_samples = {}
    for count in (1, args.envs):
        while len(bare) < count:
            context = browser.new_context(service_workers="block",
                                          java_script_enabled=first_backend.javascript)
            context.new_page().set_content(html, wait_until="load")
            bare.append(context)
        time.sleep(0.5)
        bare_samples[count] = memory()
    for context in bare:
        context.close()
    opened[0].close()
    one, many = samples[1], samples[args.envs]
    out: dict[str, Any] = {"envs": args.envs}
    for kind in ("rss", "pss", "uss"):
        out[f"{kind}_1_env_mib"] = mib(one[kind])
        out[f"{kind}_{args.envs}_envs_mib"] = mib(many[kind])
        out[f"{kind}_per_extra_env_mib"] = mib((many[kind] - one[kind]) / (args.envs - 1))
    out["chromium_processes_1_env"] = one["chromium_processes"]
    out[f"chromium_processes_{args.envs}_envs"] = many["chromium_processes"]
    # The least one more env could cost: a browser context with one page showing the same page, nothing else.
    out["bare_uss_per_extra_context_mib"] = mib((bare_samples[args.envs]["uss"] - bare_samples[1]["uss"])
                                                / (args.envs - 1))
    out["target_mib_per_extra_env"] = TARGET_MIB_PER_ENV
    out["note"] = ("summed RSS counts the shared Chromium code each process maps once per process; PSS shares "
                   "it out and USS (private memory) leaves it out, so USS per extra env is what one more env costs")
    return out


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def mib(size: float) -> float:
    return round(size / MIB, 1)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", default="builtin", help="'builtin' or a corpus folder")
    parser.add_argument("--site-size", type=int, default=None, help="builtin entities (default 500; quick 150)")
    parser.add_argument("--steps", type=int, default=None, help="env steps to time (default 240; quick 48)")
    parser.add_argument("--envs", type=at_least(2, ": memory per extra env compares 1 env with N"), default=None,
                        help="envs for the memory test (default 5; quick 3)")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark, as ``args`` (its command line's) set it, as one JSON-ready dict."""
    machine_before = machine(PACKAGES)
    text = step_times(args, "text")
    # The bare context lives in the same browser as the env, which a held-open backend keeps running.
    holder = make_env(args, "playwright")
    holder.reset(seed=0)
    bare = Bare(playwright_backend(holder))
    playwright = step_times(args, "playwright", bare)
    bare.context.close()
    holder.close()
    playwright["ratio_to_bare_goto"] = round(playwright["page_step_median_ms"] / playwright["bare_goto_median_ms"], 2)
    playwright["ratio_to_bare_set_content"] = round(
        playwright["page_step_median_ms"] / playwright["bare_set_content_median_ms"], 2)
    playwright["target_ratio"] = TARGET_RATIO
    return {
        "bench": "playwright_backend",
        "machine": {**machine_before, "load_average_1min_after": round(os.getloadavg()[0], 2)},
        "config": {"env_id": ENV_ID, "site": args.site, "site_size": args.site_size, "steps": args.steps,
                   "settings": args.settings},
        "text": text,
        "playwright": playwright,
        "memory": memory_per_env(args),
    }


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows: page-step latency beside a bare browser's, steps/s beside the text backend's, memory."""
    pw, memory = result["playwright"], result["memory"]
    return [
        figure("Playwright env step that shows a page, median", pw["page_step_median_ms"], "ms",
               "bare page.goto of the same HTML, same browser", pw["bare_goto_median_ms"]),
        figure("Playwright env step that shows a page, median", pw["page_step_median_ms"], "ms",
               "bare page.set_content of the same HTML", pw["bare_set_content_median_ms"]),
        figure("Playwright env steps/s (scripted episodes)", pw["steps_per_s"], "steps/s",
               "text backend, same script", result["text"]["steps_per_s"]),
        figure(f"memory per extra env (USS, {memory['envs']} envs)", memory["uss_per_extra_env_mib"], "MiB",
               "bare browser context showing the same page", memory["bare_uss_per_extra_context_mib"]),
    ]


BENCHMARK = Benchmark(
    "playwright", "Playwright backend step latency beside a bare browser's, and memory per env", measure, figures,
    quick="a smaller site, fewer steps and envs", smoke="a smaller site, 8 steps, 2 envs",
    defaults={"full": dict(site_size=500, steps=240, envs=5), "quick": dict(site_size=150, steps=48, envs=3),
              "smoke": dict(site_size=150, steps=8, envs=2)}, options=options)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
