"""The records that sites, their search, their tasks and the env hand each other, and how answers compare.

They live in this leaf module, which imports nothing of the package, so that the base
:class:`~envs.web.site.Site`, the search index, the task generator and the corpus loader share them without
importing one another. Code outside the package imports them from :mod:`envs.web`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


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
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    words = [w for w in text.split() if w not in ("the", "a", "an")]
    return " ".join(words)
