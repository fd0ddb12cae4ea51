"""Progress bars that ``TQDM_DISABLE`` silences when it is set, not only when tqdm was imported.

tqdm reads its ``TQDM_*`` variables once, when it is imported, so a command's ``--no-progress`` (which sets
``TQDM_DISABLE`` while the command runs, for the processes it starts too) would not silence the bars of code
already imported in the same process. Every bar of this project comes from :func:`progress_bar`.

Example:
    >>> import io, os
    >>> out = io.StringIO()
    >>> os.environ["TQDM_DISABLE"] = "1"
    >>> for _ in progress_bar(range(3), file=out):
    ...     pass
    >>> del os.environ["TQDM_DISABLE"]
    >>> out.getvalue()
    ''
"""

from __future__ import annotations

import os
from typing import Any

from tqdm.auto import tqdm

__all__ = ["progress_bar"]


def progress_bar(*args: Any, **kwargs: Any) -> tqdm:
    """``tqdm(*args, **kwargs)``, disabled while ``TQDM_DISABLE`` is set to anything but ``""`` or ``0``."""
    if os.environ.get("TQDM_DISABLE", "") not in ("", "0"):
        kwargs["disable"] = True
    return tqdm(*args, **kwargs)
