"""The offline web: sites, their search, and the text browser."""

from .site import Document, GoldStep, SearchResult, Site, Task, load_site, normalize_answer

__all__ = ["Document", "GoldStep", "SearchResult", "Site", "Task", "load_site", "normalize_answer"]
