"""Full-text search over a site's pages: BM25 (``bm25s``) over titles and text, with snippets.

Example:
    >>> from envs.web.site import Document
    >>> index = SearchIndex([
    ...     Document("/wiki/Edra_Vane", "Edra Vane", "Edra Vane was a painter. She was born in 1887."),
    ...     Document("/wiki/Oskarde", "Oskarde", "Oskarde is a port city."),
    ... ])
    >>> results = index.search("painter born in 1887")
    >>> [(r.path, r.snippet) for r in results]
    [('/wiki/Edra_Vane', 'She was born in 1887.')]
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Sequence

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from .site import Document, SearchResult

# A title counts as much as this many mentions in the text, so that a page about a name outranks pages
# that merely mention it.
TITLE_WEIGHT = 3
SNIPPET_WORDS = 30
CACHE_SIZE = 4096

_WORD = re.compile(r"(?u)\b\w\w+\b")
_STOPWORDS = frozenset(STOPWORDS_EN)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# Lines shorter than this many words (headings, navigation) make poor snippets when a sentence matches as well.
_SHORT_LINE_WORDS = 4


def terms(text: str) -> list[str]:
    """The search terms of ``text``: words of two or more characters, case-folded, stopwords dropped.

    >>> terms("The teacher of Edra Vane")
    ['teacher', 'edra', 'vane']
    """
    return [w for w in _WORD.findall(text.casefold()) if w not in _STOPWORDS]


class SearchIndex:
    """BM25 over ``documents``; :meth:`search` returns ranked :class:`SearchResult` objects.

    Ranking is deterministic: equal scores keep the documents' order. Results are cached per query (groups of
    rollouts repeat the same searches), and the index is safe to query from several threads.

    Args:
        documents: the pages to index, in a fixed order.
    """

    def __init__(self, documents: Sequence[Document]):
        self.documents = list(documents)
        self._bm25: bm25s.BM25 | None = None
        if self.documents:
            self._bm25 = bm25s.BM25()
            corpus = [terms(f"{d.title} " * TITLE_WEIGHT + d.text) for d in self.documents]
            self._bm25.index(corpus, show_progress=False)
        self._cache: OrderedDict[tuple[str, int], tuple[SearchResult, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 10) -> list[SearchResult]:
        """The ``k`` best pages for ``query``; ``[]`` when no page matches or the query has no usable words.

        Args:
            query: free text; case, punctuation, stopwords and word order do not matter.
            k: how many results at most.
        """
        key = (query, k)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return list(self._cache[key])
        results = tuple(self._search(query, k))
        with self._lock:
            self._cache[key] = results
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return list(results)

    def _search(self, query: str, k: int) -> list[SearchResult]:
        if self._bm25 is None or k <= 0:
            return []
        query_terms = sorted(set(terms(query)))
        ids = self._bm25.get_tokens_ids(query_terms)
        if not ids:
            return []
        scores = self._bm25.get_scores_from_ids(ids)
        matches = np.flatnonzero(scores > 0)
        # A stable sort of the matches (already in document order) breaks ties by document order.
        best = matches[np.argsort(-scores[matches], kind="stable")[:k]]
        wanted = set(query_terms)
        return [
            SearchResult(doc.title, doc.path, snippet(doc.text, wanted, doc.title))
            for doc in (self.documents[i] for i in best.tolist())
        ]


def snippet(text: str, wanted: set[str], title: str = "", words: int = SNIPPET_WORDS) -> str:
    """The sentence of ``text`` that best shows why it matched, cut to about ``words`` words around its first
    match.

    The result already shows the ``title``, so the best sentence has the most ``wanted`` terms that are not in
    the title, then the most ``wanted`` terms, then some length rather than a short line, then comes first.
    A line that only repeats the title is never chosen.

    >>> snippet("Oskarde\\nOskarde is a port. It was founded in 1120.", {"oskarde", "founded"}, "Oskarde")
    'It was founded in 1120.'
    """
    title_terms = set(terms(title))
    best, best_key = "", (-1, -1, False)
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        if not sentence or sentence.casefold() == title.casefold():
            continue
        found = wanted.intersection(terms(sentence))
        key = (len(found - title_terms), len(found), sentence.count(" ") >= _SHORT_LINE_WORDS)
        if key > best_key:
            best, best_key = sentence, key
    tokens = best.split()
    if len(tokens) <= words:
        return " ".join(tokens)
    first = next((i for i, t in enumerate(tokens) if wanted.intersection(terms(t))), 0)
    start = max(0, min(first - words // 3, len(tokens) - words))
    cut = " ".join(tokens[start : start + words])
    return ("… " if start > 0 else "") + cut + (" …" if start + words < len(tokens) else "")
