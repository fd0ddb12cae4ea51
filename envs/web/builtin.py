"""The builtin site: a generated encyclopedia of an invented world, and BrowseComp-style tasks about it.

``BuiltinSite(seed, size)`` builds the world (:mod:`envs.web.world`) and the tasks (:mod:`envs.web.tasks`) at
once, and renders pages (:mod:`envs.web.pages`) only when asked, keeping the most recent ones. The same seed
and size give the same pages and tasks, byte for byte, in any process.

Example:
    >>> site = BuiltinSite(seed=0, size=120)
    >>> task = site.tasks_for("train", hops=1)[0]
    >>> task.family, task.answer_kind in ("person", "organisation", "place", "work", "event", "year")
    ('chain', True)
    >>> site.page_html(task.gold_path[1].arg).startswith("<!DOCTYPE html>")
    True
    >>> site.mentions("Born in 1887 in " + site.world.of_kind("place")[0].name)[0]
    ('1887', 'year')
"""

from __future__ import annotations

import functools
import re
from typing import Iterator

from bm25s.stopwords import STOPWORDS_EN

from .pages import Pages, template_words
from .site import Site
from .tasks import make_tasks, question_words
from .types import Document
from .world import World

# Rendered pages kept per site: every page a group of episodes touches; browsers keep their own views too.
PAGE_CACHE = 1024
_TOKEN = re.compile(r"\w+")
_YEARS = range(1000, 2100)


class BuiltinSite(Site):
    """A procedurally generated site (see the module docstring).

    Args:
        seed: which world.
        size: how many entities (people, organisations, places, works, events): about 120 for tests, 2000 by
            default, 10,000 and more for benchmarks. Pages number about 1.3 times the entities (articles,
            categories, disambiguation pages, the main page).

    Attributes:
        world: the entities and their facts.
        pages: page paths and the page builder.
        tasks: every task, train split first.
    """

    def __init__(self, seed: int = 0, size: int = 2000):
        self.seed = seed
        self.size = size
        self.name = f"builtin-{seed}-{size}"
        self.world = World(seed, size, reserved=template_words() | question_words() | set(STOPWORDS_EN))
        self.pages = Pages(self.world)
        self.tasks, self._asked = make_tasks(self.world, self.pages)
        self._html = functools.lru_cache(maxsize=PAGE_CACHE)(self._render)
        self._single, self._multi = self._vocabulary()

    def __reduce__(self):
        # A site is its seed and size: pickles stay small and caches are rebuilt where it is unpickled.
        return type(self), (self.seed, self.size)

    # --- pages -----------------------------------------------------------------------------------------
    def documents(self) -> Iterator[Document]:
        for path in self.pages.paths:
            page = self.pages.page(path)
            yield Document(path, page.title, page.text())

    def page_html(self, path: str) -> str | None:
        return self._html(path)

    def _render(self, path: str) -> str | None:
        page = self.pages.build(path)
        return None if page is None else page.html()

    # --- tasks -----------------------------------------------------------------------------------------
    def answer_entities(self, task_id: str) -> tuple[str, ...]:
        """The page titles of the entities task ``task_id`` asks about: its answer, or the entity whose year
        the answer is (for a comparison, the winner and every compared value's entity). The train and test
        splits never share one.
        """
        self.task(task_id)  # a clear error for an unknown id
        return tuple(self.world.entities[i].title for i in self._asked[task_id])

    # --- mentions --------------------------------------------------------------------------------------
    def _vocabulary(self) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, str], list[tuple[tuple[str, ...], str, str]]]]:
        """Names by their first word (one-word names) or first two words (longer ones), for dict lookups."""
        single: dict[str, tuple[str, str]] = {}
        multi: dict[tuple[str, str], list[tuple[tuple[str, ...], str, str]]] = {}
        for e in self.world.entities:
            words = tuple(_TOKEN.findall(e.name))
            if len(words) == 1:
                single[words[0]] = (e.name, e.kind)
            else:
                multi.setdefault(words[:2], []).append((words, e.name, e.kind))
        for options in multi.values():
            options.sort(key=lambda o: -len(o[0]))
        return single, multi

    def mentions(self, text: str) -> tuple[tuple[str, str], ...]:
        """Names of the world's entities (kind ``"person"``, ``"organisation"``, ``"place"``, ``"work"``,
        ``"event"``) and years (kind ``"year"``) that ``text`` mentions, in order of first appearance.

        >>> site = BuiltinSite(seed=0, size=120)
        >>> person = site.world.of_kind("person")[0]
        >>> site.mentions(f"{person.name} was born in 1702.") == ((person.name, "person"), ("1702", "year"))
        True
        """
        words = _TOKEN.findall(text)
        found: dict[str, str] = {}
        skip_to = 0
        # Names start with a capital and years are digits: only those words start a lookup.
        for i in [i for i, w in enumerate(words) if w[0].isupper() or w[0].isdigit()]:
            if i < skip_to:
                continue
            word = words[i]
            if word.isdigit():  # "²" and "①" are digits too, but no year: int() refuses them
                if len(word) == 4 and word.isascii() and int(word) in _YEARS:
                    found.setdefault(word, "year")
                continue
            for name_words, value, kind in self._multi.get((word, words[i + 1] if i + 1 < len(words) else ""), ()):
                if tuple(words[i : i + len(name_words)]) == name_words:
                    found.setdefault(value, kind)
                    skip_to = i + len(name_words)
                    break
            else:
                if word in self._single:
                    value, kind = self._single[word]
                    found.setdefault(value, kind)
        return tuple(found.items())
