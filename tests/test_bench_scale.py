"""``mosaic bench``'s scale benchmark at smoke size: Ray pools of 1 and 2 workers run the local pool's episodes,
on Playwright and on text.

Speeds depend on the machine, so nothing here asserts one (tests/test_bench.py checks the suite's report).
"""

from __future__ import annotations

from helpers import bench_smoke


def test_scale_bench_pools_run_the_local_pools_episodes(tmp_path):
    scale = bench_smoke(tmp_path, ("scale",))["benchmarks"]["scale"]
    assert all(scale[b][f"ray_{w}_workers"]["same_trajectories"] for b in ("playwright", "text") for w in (1, 2))
