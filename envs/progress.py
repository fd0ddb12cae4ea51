"""Where :func:`~envs.web.progress.progress_bar` was: the web owns it now (its index build shows a bar), and this
name stays only until ``algos`` and ``mosaic_gym`` import :mod:`envs.web.progress`; then it goes."""

from .web.progress import progress_bar

__all__ = ["progress_bar"]
