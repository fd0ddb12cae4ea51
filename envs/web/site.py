"""What every website the agents browse offers: pages by path, a search page, tasks, and mentions.

A :class:`Site` is the offline web of one environment. Two kinds exist: the procedurally generated builtin
site (:mod:`envs.web.builtin`) and a user's own corpus (:mod:`envs.web.corpus`). Both serve HTML by path,
so the text backend and the Playwright backend show the same pages; the search page ``/search?q=...`` is
rendered here, once, for every kind of site. The kinds import this base and it knows none of them:
:func:`envs.web.loader.load_site` picks one.

Example:
    >>> from envs.web import load_site
    >>> site = load_site("builtin", site_seed=0, site_size=120)
    >>> html = site.render("/search?q=" + site.tasks[0].question.split()[0])
    >>> html.startswith("<!DOCTYPE html>")
    True
"""

from __future__ import annotations

import html as html_lib
import urllib.parse
from abc import ABC, abstractmethod
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from .types import Document, SearchResult, Task, normalize_answer

# docs/contract.md names normalize_answer here; it lives in envs.web.types with the records it compares.
__all__ = ["SEARCH_PATH", "SEARCH_RESULTS", "Site", "normalize_answer"]

SEARCH_PATH = "/search"
SEARCH_RESULTS = 10


class Site(ABC):
    """A website: HTML pages by path, a search page over them, and the tasks asked about them.

    Subclasses implement :meth:`documents`, :meth:`page_html` and provide ``tasks``; everything else
    (search page, rendering by URL, task lookup) is shared here.
    """

    name: str = "site"
    tasks: tuple[Task, ...] = ()

    @abstractmethod
    def documents(self) -> Iterator[Document]:
        """Every page's path, title and plain text, in a fixed order (the search index reads this)."""

    @abstractmethod
    def page_html(self, path: str) -> str | None:
        """The HTML of the page at ``path`` (no query string), or ``None`` when there is no such page."""

    def mentions(self, text: str) -> tuple[tuple[str, str], ...]:
        """Answer-like values that ``text`` mentions, as ``(value, kind)`` in order of first appearance.

        The env offers ``answer(...)`` candidates only from mentions in text the agent has seen. The base
        class knows no vocabulary: it finds page titles.
        """
        return self._title_mentions(text)

    def _title_mentions(self, text: str) -> tuple[tuple[str, str], ...]:
        found = [(text.find(t), t) for t in self._titles() if t and t in text]
        return tuple((t, "title") for _, t in sorted(found))

    @lru_cache(maxsize=1)
    def _titles(self) -> tuple[str, ...]:
        return tuple(sorted({d.title for d in self.documents()}))

    # --- search -------------------------------------------------------------------------------------
    @property
    def index(self):
        """The BM25 index over :meth:`documents`, made on first use: mapped from the index saved at
        :meth:`index_location` when it matches, else built (and saved there)."""
        if getattr(self, "_index", None) is None:
            from .search import SearchIndex  # here, not at the top: bm25s loads only once a site is searched

            location = self.index_location()
            folder, fingerprint = location if location is not None else (None, "")
            self._index = SearchIndex(list(self.documents()), folder, fingerprint)
        return self._index

    def index_location(self) -> tuple[Path, str] | None:
        """Where this site's search index is saved, and the fingerprint of what it is built from (a saved
        index of another fingerprint is rebuilt); ``None`` keeps the index in memory (a generated site
        builds it in well under a second)."""
        return None

    def search(self, query: str, k: int = SEARCH_RESULTS) -> list[SearchResult]:
        """The ``k`` best pages for ``query`` (BM25 over titles and text)."""
        return self.index.search(query, k)

    # --- rendering by URL ---------------------------------------------------------------------------
    def local_path(self, url: str) -> str | None:
        """The site path that serves the absolute ``url`` (a corpus document's own URL), or ``None`` when no
        page of this site has it: the env then refuses it as outside the site. The base class has none."""
        return None

    def render(self, url: str) -> str | None:
        """The HTML served at ``url`` (a path with an optional query), or ``None`` for a missing page."""
        parts = urllib.parse.urlsplit(url)
        path = urllib.parse.unquote(parts.path) or "/"
        if path == SEARCH_PATH:
            query = urllib.parse.parse_qs(parts.query).get("q", [""])[0]
            return self.search_page_html(query)
        return self.page_html(path)

    def search_page_html(self, query: str) -> str:
        """The search page for ``query``: a form, then numbered results with title, path and snippet."""
        q = html_lib.escape(query)
        items = "".join(
            f'<li><a href="{html_lib.escape(r.path)}">{html_lib.escape(r.title)}</a>'
            f'<p class="url">{html_lib.escape(r.path)}</p><p>{html_lib.escape(r.snippet)}</p></li>'
            for r in self.search(query)
        )
        body = f"<ol>{items}</ol>" if items else "<p>No results.</p>"
        return (
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Search: {q}</title></head><body>'
            f'<form action="{SEARCH_PATH}"><input name="q" value="{q}"></form>'
            f"<h1>Search: {q}</h1>{body}</body></html>"
        )

    @staticmethod
    def search_url(query: str) -> str:
        return SEARCH_PATH + "?" + urllib.parse.urlencode({"q": query})

    # --- tasks --------------------------------------------------------------------------------------
    def task(self, task_id: str) -> Task:
        """The task with this id; a clear error naming the known ids otherwise."""
        for t in self.tasks:
            if t.id == task_id:
                return t
        known = ", ".join(t.id for t in self.tasks[:5])
        raise KeyError(f"no task {task_id!r} on site {self.name!r} (known ids start: {known}, ...)")

    def tasks_for(self, split: str | None = None, hops: int | tuple[int, int] | None = None) -> list[Task]:
        """Tasks of a split (``None``: all) whose ``hops`` is ``hops`` or within the ``(lo, hi)`` range."""
        if isinstance(hops, int):
            hops = (hops, hops)
        return [
            t
            for t in self.tasks
            if (split is None or t.split == split) and (hops is None or hops[0] <= t.hops <= hops[1])
        ]
