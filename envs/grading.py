"""Grading: an answer against its task's gold answer, and a step against the task's gold path.

The reward is the final answer's: 1 when it is the gold answer or one of its aliases (as
:func:`~envs.web.types.normalize_answer` compares them), else 0. A step's marks are what the study's step metrics
read (``trajectory()["step_log"]``); nothing of them reaches the agent before the episode ends.

Example:
    >>> from envs.web.types import Task
    >>> task = Task(id="t", question="Who?", answer="Edra Vane", aliases=("E. Vane",), hops=1)
    >>> answer_right(task, " edra vane "), answer_reward(answer_right(task, "Vane"))
    (True, 0.0)
"""

from __future__ import annotations

from .web.site import Site
from .web.types import Task, normalize_answer


def answer_right(task: Task, text: str) -> bool:
    """Whether ``text`` is ``task``'s answer or one of its aliases."""
    return normalize_answer(text) in {normalize_answer(a) for a in (task.answer, *task.aliases)}


def answer_reward(right: bool) -> float:
    """The env's one reward, given on the final answer: 1 for the right one, else 0."""
    return 1.0 if right else 0.0


def finish_right(task: Task, fork_task: str | None, result: str) -> bool:
    """Whether a subagent's ``result`` answers the sub-question ``fork_task`` of ``task`` (never, for a question
    that is none of its sub-questions)."""
    sub = next((t for t in task.subtasks if t.question == fork_task), None)
    return sub is not None and answer_right(sub, result)


def gold_urls(site: Site, task: Task) -> frozenset[str]:
    """The pages the gold path shows: its searches' result pages and the pages it opens."""
    return frozenset(site.search_url(g.arg) if g.tool == "search" else g.arg
                     for g in task.gold_path if g.tool in ("search", "open"))


def step_marks(site: Site, task: Task, tool: str | None, *, url: str | None, reached: set[str], success: bool,
               fork_task: str | None, result: str | None) -> tuple[bool, bool]:
    """``(gold, off_path)`` for a step that called ``tool`` without an error.

    ``gold`` when the step first reaches a page of the gold path (``url``, the page a search or open showed,
    is one the gold solution shows, and not in ``reached``, the gold pages reached so far in any session, which
    this adds it to) or gives the right final answer (``success``) or sub-answer (a ``finish`` whose ``result``
    answers ``fork_task``); ``off_path`` when a search or open shows a page off the gold path, or an answer or
    finish is wrong. Any other step is neither.
    """
    if tool in ("search", "open") and url is not None:
        on_path = url in gold_urls(site, task)
        gold = on_path and url not in reached
        reached.add(url)
        return gold, not on_path
    if tool == "answer":
        return success, not success
    if tool == "finish":
        right = finish_right(task, fork_task, result or "")
        return right, not right
    return False, False
