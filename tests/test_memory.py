"""A process's peak memory, as a run's metrics and the benchmarks' child processes report it (envs.memory)."""

from __future__ import annotations

import subprocess
import sys

from envs.memory import peak_rss_mib


def test_a_runs_memory_peak_is_its_own_not_its_parents():
    # getrusage's ru_maxrss survives exec: a process started by one holding 1 GiB would report 1 GiB. The child's
    # own peak (Python and the envs package imported) is far below that.
    held = b"\x01" * (1 << 30)
    code = "from envs.memory import peak_rss_mib; print(peak_rss_mib())"
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0 < child < 700, child
    assert peak_rss_mib() >= len(held) >> 20
