"""Full-text search over a site's pages: BM25 (``bm25s``) over titles and text, with snippets.

Example:
    >>> from envs.web import Document
    >>> index = SearchIndex([
    ...     Document("/wiki/Edra_Vane", "Edra Vane", "Edra Vane was a painter. She was born in 1887."),
    ...     Document("/wiki/Oskarde", "Oskarde", "Oskarde is a port city."),
    ... ])
    >>> results = index.search("painter born in 1887")
    >>> [(r.path, r.snippet) for r in results]
    [('/wiki/Edra_Vane', 'She was born in 1887.')]
"""

from __future__ import annotations

import itertools
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Iterator, Sequence

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from . import bm25
from .types import Document, SearchResult

# A title counts as much as this many mentions in the text, so that a page about a name outranks pages
# that merely mention it.
TITLE_WEIGHT = 3
SNIPPET_WORDS = 30
CACHE_SIZE = 4096

_WORD = re.compile(r"\w{2,}")
_STOPWORDS = frozenset(STOPWORDS_EN)
# Sentences end at a newline, or at . ! ? before a space.
_STOPS = ("\n", ". ", "! ", "? ")
_STOP = re.compile(r"\n|[.!?] ")
# Lines shorter than this many words (headings, navigation) make poor snippets when a sentence matches as well.
_SHORT_LINE_WORDS = 4


def terms(text: str) -> list[str]:
    """The search terms of ``text``: words of two or more characters, case-folded, stopwords dropped.

    >>> terms("The teacher of Edra Vane")
    ['teacher', 'edra', 'vane']
    """
    # filterfalse over the set's own __contains__ runs in C: indexing a large corpus spends its time here.
    return list(itertools.filterfalse(_STOPWORDS.__contains__, _WORD.findall(text.casefold())))


class SearchIndex:
    """BM25 over ``documents``; :meth:`search` returns ranked :class:`SearchResult` objects.

    Ranking is deterministic: equal scores keep the documents' order. Results are cached per query (groups of
    rollouts repeat the same searches), and the index is safe to query from several threads.

    Args:
        documents: the pages to index, in a fixed order.
        folder: where the index is saved and, in later processes, memory-mapped from (see
            :func:`envs.web.bm25.open_or_build`); ``None`` builds it in memory.
        fingerprint: what the documents are made from; a saved index of another fingerprint is rebuilt.
    """

    def __init__(self, documents: Sequence[Document], folder: Path | None = None, fingerprint: str = ""):
        self.documents = list(documents)
        self._bm25: bm25s.BM25 | None = None
        self._vocab: bm25.Vocabulary | None = None
        arrays = bm25.open_or_build(self._terms, len(self.documents), folder, fingerprint)
        if len(arrays.vocab):  # bm25s cannot score a corpus without a single word
            self._bm25 = bm25s.BM25(k1=bm25.K1, b=bm25.B)
            self._bm25.scores = {"data": arrays.data, "indices": arrays.indices, "indptr": arrays.indptr,
                                 "num_docs": arrays.n_docs}
            self._bm25.nonoccurrence_array = None  # what bm25s.BM25.index sets for Lucene BM25
            self._vocab = arrays.vocab
        self._cache: OrderedDict[tuple[str, int], tuple[SearchResult, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def _terms(self) -> Iterator[list[str]]:
        return (terms(f"{d.title} " * TITLE_WEIGHT + d.text) for d in self.documents)

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

    def cache_clear(self) -> None:
        """Forget cached results (benchmarks measure cold queries with it)."""
        with self._lock:
            self._cache.clear()

    def _search(self, query: str, k: int) -> list[SearchResult]:
        if self._bm25 is None or self._vocab is None or k <= 0:  # both or neither: an empty corpus
            return []
        query_terms = sorted(set(terms(query)))
        ids = [i for i in map(self._vocab.lookup, query_terms) if i is not None]
        if not ids:
            return []
        scores = self._bm25.get_scores_from_ids(ids)
        matches = np.flatnonzero(scores > 0)
        if len(matches) > k:
            # Keep every match scoring at least the k-th best, ties included, before the full sort.
            kth = np.partition(scores[matches], len(matches) - k)[len(matches) - k]
            matches = matches[scores[matches] >= kth]
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
    A line that only repeats the title is never chosen; with no match, the first sentence of some length is.

    >>> snippet("Oskarde\\nOskarde is a port. It was founded in 1120.", {"oskarde", "founded"}, "Oskarde")
    'It was founded in 1120.'
    """
    title_terms, title_line = set(terms(title)), title.casefold()
    best, best_key = "", (-1, -1, False)
    # Only the sentences around matches are read: pages are long and a cold query reads ten of them.
    for sentence, found in _matching_sentences(text, wanted):
        if sentence.casefold() != title_line:
            key = (len(found - title_terms), len(found), sentence.count(" ") >= _SHORT_LINE_WORDS)
            if key > best_key:
                best, best_key = sentence, key
    if not best:
        best = _first_sentence(text, title_line)
    tokens = best.split()
    if len(tokens) <= words:
        return " ".join(tokens)
    first = next((i for i, t in enumerate(tokens) if wanted.intersection(terms(t))), 0)
    start = max(0, min(first - words // 3, len(tokens) - words))
    cut = " ".join(tokens[start : start + words])
    return ("… " if start > 0 else "") + cut + (" …" if start + words < len(tokens) else "")


def _matching_sentences(text: str, wanted: set[str]) -> Iterator[tuple[str, set[str]]]:
    """Each sentence of ``text`` that holds a ``wanted`` term as a whole word, with the terms it holds, in order.

    Plain ``str.find`` over the lowercased text, then a look at the stops around each hit: a cold query reads
    ten long pages, where a regular expression over every page costs several times more.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters lowercase to two; keep offsets aligned
        lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    hits = sorted((pos, term) for term in wanted for pos in _word_positions(lowered, term))
    start, end = 0, 0
    found: set[str] = set()
    for pos, term in hits:
        if pos >= end:
            if found:
                yield text[start:end].strip(), found
            start = max([end] + [i + len(stop) for stop in _STOPS if (i := text.rfind(stop, end, pos)) >= 0])
            stop = _STOP.search(text, pos)
            end, found = (stop.start() + 1 if stop else len(text)), set()
        found.add(term)
    if found:
        yield text[start:end].strip(), found


def _word_positions(text: str, word: str) -> Iterator[int]:
    """Where ``word`` stands in ``text`` as a whole word (not inside a longer one)."""
    i = text.find(word)
    while i >= 0:
        after = i + len(word)
        if (i == 0 or not _is_word_char(text[i - 1])) and (after == len(text) or not _is_word_char(text[after])):
            yield i
        i = text.find(word, after)


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _first_sentence(text: str, title_line: str) -> str:
    """The first sentence of some length that is not the title; else the first sentence that is not the title."""
    first, start = "", 0
    for stop in _STOP.finditer(text + "\n"):
        sentence, start = text[start : stop.start() + 1].strip(), stop.end()
        if sentence and sentence.casefold() != title_line:
            if sentence.count(" ") >= _SHORT_LINE_WORDS:
                return sentence
            first = first or sentence
    return first
