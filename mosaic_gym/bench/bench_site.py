"""Benchmark the offline web: builtin site generation, search (cold and cached) and page rendering.

Prints one JSON object (and writes it to ``--out``): the machine, package versions, and per site size the
seconds to generate the site, list its documents and build its search index, search queries a second
(cold: first time each query is asked; cached: asked again), and pages a second through ``site.render`` plus
``html_to_view``. Search and view rates are the best of three runs, the least disturbed by other work on the
machine; ``site.render`` is timed once, on pages not rendered before.

Usage:
    python bench/bench_site.py            # sizes 2000 and 10000
    python bench/bench_site.py --quick    # sizes 300 and 1000, fewer queries and pages
    python bench/bench_site.py --smoke    # size 150, a few queries and pages
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


from mosaic_gym.bench.common import add_settings_flags, emit, figure, machine, settings_argv
from envs.web import Site
from envs.web.browser import html_to_view
from envs.web.builtin import BuiltinSite
from envs.web.search import SearchIndex

PACKAGES = ("bm25s", "lxml", "numpy", "gymnasium")
REPEAT = 3


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def best_of(fn: Any, repeat: int = REPEAT, before: Any = None) -> tuple[Any, float]:
    """``fn()`` and its fastest time over ``repeat`` runs (``before()`` runs untimed first each time): the
    least disturbed by other work on a shared machine."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        value, seconds = timed(fn)
        times.append(seconds)
    return value, min(times)


def queries_for(site: Site, documents: list, count: int) -> list[str]:
    """Distinct queries of the kinds agents send: task questions, page titles, titles with a relation word."""
    candidates = [t.question for t in site.tasks] + [d.title for d in documents]
    candidates += [f"{d.title} born" for d in documents]
    return list(dict.fromkeys(candidates))[:count]


def bench_size(size: int, seed: int, queries: int, pages: int) -> dict[str, Any]:
    site, generate_s = timed(lambda: BuiltinSite(seed=seed, size=size))
    documents, documents_s = timed(lambda: list(site.documents()))
    index, index_s = timed(lambda: SearchIndex(documents))
    asked = queries_for(site, documents, queries)
    _, cold_s = best_of(lambda: [index.search(q) for q in asked], before=index.cache_clear)
    _, cached_s = best_of(lambda: [index.search(q) for q in asked])

    step = max(1, len(documents) // pages)
    paths = [d.path for d in documents[::step]][:pages]
    # Timed once: the site keeps recently rendered pages, so a second run would time its cache.
    htmls, render_s = timed(lambda: [site.render(p) for p in paths])
    views, view_s = best_of(lambda: [html_to_view(h, p) for h, p in zip(htmls, paths)])
    return {
        "size": size,
        "pages": len(documents),
        "tasks": len(site.tasks),
        "generate_s": round(generate_s, 3),
        "documents_s": round(documents_s, 3),
        "index_build_s": round(index_s, 3),
        "search": {
            "queries": len(asked),
            "cold_per_s": round(len(asked) / cold_s, 1),
            "cached_per_s": round(len(asked) / cached_s, 1),
        },
        "render": {
            "pages": len(paths),
            "mean_html_chars": round(sum(map(len, htmls)) / len(htmls)),
            "mean_chunks": round(sum(len(v.chunks) for v in views) / len(views), 2),
            "site_render_per_s": round(len(paths) / render_s, 1),
            "html_to_view_per_s": round(len(paths) / view_s, 1),
            "html_to_view_ms": round(1000 * view_s / len(paths), 3),
            "both_per_s": round(len(paths) / (render_s + view_s), 1),
        },
    }


#: Per settings: the site sizes, the queries searched and the pages rendered.
SIZES = {"full": ((2000, 10000), 1000, 1000), "quick": ((300, 1000), 200, 200), "smoke": ((150,), 20, 20)}


def run(settings: str = "full", seed: int = 0) -> dict[str, Any]:
    """The whole benchmark as one JSON-ready dict (``settings``: one of :data:`~mosaic_gym.bench.common.SETTINGS`)."""
    settings_argv(settings)
    sizes, queries, pages = SIZES[settings]
    return {
        "bench": "site",
        "settings": settings,
        "machine": machine(PACKAGES),
        "sites": [bench_size(size, seed, queries, pages) for size in sizes],
    }


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows for the largest site: generation and index seconds, search and render rates."""
    site = result["sites"][-1]
    size, search, render = site["size"], site["search"], site["render"]
    return [
        figure(f"generate the builtin site ({size} entities)", site["generate_s"], "s"),
        figure(f"build its search index ({site['pages']} pages)", site["index_build_s"], "s"),
        figure("search, first time a query is asked", search["cold_per_s"], "queries/s",
               "the same queries again (cached)", search["cached_per_s"]),
        figure("site.render + html_to_view, pages not rendered before", render["both_per_s"], "pages/s",
               "html_to_view alone on the same HTML", render["html_to_view_per_s"]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_settings_flags(parser, quick="sites of 300 and 1000, fewer queries and pages",
                       smoke="a site of 150, a few queries and pages")
    parser.add_argument("--seed", type=int, default=0, help="builtin site seed")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    emit(run(args.settings, args.seed), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
