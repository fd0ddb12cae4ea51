"""``mosaic bench``'s Playwright and server benchmarks at smoke size (a real Chromium; a real
``transformers serve``): each reports its rows beside their baselines.

Speeds depend on the machine, so nothing here asserts one (tests/test_bench.py checks the suite's report).
"""

from __future__ import annotations

from helpers import bench_smoke


def test_server_and_playwright_benches_report(tmp_path):
    result = bench_smoke(tmp_path, ("playwright", "server"))
    server = result["benchmarks"]["server"]
    assert all(runs[f"in_flight_{n}"]["steps"] > 0 for runs in server["modes"].values() for n in (1, 8))
