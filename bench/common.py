"""What every benchmark reports beside its numbers: the machine it ran on.

Example:
    >>> info = machine(["numpy"])
    >>> sorted(info)
    ['cpus', 'load_average_1min', 'packages', 'platform', 'processor', 'python']
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any, Sequence


def machine(packages: Sequence[str]) -> dict[str, Any]:
    """Platform, processor, CPU count, how busy the CPUs were (other work slows every number down), the Python
    version and the versions of ``packages`` (``None`` for one not installed)."""
    versions = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "packages": versions,
    }
