"""One measurement of :mod:`mosaic_gym.bench.bench_site`'s corpus rows, run in a process of its own so that its
peak RSS is its own: ``python -m mosaic_gym.bench.bench_corpus_probe KIND CORPUS [N]`` prints one JSON object.

Kinds:
    build: load the corpus and build its search index (and save it beside the corpus).
    open: load the corpus and map the saved index; then search latency, cold and cached.
    bm25s: the bare baseline, ``bm25s.BM25().index`` over the same terms (what the index cost before).
    envs: N envs in this process on the corpus, each reset and searching: memory after one and after N.
    async: N envs in async worker processes (gymnasium AsyncVectorEnv): each worker's memory.
    async_in_memory: the same with every worker building its own index in memory (as before the saved index).
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from envs.memory import peak_rss_mib
from envs import view

SEARCHES = 200


def memory(pid: int | str = "self") -> dict[str, float]:
    """RSS, PSS (shared pages split between the processes that map them) and USS (pages of this process alone),
    in MiB, from ``/proc/<pid>/smaps_rollup`` (Linux); ``{}`` elsewhere."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return {}
    kb = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            kb[name] = int(rest.split()[0])
    mib = lambda *names: round(sum(kb.get(n, 0) for n in names) / 1024, 1)  # noqa: E731
    return {"rss_mib": mib("Rss"), "pss_mib": mib("Pss"), "uss_mib": mib("Private_Clean", "Private_Dirty")}


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def queries(site, count: int, seed: int = 0) -> list[str]:
    """Distinct queries of 2-4 words drawn from the corpus's own documents."""
    rng = random.Random(seed)
    docs = list(site.documents())
    out: set[str] = set()
    while len(out) < count:
        words = rng.choice(docs).text.split()
        out.add(" ".join(rng.sample(words, min(len(words), rng.randint(2, 4)))))
    return sorted(out)


def probe(kind: str, corpus: str, n: int = 1) -> dict[str, Any]:
    from envs.web.corpus import load_corpus

    if kind in ("build", "open"):
        site, load_s = timed(lambda: load_corpus(corpus))
        _, index_s = timed(lambda: site.index)
        out: dict[str, Any] = {"load_s": round(load_s, 3), "index_s": round(index_s, 3), "peak_rss_mib": peak_rss_mib(), **memory()}
        if kind == "open":
            asked = queries(site, SEARCHES)
            latencies = [timed(lambda q=q: site.search(q))[1] for q in asked]
            cached = [timed(lambda q=q: site.search(q))[1] for q in asked]
            latencies.sort()
            out["search_ms"] = {"median": round(1000 * latencies[len(latencies) // 2], 3),
                                "p99": round(1000 * latencies[int(len(latencies) * 0.99)], 3),
                                "max": round(1000 * latencies[-1], 3),
                                "cached_median": round(1000 * sorted(cached)[len(cached) // 2], 4)}
        return out
    if kind == "bm25s":
        import bm25s

        from envs.web.search import TITLE_WEIGHT, terms

        site, load_s = timed(lambda: load_corpus(corpus))

        def index() -> Any:
            tokens = [terms(f"{d.title} " * TITLE_WEIGHT + d.text) for d in site.documents()]
            bare = bm25s.BM25()
            bare.index(tokens, show_progress=False)
            return bare

        _, index_s = timed(index)
        return {"load_s": round(load_s, 3), "index_s": round(index_s, 3), "peak_rss_mib": peak_rss_mib()}
    if kind == "envs":
        import gymnasium as gym

        import envs  # noqa: F401  (registers the ids)

        made, after = [], []
        for i in range(n):
            env = gym.make("mosaic/WebQA-v0", site=corpus, split="all")
            env.reset(seed=i)
            env.step(f'search("{queries(view(env).site, 1, seed=i)[0]}")')
            made.append(env)
            after.append(memory()["rss_mib"])
        return {"envs": n, "rss_mib_after_each": after,
                "added_per_env_mib": round((after[-1] - after[0]) / max(1, n - 1), 2)}
    if kind in ("async", "async_in_memory"):
        import gymnasium as gym

        import envs  # noqa: F401  (registers the ids)

        if kind == "async_in_memory":  # the workers fork from here: each builds its own index, as before
            from envs.web.corpus import CorpusSite

            CorpusSite.index_location = lambda self: None  # type: ignore[method-assign]
        vec = gym.make_vec("mosaic/WebQA-v0", num_envs=n, vectorization_mode="async",
                           vector_kwargs={"shared_memory": False}, site=corpus, split="all")
        try:
            if not isinstance(vec, gym.vector.AsyncVectorEnv):  # its worker processes are what is measured
                raise RuntimeError(f"make_vec(vectorization_mode='async') gave {type(vec).__name__}, "
                                   "not an AsyncVectorEnv")
            vec.reset(seed=0)
            words = queries(load_corpus(corpus), n)
            vec.step([f'search("{q}")' for q in words])
            # AsyncVectorEnv starts its workers when it is made: every one has a pid
            workers = [memory(p.pid) for p in vec.processes if p.pid is not None]
        finally:
            vec.close()
        mean = lambda key: round(sum(w.get(key, 0) for w in workers) / len(workers), 1)  # noqa: E731
        return {"workers": n, "per_worker": {k: mean(k) for k in ("rss_mib", "pss_mib", "uss_mib")}}
    raise SystemExit(f"unknown probe {kind!r}: build, open, bm25s, envs, async or async_in_memory")


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))))
