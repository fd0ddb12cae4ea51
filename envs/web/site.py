"""What every website the agents browse offers: pages by path, a search page, tasks, and mentions.

A :class:`Site` is the offline web of one environment. Two kinds exist: the procedurally generated builtin
site (:mod:`envs.web.builtin`) and a user's own corpus (:mod:`envs.web.corpus`). Both serve HTML by path,
so the text backend and the Playwright backend show the same pages; the search page ``/search?q=...`` is
rendered here, once, for every kind of site.

Example:
    >>> from envs.web import load_site
    >>> site = load_site("builtin", site_seed=0, site_size=120)
    >>> html = site.render("/search?q=" + site.tasks[0].question.split()[0])
    >>> html.startswith("<!DOCTYPE html>")
    True
"""

from __future__ import annotations

import html as html_lib
import os
import urllib.parse
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator

from ..checks import check_int, shown

SEARCH_PATH = "/search"
SEARCH_RESULTS = 10


@dataclass(frozen=True)
class GoldStep:
    """One step of a task's gold solution path, as the oracle takes it.

    Attributes:
        tool: ``"search"``, ``"open"``, ``"scroll"`` or ``"find"``.
        arg: the query, the page path, ``"down"``/``"up"``, or the text to find.
        expect: text the observation shows once this step is done (for ``scroll``: keep scrolling until it
            shows); ``""`` when the step only moves on.
        note: the fact this step establishes, in words, for notes and summaries ("" when none).
    """

    tool: str
    arg: str
    expect: str = ""
    note: str = ""


@dataclass(frozen=True)
class Task:
    """A BrowseComp-style question with a short answer.

    Attributes:
        id: unique within its site.
        question: what the agent is asked.
        answer: the gold answer; ``aliases`` are other accepted forms.
        family: ``"chain"``, ``"inverted"``, ``"compare"``, ``"long"`` (builtin) or ``"corpus"``.
        hops: difficulty: number of hops and constraints.
        split: ``"train"`` or ``"test"``.
        answer_kind: the kind of thing the answer is (``"person"``, ``"place"``, ``"year"``, ...); the question
            says as much, so telling it leaks nothing.
        gold_path: the steps that solve it alone, ending just before ``answer(answer)``.
        subtasks: independent sub-questions (fork-friendly families); each has its own answer and gold path,
            and ``gold_path`` is their paths one after another plus whatever combines them.
        search_queries: queries a reader would form from the question (names it mentions); candidates offer them.
    """

    id: str
    question: str
    answer: str
    aliases: tuple[str, ...] = ()
    family: str = "corpus"
    hops: int = 1
    split: str = "test"
    answer_kind: str = "text"
    gold_path: tuple[GoldStep, ...] = ()
    subtasks: tuple["Task", ...] = ()
    search_queries: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchResult:
    """One ranked search hit."""

    title: str
    path: str
    snippet: str


@dataclass(frozen=True)
class Document:
    """A page's searchable form: its path, title and plain text."""

    path: str
    title: str
    text: str


def normalize_answer(text: str) -> str:
    """Normalise an answer for exact match: case, accents kept, punctuation and articles dropped, spaces folded.

    >>> normalize_answer("  The Varnholt  Institute. ")
    'varnholt institute'
    """
    import re
    import unicodedata

    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    words = [w for w in text.split() if w not in ("the", "a", "an")]
    return " ".join(words)


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
        """The BM25 index over :meth:`documents`, built on first use."""
        if getattr(self, "_index", None) is None:
            from .search import SearchIndex

            self._index = SearchIndex(list(self.documents()))
        return self._index

    def search(self, query: str, k: int = SEARCH_RESULTS) -> list[SearchResult]:
        """The ``k`` best pages for ``query`` (BM25 over titles and text)."""
        return self.index.search(query, k)

    # --- rendering by URL ---------------------------------------------------------------------------
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


@dataclass
class _Registry:
    sites: dict = field(default_factory=dict)


_CACHE = _Registry()


def load_site(site: str | Site = "builtin", site_seed: int = 0, site_size: int = 2000) -> Site:
    """The site an env browses: ``"builtin"`` (generated from ``site_seed`` and ``site_size``), a corpus path,
    or a :class:`Site` instance. Sites are cached per process: envs in one process share one site.

    Raises:
        ValueError: ``site`` is none of those (``""`` too: it would load the current folder), or ``site_seed``
            or ``site_size`` is not a whole number in range (checked for every site, so a typo never waits
            until the day the builtin site is used).
        CorpusError: the corpus is missing or malformed (a ``ValueError``; it names the file and line).
    """
    from .world import MIN_SIZE

    site_seed = check_int("site_seed", site_seed, minimum=0)
    site_size = check_int("site_size", site_size, minimum=MIN_SIZE)
    if isinstance(site, Site):
        return site
    is_path = isinstance(site, str) or isinstance(site, os.PathLike) and isinstance(os.fspath(site), str)
    if not is_path or not str(site).strip():
        raise ValueError(
            f"site must be 'builtin', the path of a corpus (a folder of .html files, a folder with "
            f"documents.jsonl, or a .jsonl documents file) or a Site, got {shown(site)}"
        )
    key = (str(site), site_seed, site_size) if site == "builtin" else (str(site),)
    if key not in _CACHE.sites:
        if site == "builtin":
            from .builtin import BuiltinSite

            _CACHE.sites[key] = BuiltinSite(seed=site_seed, size=site_size)
        else:
            from .corpus import load_corpus

            _CACHE.sites[key] = load_corpus(site)
    return _CACHE.sites[key]
