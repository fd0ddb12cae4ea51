"""The offline web: sites, their search, and the text browser."""

from .loader import load_site
from .site import Site
from .types import Document, GoldStep, SearchResult, Task, normalize_answer

__all__ = ["Document", "GoldStep", "SearchResult", "Site", "Task", "load_site", "normalize_answer"]
