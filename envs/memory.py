"""The process's own peak resident memory: what a run's metrics and the benchmarks' child processes report.

Example:
    >>> peak_rss_mib() > 0
    True
"""

from __future__ import annotations

import sys

__all__ = ["peak_rss_mib"]


_highest: float | None = None  # the highest figure read so far in this process


def peak_rss_mib() -> float | None:
    """This process's peak resident memory so far, in MiB; None where there is none (Windows).

    On Linux, the kernel's high-water mark of this process's own memory (``VmHWM`` in ``/proc/self/status``):
    ``getrusage``'s ``ru_maxrss`` carries the parent's peak across ``exec``, so a process started by a large one
    (a benchmark that loaded a corpus, a study's driver) would report that one's. Elsewhere ``ru_maxrss``.
    The kernel records its mark lazily (a reading is the larger of the mark and the resident size now), so a
    reading can be lower than an earlier one taken at the height (seen once in a test): the figure is the
    highest read so far in this process, and never falls.
    """
    global _highest
    now = _read_peak()
    if now is not None:
        _highest = now if _highest is None else max(_highest, now)
    return _highest


def _read_peak() -> float | None:
    try:
        with open("/proc/self/status") as status:
            return round(int(next(line.split()[1] for line in status if line.startswith("VmHWM:"))) / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)  # (bytes on macOS, KiB on Linux)
