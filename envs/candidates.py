"""Candidate actions (``candidates=True``): valid complete actions for a session that reveal nothing it has not
seen; and the summaries a compaction offers, built from what the session has read (``summary_choices``).

What a session has read is recorded as it reads it (:meth:`Candidates.record`): the answer-like values the text
mentions (``answer`` candidates come only from these) and its short lines that state one (the notes of a
summary keep the last of them).

Example:
    >>> from envs.session import Session
    >>> from envs.web import load_site
    >>> site = load_site("builtin", site_size=120)
    >>> task = site.tasks[0]
    >>> candidates = Candidates(site)
    >>> session = Session(id=0, parent=None, kind="root", depth=0, messages=[], pieces=[], tokens=0)
    >>> candidates.actions(task, [], session) == [f'search("{q}")' for q in task.search_queries]
    True
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

from .actions import format_action
from .session import Session
from .web.site import Site
from .web.types import Task

MAX_ANSWER_CANDIDATES = 8
MAX_NOTE_FACTS = 8
MAX_NOTE_LINE_CHARS = 160
_LINK_MARK = re.compile(r"\[\d+\] ")


class Candidates:
    """The candidate actions and summaries of an env over ``site``, with its settings: which multi-session tools
    exist (``allow_compact``, ``allow_fork``), the deepest fork, and whether a compaction offers a lossy summary
    beside the complete one (``summary_choices``)."""

    def __init__(self, site: Site, allow_compact: bool = True, allow_fork: bool = True, max_fork_depth: int = 2,
                 summary_choices: bool = False):
        self.allow_compact = allow_compact
        self.allow_fork = allow_fork
        self.max_fork_depth = max_fork_depth
        self.summary_choices = summary_choices
        # Pages are shown again and again: remember what each shown text mentions.
        self._mentions = functools.lru_cache(maxsize=65_536)(site.mentions)
        self._fact_lines = functools.lru_cache(maxsize=65_536)(self._lines_with_mentions)

    def record(self, session: Session, text: str) -> None:
        """``session`` has now read ``text``: keep the values it mentions and the lines that state one."""
        for value, kind in self._mentions(text):
            session.mentions.setdefault(value, kind)
        for line in self._fact_lines(text):
            session.facts.setdefault(line, None)

    def actions(self, task: Task, answered_forks: Sequence[str], session: Session) -> list[str]:
        """Valid complete actions for ``session`` in an episode of ``task`` whose subagents answered
        ``answered_forks``, in a deterministic order.

        Searches for the names the question mentions, the links of the part of the page on screen, scrolls,
        a compact with notes, forks of the question's independent sub-questions, and answers (or a
        subagent's finish) drawn only from values the session's own context mentions. A full context that
        must compact gets its summaries alone.
        """
        s = session
        asked = _task_of(task, s)
        if s.must_compact:
            return [format_action("compact", n) for n in self.summaries(s)]
        out = [format_action("search", q) for q in asked.search_queries]
        if s.page is not None:
            visible = s.page.chunks[s.chunk] if s.page.chunks else ""
            out += [format_action("open", link.number) for link in s.page.links if f"[{link.number}]" in visible]
            if s.chunk + 1 < len(s.page.chunks):
                out.append(format_action("scroll", "down"))
            if s.chunk > 0:
                out.append(format_action("scroll", "up"))
        if self.allow_compact and s.steps > 0:
            out += [format_action("compact", n) for n in self.summaries(s)]
        if self.allow_fork and s.depth < self.max_fork_depth and s.fork_task is None:
            out += [format_action("fork", sub.question) for sub in task.subtasks
                    if sub.question not in answered_forks]
        final = "finish" if s.depth > 0 else "answer"
        kind = asked.answer_kind
        values = [v for v, k in s.mentions.items() if kind in ("text", k)]
        out += [format_action(final, v) for v in values[-MAX_ANSWER_CANDIDATES:]]
        return list(dict.fromkeys(out))

    def summaries(self, session: Session) -> list[str]:
        """The summaries a compaction of ``session`` offers: the complete one, then (``summary_choices``) the lossy
        one, where it differs."""
        complete = notes(session)
        if not self.summary_choices:
            return [complete]
        return list(dict.fromkeys([complete, notes(session, keep_facts=False)]))

    def _lines_with_mentions(self, text: str) -> tuple[str, ...]:
        values = [v for v, _ in self._mentions(text)]
        # Link numbers mean nothing in the next session: notes keep the words only.
        return tuple(_LINK_MARK.sub("", line).strip() for line in text.splitlines()
                     if len(line) <= MAX_NOTE_LINE_CHARS and any(v in line for v in values))


def notes(session: Session, keep_facts: bool = True) -> str:
    """A compaction summary built from what ``session`` has seen: the pages read, then the last short lines it
    read that state a value (an infobox row, a sentence naming a year or an entity); without ``keep_facts``,
    the pages alone (a lossy summary)."""
    pages = ", ".join(dict.fromkeys(session.pages_read)) or "none"
    facts = " ".join(f"{line.rstrip('.')}." for line in list(session.facts)[-MAX_NOTE_FACTS:]) if keep_facts \
        else ""
    return f"Pages read: {pages}. Notes: {facts or 'none'}"


def _task_of(task: Task, session: Session) -> Task:
    """What ``session`` works on: the sub-question of ``task`` it was forked with, else ``task`` itself."""
    if session.fork_task is not None:
        for sub in task.subtasks:
            if sub.question == session.fork_task:
                return sub
    return task
