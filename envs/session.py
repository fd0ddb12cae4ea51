"""The records of an episode: its sessions (context windows), its state, and the read-only copies handed out.

:class:`~envs.webqa.WebQAEnv` keeps them; :mod:`envs.tools`, :mod:`envs.candidates` and :mod:`envs.grading`
read and change a :class:`Session` that the env hands them, and know nothing of the env.

Example:
    >>> s = Session(id=0, parent=None, kind="root", depth=0, messages=[], pieces=["<|user|>\\nhi\\n"], tokens=3)
    >>> s.text, s.copy().pieces is s.pieces
    ('<|user|>\\nhi\\n', False)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .web.browser import PageView
from .web.types import Task


@dataclass
class Session:
    """One context window: its messages, its place in the session tree, and its browser state."""

    id: int
    parent: int | None
    kind: str
    depth: int
    messages: list[dict[str, str]]
    # The context as transcript pieces, one a message, joined only when read: appending to one long string
    # would copy the whole context at every message, a cost that grows with the context.
    pieces: list[str]
    tokens: int
    steps: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    handoff: str | None = None
    fork_task: str | None = None
    page: PageView | None = None
    chunk: int = 0
    mentions: dict[str, str] = field(default_factory=dict)
    facts: dict[str, None] = field(default_factory=dict)
    pages_read: list[str] = field(default_factory=list)
    must_compact: bool = False

    @property
    def text(self) -> str:
        """The session's context as a transcript (:func:`envs.prompts.render_transcript` without the prompt)."""
        return "".join(self.pieces)

    def copy(self) -> "Session":
        # Messages are never mutated once appended and views are immutable, so shallow copies suffice.
        return Session(**{**self.__dict__, "messages": list(self.messages), "pieces": list(self.pieces),
                          "mentions": dict(self.mentions), "facts": dict(self.facts),
                          "pages_read": list(self.pages_read)})


@dataclass
class EpisodeState:
    """Everything that changes within an episode; :meth:`WebQAEnv.snapshot` copies it."""

    task: Task
    max_steps: int
    sessions: list[Session]
    stack: list[int]
    steps_used: int = 0
    done: bool = False
    final_answer: str | None = None
    success: bool = False
    answered_forks: list[str] = field(default_factory=list)
    # One record a step (:meth:`WebQAEnv.trajectory`'s "step_log"), and the gold pages reached so far.
    log: list[dict[str, Any]] = field(default_factory=list)
    gold_reached: set[str] = field(default_factory=set)

    def copy(self) -> "EpisodeState":
        # Log records are never mutated once appended: a shallow copy of the list suffices.
        return EpisodeState(
            task=self.task, max_steps=self.max_steps, sessions=[s.copy() for s in self.sessions],
            stack=list(self.stack), steps_used=self.steps_used, done=self.done, final_answer=self.final_answer,
            success=self.success, answered_forks=list(self.answered_forks), log=list(self.log),
            gold_reached=set(self.gold_reached),
        )


@dataclass(frozen=True)
class SessionView:
    """What the session that acts next has on screen (:meth:`WebQAEnv.acting_session`): read-only, for wrappers
    that build features from the browser state (``envs.sb3.CandidateActions``)."""

    id: int
    page: PageView | None  # the page open in the session (views are immutable), or None
    chunk: int  # the part of that page on screen, from 0
    pages_read: tuple[str, ...]  # the titles of the pages and searches shown, in order


@dataclass(frozen=True)
class Snapshot:
    """A picklable mid-episode state; ``reset(options={"snapshot": s})`` resumes from it exactly."""

    state: EpisodeState
    rng_state: dict
