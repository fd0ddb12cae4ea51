"""The oracle: solves tasks from the site's ground truth (their gold paths).

Builtin tasks all have one; a corpus task has one when ``tasks.jsonl`` lists its ``evidence_docs`` or
``gold_docs`` (docs/corpus.md). The oracle refuses a task without one (:class:`NoGoldPathError`): answering
the gold string without reading anything would teach a warm start to guess.

It mirrors the env's browser (same site, same chunking) to turn gold steps into the actions an agent would
take: ``open(k)`` by link number when the page on screen links there, scrolling until the expected fact
shows, and finally ``answer(...)``. Knobs make it a demonstrator of multi-session work:

- ``compact_at``: compact when the session's context passes this fraction of the window, writing a real
  summary (the facts found so far, and the step it is at). Without it, long pages are searched with
  ``find`` so the context stays small.
- ``fork``: one child session per independent sub-question, each returning its answer with ``finish``.
- ``error_rate``: the chance of a plausible wrong action at each step (varied demonstrations); it recovers.

Example:
    >>> import gymnasium as gym, envs
    >>> from agents import OracleAgent
    >>> env = gym.make("mosaic/WebQA-v0", site_size=120)
    >>> agent = OracleAgent(env)
    >>> obs, info = env.reset(seed=0)
    >>> done = False
    >>> while not done:
    ...     obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
    ...     done = terminated or truncated
    >>> reward
    1.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from envs import view
from envs.actions import format_action
from envs.backends import TextBackend
from envs.web import GoldStep, Site, Task
from envs.web.browser import CHUNK_TOKENS, PageView

from .base import Agent, step_rng


@dataclass
class _Plan:
    """Where one session of the oracle is: its steps, its progress, and the page it has on screen."""

    task: Task
    steps: list[GoldStep]
    final: str  # "answer" or "finish"
    done: int = 0
    notes: list[str] = field(default_factory=list)
    forks: list[Task] = field(default_factory=list)
    page: PageView | None = None
    chunk: int = 0
    jump: bool = False
    acted: int = 0  # steps taken in this session: a session that has done nothing yet never compacts
    lossy: bool = False  # it compacted with the lossy summary: the next session starts its research again


class NoGoldPathError(ValueError):
    """A task the oracle is asked to solve has no gold path; the message names the tasks and the fix."""


def check_gold_paths(tasks: Sequence[Task]) -> None:
    """Raise :class:`NoGoldPathError` naming the ``tasks`` that have no gold path."""
    missing = [t.id for t in tasks if not t.gold_path]
    if missing:
        named = ", ".join(repr(i) for i in missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise NoGoldPathError(
            f"the oracle follows gold paths, and {len(missing)} of {len(tasks)} task(s) have none ({named}): list "
            f'each task\'s "evidence_docs" or "gold_docs" in tasks.jsonl (docs/corpus.md), or use another agent'
        )


class OracleAgent(Agent):
    """Follows gold paths. ``env_or_site``: an env (its site and chunking are used) or a :class:`Site`.

    Args:
        env_or_site: the env it acts in (or a wrapper of it, or its :func:`envs.view`), or the site of the envs it
            acts in.
        compact_at: compact when a session's context passes this fraction of ``session_max_tokens``.
        fork: fork one subagent per sub-question of tasks that have them.
        error_rate: probability of a plausible wrong action at a step.
        lossy_summary: where the env offers summaries to choose from (``summary_choices``), the probability of
            compacting with the lossy one (the env's second) instead of the complete one (its first); after a
            lossy compaction the next session does the research again, as an agent that lost its notes must.
            Where the env offers one summary, the oracle writes its own.
        session_max_tokens: the window, when a site is given instead of an env.
        chunk_tokens: the env's chunk size, when a site is given instead of an env.
        max_scrolls: when reading (``compact_at`` set), scroll at most this far down a page, then ``find`` the
            fact: a reader skims, and the budget stays enough for the deepest pages.
        seed: seeds the errors (per step in a ``Collector`` run: :func:`agents.base.step_rng`).

    Raises:
        NoGoldPathError: a task of the env (or, given a site, the task it is asked to act on) has no gold path.
    """

    def __init__(self, env_or_site: Any, compact_at: float | None = None, fork: bool = False,
                 error_rate: float = 0.0, session_max_tokens: int = 4096, chunk_tokens: int = CHUNK_TOKENS,
                 seed: int = 0, max_scrolls: int = 4, lossy_summary: float = 0.0):
        if isinstance(env_or_site, Site):
            site = env_or_site
            task_by_id = site.task
        else:
            env = view(env_or_site)
            site = env.site
            task_by_id = env.task  # as the env asks it (compare_answer)
            session_max_tokens = env.session_max_tokens
            chunk_tokens = env.chunk_tokens
            # Knobs the env cannot honour are off: no forks in a fork-less variant, and so on.
            fork = fork and env.allow_fork
            compact_at = compact_at if env.allow_compact else None
            check_gold_paths(env.tasks)
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
        if not 0.0 <= lossy_summary <= 1.0:
            raise ValueError(f"lossy_summary must be in [0, 1], got {lossy_summary}")
        self.lossy_summary = lossy_summary
        self.site = site
        self._task_by_id = task_by_id
        self.browser = TextBackend(site, chunk_tokens)
        self.compact_at = compact_at
        self.max_scrolls = max_scrolls
        self.fork = fork
        self.error_rate = error_rate
        self.session_max_tokens = session_max_tokens
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._plans: dict[int, dict[int, _Plan]] = {}

    def reset(self, index: int | None = None) -> None:
        if index is None:
            self._plans.clear()
            self.rng = np.random.default_rng(self.seed)
        else:
            self._plans.pop(index, None)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.act_batch([observation], [info])[0]

    def act_batch(self, observations, infos) -> list[str]:
        # Plans follow the env (its pool slot), not its place in this batch: finished envs leave the batch.
        return [self._act(info.get("env_index", i), info) for i, info in enumerate(infos)]

    # ------------------------------------------------------------------------------------------------
    def _act(self, index: int, info: dict[str, Any]) -> str:
        plans = self._plans.setdefault(index, {})
        sid = info["session_id"]
        if info["steps_used"] == 0:
            plans.clear()  # a new episode
        if sid not in plans:
            plans[sid] = self._plan_for(plans, info)
        plan = plans[sid]
        rng = step_rng(self.seed, info) or self.rng
        if info.get("must_compact"):
            return self._compact(plan, info, rng)
        if self.error_rate and rng.random() < self.error_rate:
            return self._mistake(plan, rng)
        if self.compact_at is not None and info.get("context_tokens", 0) > self.compact_at * self.session_max_tokens \
                and plan.done > 0 and plan.acted > 0 and not self._reading(plan):
            return self._compact(plan, info, rng)
        plan.acted += 1
        if plan.forks:
            sub = plan.forks.pop(0)
            plan.done += len(sub.gold_path)
            plan.notes.append(f"Subagent: {sub.question} -> {sub.answer}")
            return format_action("fork", sub.question)
        while plan.done < len(plan.steps):
            action = self._next(plan)
            if action is not None:
                return action
        answer = plan.task.answer
        return format_action(plan.final, answer)

    def _plan_for(self, plans: dict[int, _Plan], info: dict[str, Any]) -> _Plan:
        task = self._task_by_id(info["task_id"])
        check_gold_paths([task])
        kind, parent = info["session_kind"], info["parent_id"]
        if kind == "compact" and parent in plans:
            old = plans.pop(parent)
            if old.lossy:  # its notes are gone: start the research again
                return _Plan(old.task, old.steps, old.final, 0, [], old.forks)
            return _Plan(old.task, old.steps, old.final, old.done, list(old.notes), old.forks)
        if kind == "fork":
            sub = next((s for s in task.subtasks if s.question == info.get("session_task")), None)
            if sub is not None:
                return _Plan(sub, list(sub.gold_path), "finish")
            return _Plan(task, list(task.gold_path), "finish")
        forks = list(task.subtasks) if self.fork else []
        return _Plan(task, list(task.gold_path), "answer", forks=forks)

    def _next(self, plan: _Plan) -> str | None:
        """The action for the current gold step, or None when the step is already satisfied."""
        step = plan.steps[plan.done]
        if step.tool == "search":
            plan.done += 1
            self._note(plan, step)
            return self._show(plan, self.site.search_url(step.arg), format_action("search", step.arg))
        if step.tool == "open":
            plan.done += 1
            self._note(plan, step)
            return self._show(plan, step.arg, self._open_action(plan, step.arg))
        if step.tool == "find":
            plan.done += 1
            self._note(plan, step)
            return format_action("find", step.arg)
        if step.tool == "scroll":
            view = plan.page
            if view is None:
                # After a compaction nothing is on screen: reopen the page this step reads.
                reopen = next((s.arg for s in reversed(plan.steps[: plan.done]) if s.tool == "open"), None)
                if reopen is None:
                    plan.done += 1
                    return None
                # A compaction cut this page short: jump back to the fact instead of rereading the page.
                plan.jump = True
                return self._show(plan, reopen, format_action("open", reopen))
            if step.expect and step.expect in view.chunks[plan.chunk]:
                plan.done += 1
                self._note(plan, step)
                return None
            if (self.compact_at is None or plan.jump or plan.chunk >= self.max_scrolls) and step.expect:
                plan.jump = False
                # No compaction wanted: keep the context small by finding the fact instead of reading to it.
                plan.done += 1
                self._note(plan, step)
                return format_action("find", step.expect)
            direction = step.arg if step.arg in ("down", "up") else "down"
            target = plan.chunk + (1 if direction == "down" else -1)
            if not 0 <= target < len(view.chunks):
                plan.done += 1
                return None
            plan.chunk = target
            if not step.expect or step.expect in view.chunks[target]:
                plan.done += 1
                self._note(plan, step)
            return format_action("scroll", direction)
        plan.done += 1
        return None

    @staticmethod
    def _reading(plan: _Plan) -> bool:
        """Whether the oracle is scrolling through a page towards a fact (it compacts only between steps)."""
        return plan.done < len(plan.steps) and plan.steps[plan.done].tool == "scroll" and plan.page is not None

    def _show(self, plan: _Plan, url: str, action: str) -> str:
        plan.page, plan.chunk = self.browser.view(url), 0
        return action

    def _open_action(self, plan: _Plan, path: str) -> str:
        view = plan.page
        if view is not None and view.chunks:
            visible = view.chunks[plan.chunk]
            for link in view.links:
                if link.url == path and f"[{link.number}]" in visible:
                    return format_action("open", link.number)
        return format_action("open", path)

    def _note(self, plan: _Plan, step: GoldStep) -> None:
        if step.note and step.note not in plan.notes:
            plan.notes.append(step.note)

    def _compact(self, plan: _Plan, info: dict[str, Any], rng: np.random.Generator) -> str:
        """The compact action, its summary the facts noted and the progress. It forgets the page on screen:
        after a compaction none is, and the next scroll reopens the page it reads (see :meth:`_next`).

        Where the env offers several summaries (``info["candidates"]`` holds more than one compact action), it
        takes one of them: the complete one (the first), or with probability ``lossy_summary`` the lossy one."""
        plan.page = None
        offered = [c for c in info.get("candidates") or () if c.startswith("compact(")]
        if len(offered) > 1:
            plan.lossy = bool(self.lossy_summary and rng.random() < self.lossy_summary)
            return offered[1] if plan.lossy else offered[0]
        found = " ".join(plan.notes) if plan.notes else "Nothing found yet."
        summary = f"Facts found so far: {found} Progress: {plan.done} of {len(plan.steps)} research steps done."
        return format_action("compact", summary)

    def _mistake(self, plan: _Plan, rng: np.random.Generator) -> str:
        view = plan.page
        choice = int(rng.integers(3))
        if choice == 0 and view is not None and view.links:
            link = view.links[int(rng.integers(len(view.links)))]
            plan.page, plan.chunk = self.browser.view(link.url), 0
            return format_action("open", link.number)
        if choice == 1:
            words = plan.task.question.split()
            query = words[int(rng.integers(len(words)))].strip("?,.")
            return self._show(plan, self.site.search_url(query), format_action("search", query))
        return "I am not sure what to do next."
