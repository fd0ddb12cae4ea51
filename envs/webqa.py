"""``mosaic/WebQA-v0``: BrowseComp-style question answering over an offline website, across sessions.

The env owns every session's context. An action is the model's raw text; the env parses one tool call from
it (:mod:`envs.actions`), runs it, and returns the context of the session that acts next. ``compact(summary)``
ends the session and starts a new one holding only the system prompt, the task and the summary;
``fork(task)`` starts a child session with a fresh context, whose ``finish(result)`` hands the result back
to the waiting parent. Every step of every session counts against one budget ``max_steps``.

The env keeps the sessions (:mod:`envs.session`); the browsing tools (:mod:`envs.tools`), the grading
(:mod:`envs.grading`) and the candidate actions (:mod:`envs.candidates`) are modules of their own. Code outside
the env reads it through :func:`view` (its site, tasks and settings), never through ``env.unwrapped``.

Example:
    >>> import gymnasium as gym, envs
    >>> env = gym.make("mosaic/WebQA-v0", site_size=120, max_steps=20)
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step('search("a question")')
    >>> info["steps_used"], info["session_kind"]
    (1, 'root')
"""

from __future__ import annotations

import copy
import difflib
import inspect
from dataclasses import dataclass, field
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from . import grading
from .actions import MAX_ACTION_CHARS, TOOL_ARGS, Action, ActionError, as_text, parse_action, strip_think, type_name
from .backends import Backend, BrowserCrashed
from .candidates import Candidates
from .prompts import (ANSWER_IN_SUBAGENT, FINISH_IN_ROOT, REPLY_BECAME_SUMMARY, ROLE_TAG, budget_note,
                      context_full_note, system_prompt, task_message)
from .session import EpisodeState, Session, SessionView, Snapshot
from .spaces import SHARED_MEMORY_BYTES, AnyText
from .tools import WEB_TOOLS, WebTools, make_backend
from .web.browser import CHUNK_TOKENS
from .web.checks import check_bool, check_int, is_int, shown
from .web.corpus import TASK_EXAMPLE, TASKS_FILE
from .web.loader import load_site
from .web.site import Site
from .web.tasks import COMPARE_ANSWERS, answering_with_year
from .web.tokens import CheckedCounter, TokenCounter, approx_tokens
from .web.types import Task

OVERFLOW_POLICIES = ("force_compact", "truncate", "terminate")
# info["parent_id"] of a root session and info["acted_session_id"] after reset: "no session". An int, not None,
# so that every info key keeps one type in every state and Gymnasium's vector envs can stack the infos.
NO_SESSION = -1
_GENERATION_PROMPT = ROLE_TAG["assistant"] + "\n"


@dataclass(frozen=True)
class EnvView:
    """What code outside a WebQA env reads of it: its site, its tasks and its settings, read-only; and fresh
    copies of its episode (:meth:`snapshot`, :meth:`trajectory`, :meth:`session_tree`, :meth:`acting_session`).
    :func:`view` returns one through any wrappers.

    Attributes:
        site: the site the tasks are asked on (to read, never to change).
        tasks: the tasks of the env's split, hops and families, as the env asks them (``compare_answer``).
        session_max_tokens: a session's context window, in tokens of the env's ``token_counter``.
        chunk_tokens: how much of a page one ``open`` or ``scroll`` shows.
        max_sessions, max_fork_depth: the most sessions of an episode, the deepest fork.
        allow_compact, allow_fork: which multi-session tools exist.
        candidates: whether ``info["candidates"]`` lists the candidate actions.
        summary_choices: whether a compaction offers the lossy summary beside the complete one.
    """

    site: Site = field(repr=False)
    tasks: tuple[Task, ...] = field(repr=False)
    session_max_tokens: int
    chunk_tokens: int
    max_sessions: int
    max_fork_depth: int
    allow_compact: bool
    allow_fork: bool
    candidates: bool
    summary_choices: bool
    _env: "WebQAEnv" = field(repr=False, compare=False)

    def task(self, task_id: str) -> Task:
        """The site's task ``task_id`` as the env asks it; a ``KeyError`` naming known ids for an unknown one."""
        return self._env.task(task_id)

    def snapshot(self) -> Snapshot:
        """A picklable copy of the episode so far; ``env.reset(options={"snapshot": s})`` resumes from it."""
        return self._env.snapshot()

    def trajectory(self) -> dict[str, Any]:
        """Success, answers and the session tree of the episode so far (``info["trajectory"]`` at its end)."""
        return self._env.trajectory()

    def session_tree(self) -> list[dict[str, Any]]:
        """The sessions so far, in order of creation, as fresh dicts."""
        return self._env.session_tree()

    def acting_session(self) -> SessionView:
        """The browser state of the session that acts next."""
        return self._env.acting_session()


class WebQAEnv(gym.Env[str, str]):
    """Multi-session web question answering. See the module docstring and ``docs/contract.md`` for the API.

    Args:
        site: ``"builtin"`` (generated from ``site_seed``/``site_size``), a corpus path, or a ``Site``.
        site_seed: which builtin site.
        site_size: how many entities the builtin site has.
        split: ``"train"`` or ``"test"`` tasks (disjoint), or ``"all"``.
        hops: difficulty filter: an int or an inclusive ``(lo, hi)`` range; ``None`` for every task.
        families: task-family filter (builtin: ``"chain"``, ``"inverted"``, ``"compare"``, ``"long"``): a name
            or a list of names; ``None`` for every family.
        compare_answer: what a ``compare`` task asks for: ``"name"`` (the winner, whom the question names) or
            ``"year"`` (the winning year, which only pages show: no answer can be guessed before reading).
        max_steps: the step budget T over all sessions: an int, a ``(lo, hi)`` range or a list of ints,
            sampled at reset from the env's own ``np_random``; ``reset(options={"max_steps": T})`` overrides.
        session_max_tokens: a session's context window, in tokens of ``token_counter``.
        overflow: past the window: ``"force_compact"`` (ask the agent for a summary; its reply becomes it),
            ``"truncate"`` or ``"terminate"`` the episode.
        max_sessions: most sessions in one episode; more truncates (reason ``"max_sessions"``).
        max_fork_depth: deepest fork; a deeper one truncates (reason ``"max_fork_depth"``).
        show_budget: tell the agent the steps left in every tool result.
        backend: ``"text"`` (fast, default) or ``"playwright"`` (real Chromium).
        browser_javascript: run corpus pages' scripts in Chromium (``backend="playwright"`` only; off by
            default: the builtin site needs none).
        candidates: put ``info["candidates"]``: valid complete actions for this state.
        summary_choices: with ``candidates``, every compaction (forced or chosen) offers two summaries: the
            complete one (the pages read and the facts noted) first, then a lossy one (the pages read, no notes).
            What a session hands on is then the policy's choice, not the env's.
        allow_compact, allow_fork: which multi-session tools exist (the registered variants set these).
        token_counter: ``Callable[[str], int]`` counting tokens (default: about 4 characters a token).
        chunk_tokens: how much of a page one ``open``/``scroll`` shows.
        render_mode: ``"ansi"`` or ``None``.
    """

    # render_fps: text frames have no natural rate; declared so that players and check_env have one.
    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        site: str | Site = "builtin",
        site_seed: int = 0,
        site_size: int = 2000,
        split: str = "train",
        hops: int | tuple[int, int] | None = None,
        families: str | Sequence[str] | None = None,
        compare_answer: str = "name",
        max_steps: int | tuple[int, int] | Sequence[int] = 64,
        session_max_tokens: int = 4096,
        overflow: str = "force_compact",
        max_sessions: int = 16,
        max_fork_depth: int = 2,
        show_budget: bool = True,
        backend: str = "text",
        browser_javascript: bool = False,
        candidates: bool = False,
        summary_choices: bool = False,
        allow_compact: bool = True,
        allow_fork: bool = True,
        token_counter: TokenCounter | None = None,
        chunk_tokens: int = CHUNK_TOKENS,
        render_mode: str | None = None,
        **unknown: Any,
    ):
        if unknown:
            raise TypeError(_unknown_kwargs_message(unknown))
        if overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"overflow={shown(overflow)} is unknown: use one of {OVERFLOW_POLICIES}")
        if split not in ("train", "test", "all"):
            raise ValueError(f"split={shown(split)} is unknown: use 'train', 'test' or 'all'")
        if compare_answer not in COMPARE_ANSWERS:
            raise ValueError(f"compare_answer={shown(compare_answer)} is unknown: use 'name' (the winner) or 'year' "
                             f"(the winning year)")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={shown(render_mode)} is not supported: use 'ansi' or None")
        session_max_tokens = check_int("session_max_tokens", session_max_tokens, minimum=1)
        max_sessions = check_int("max_sessions", max_sessions, minimum=1)
        chunk_tokens = check_int("chunk_tokens", chunk_tokens, minimum=1)
        max_fork_depth = check_int("max_fork_depth", max_fork_depth, minimum=0)
        show_budget = check_bool("show_budget", show_budget)
        candidates = check_bool("candidates", candidates)
        summary_choices = check_bool("summary_choices", summary_choices)
        allow_compact = check_bool("allow_compact", allow_compact)
        allow_fork = check_bool("allow_fork", allow_fork)
        # Checked now, not at the first reset; every count it returns is checked where it is used.
        count_tokens: TokenCounter = approx_tokens if token_counter is None else CheckedCounter(token_counter)
        hops = _check_hops(hops)
        self._budget_spec = _check_budget(max_steps)
        self.site = load_site(site, site_seed=site_seed, site_size=site_size)
        self.tasks = self.site.tasks_for(None if split == "all" else split, hops)
        if not self.tasks:
            raise ValueError(_no_tasks_message(self.site, split, hops))
        if families is not None:
            wanted = _check_families(families, {t.family for t in self.site.tasks})
            self.tasks = [t for t in self.tasks if t.family in wanted]
            if not self.tasks:
                raise ValueError(f"no {split!r} task with hops={hops!r} is of families {sorted(wanted)} on site "
                                 f"{self.site.name!r}: widen hops or families")
        self.compare_answer = compare_answer
        self.tasks = [self._asked(t) for t in self.tasks]
        self.session_max_tokens = session_max_tokens
        self.overflow = overflow
        self.max_sessions = max_sessions
        self.max_fork_depth = max_fork_depth
        self.show_budget = show_budget
        self.candidates = candidates
        self.summary_choices = summary_choices
        self.allow_compact = allow_compact
        self.allow_fork = allow_fork
        self.count_tokens = count_tokens
        self.render_mode = render_mode
        self.tools = [t for t in TOOL_ARGS if (t != "compact" or allow_compact)
                      and (t not in ("fork", "finish") or allow_fork)]
        self._system = system_prompt(self.tools)
        self.backend: Backend = make_backend(backend, self.site, chunk_tokens, browser_javascript)
        self.web_tools = WebTools(self.site, self.backend)
        self.candidate_maker = Candidates(self.site, allow_compact=allow_compact, allow_fork=allow_fork,
                                          max_fork_depth=max_fork_depth, summary_choices=summary_choices)
        # What is really sent. An observation is a session's context, kept within session_max_tokens (about
        # 16k characters at the default window and counter) until one step overshoots it; its bound is the most
        # AsyncVectorEnv's shared memory carries, every observation that fits being at most that many
        # characters (UTF-8 takes a byte a character or more). The window cannot bound it: the token counter is
        # the user's, and an action is kept in the context verbatim. An action is read to MAX_ACTION_CHARS.
        self.observation_space = AnyText(max_length=SHARED_MEMORY_BYTES)
        self.action_space = AnyText(max_length=MAX_ACTION_CHARS)
        self.state: EpisodeState | None = None

    # ------------------------------------------------------------------------------------------------
    # Gymnasium API
    # ------------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id", "max_steps", "snapshot"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}: use task_id, max_steps or snapshot")
        self.backend.new_episode()
        if options.get("snapshot") is not None:
            snap = options["snapshot"]
            if not isinstance(snap, Snapshot):
                raise TypeError("options['snapshot'] must come from envs.view(env).snapshot()")
            self.state = snap.state.copy()
            self.np_random.bit_generator.state = copy.deepcopy(snap.rng_state)
            return self._observation(), self._info(acted=None, error=None)
        if options.get("task_id") is not None:
            task = self.task(options["task_id"])
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if options.get("max_steps") is not None:
            max_steps = options["max_steps"]
            if not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
                raise ValueError(f"options['max_steps'] must be a positive int, got {max_steps!r}")
            max_steps = int(max_steps)
        else:
            max_steps = self._sample_budget()
        self.state = EpisodeState(task=task, max_steps=max_steps, sessions=[], stack=[])
        root = self._new_session(parent=None, kind="root", depth=0, opening=task_message(task.question))
        self.state.stack.append(root.id)
        return self._observation(), self._info(acted=None, error=None)

    def step(self, action: str):
        state = self.state
        if state is None:
            raise RuntimeError("call reset() before step()")
        if state.done:
            raise RuntimeError("the episode has ended; call reset() to start another")
        session = state.sessions[state.stack[-1]]
        state.steps_used += 1
        session.steps += 1
        # An action that is not text is shown by its type: its repr() may raise, or be as long as it is big.
        text = as_text(action)
        self._append(session, "assistant", f"<not text: {type_name(action)}>" if text is None else text, out=True)
        reward, terminated, truncation = 0.0, False, None
        error: str | None = None
        parsed: Action | None = None
        called = False  # whether the action held a readable tool call (the study's parse rate)
        try:
            if session.must_compact and text is not None:
                parsed, error, called = self._forced_compaction(text)
            else:
                parsed = parse_action(action)
                called = True
            reward, terminated, truncation = self._execute(session, parsed)
        except ActionError as err:
            error = str(err)
            self._tool_result(session, f"Error: {error}")
        except BrowserCrashed:
            # The backend already restarted its browser once and failed again: this episode cannot go on.
            truncation = "browser_crashed"
        self._log_step(session, parsed.name if parsed is not None else None, error, called)
        if not terminated and truncation is None:
            truncation = self._check_limits()
        info = self._info(acted=session, error=error)
        if truncation == "context_overflow" and self.overflow == "terminate":
            terminated, truncation = True, None
            info["termination_reason"] = "context_overflow"
        if terminated or truncation is not None:
            state.done = True
            if truncation is not None:
                info["truncation_reason"] = truncation
            info["trajectory"] = self.trajectory()
        return self._observation(), reward, terminated, truncation is not None, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.state is None:
            return None
        s = self.state.sessions[self.state.stack[-1]]
        header = (f"[task {self.state.task.id} | session {s.id} ({s.kind}, depth {s.depth}) | "
                  f"step {self.state.steps_used}/{self.state.max_steps} | {s.tokens} tokens]\n")
        return header + self._observation()

    def close(self) -> None:
        self.backend.close()

    # ------------------------------------------------------------------------------------------------
    # Snapshots and the session tree
    # ------------------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A picklable copy of the episode so far; ``reset(options={"snapshot": s})`` resumes from it."""
        if self.state is None:
            raise RuntimeError("call reset() before snapshot()")
        return Snapshot(self.state.copy(), copy.deepcopy(dict(self.np_random.bit_generator.state)))

    def trajectory(self) -> dict[str, Any]:
        """Success, answers and the session tree of the episode so far."""
        state = self._require_state()
        return {
            "task_id": state.task.id,
            "success": state.success,
            "answer": state.final_answer,
            "gold_answer": state.task.answer,
            "steps_used": state.steps_used,
            "max_steps": state.max_steps,
            "sessions": self.session_tree(),
            "step_log": [dict(record) for record in state.log],
        }

    def _log_step(self, session: Session, tool: str | None, error: str | None, called: bool) -> None:
        """Record the step just taken for :meth:`trajectory`: which session acted, with which tool, and how it
        stands to the task's gold path (what the study's step-quality and recovery metrics read).

        ``gold`` and ``off_path`` are :func:`envs.grading.step_marks` (both false for a step the env rejected): the
        step first reaches a page of the gold path or gives the right answer or sub-answer; it leaves the path or
        answers wrong. Nothing of this reaches the agent before the episode ends. ``call`` says whether the action
        held a readable tool call (a reply to a full context that was no call at all, and became the summary, did
        not).
        """
        state = self._require_state()
        gold = off_path = False
        if error is None:
            gold, off_path = grading.step_marks(
                self.site, state.task, tool, url=session.page.url if session.page is not None else None,
                reached=state.gold_reached, success=state.success, fork_task=session.fork_task, result=session.handoff)
        state.log.append({"session": session.id, "tool": tool, "error": error is not None, "gold": gold,
                          "off_path": off_path, "call": called})

    def session_tree(self) -> list[dict[str, Any]]:
        """The sessions so far, in order of creation (a session's id is its index): fresh dicts with ``id``,
        ``parent`` (``None`` for the root), ``kind``, ``depth``, ``task`` (a subagent's task, else ``None``),
        ``steps``, ``handoff``, ``tokens_in``, ``tokens_out`` and ``context_tokens``; ``trajectory()["sessions"]``."""
        return [
            {"id": s.id, "parent": s.parent, "kind": s.kind, "depth": s.depth, "task": s.fork_task,
             "steps": s.steps, "handoff": s.handoff, "tokens_in": s.tokens_in, "tokens_out": s.tokens_out,
             "context_tokens": s.tokens}
            for s in self._require_state().sessions
        ]

    def view(self) -> EnvView:
        """This env's site, tasks and settings, read-only (:class:`EnvView`); :func:`view` reaches it through
        wrappers."""
        return EnvView(site=self.site, tasks=tuple(self.tasks), session_max_tokens=self.session_max_tokens,
                       chunk_tokens=self.backend.chunk_tokens, max_sessions=self.max_sessions,
                       max_fork_depth=self.max_fork_depth, allow_compact=self.allow_compact,
                       allow_fork=self.allow_fork, candidates=self.candidates, summary_choices=self.summary_choices,
                       _env=self)

    def acting_session(self) -> SessionView:
        """The browser state of the session that acts next (its page, the part on screen, the pages it read)."""
        state = self._require_state()
        s = state.sessions[state.stack[-1]]
        return SessionView(id=s.id, page=s.page, chunk=s.chunk, pages_read=tuple(s.pages_read))

    # ------------------------------------------------------------------------------------------------
    # Executing one tool call
    # ------------------------------------------------------------------------------------------------
    def _execute(self, session: Session, action: Action) -> tuple[float, bool, str | None]:
        name, arg = action.name, action.arg
        if name not in self.tools:
            raise ActionError(f"{name} is not available in this environment; the tools are {', '.join(self.tools)}")
        if name in WEB_TOOLS:
            result = self.web_tools.run(session, name, arg)
            self._tool_result(session, result.text, mentions_of=result.mentions_of)
        elif name == "answer":
            if session.depth > 0:
                raise ActionError(ANSWER_IN_SUBAGENT)
            return self._answer(session, str(arg))
        elif name == "compact":
            return 0.0, False, self._compact(session, str(arg))
        elif name == "fork":
            return 0.0, False, self._fork(session, str(arg))
        elif name == "finish":
            self._finish(session, str(arg))
        return 0.0, False, None

    def _answer(self, session: Session, text: str) -> tuple[float, bool, None]:
        state = self._require_state()
        state.final_answer = text
        state.success = grading.answer_right(state.task, text)
        session.handoff = text
        self._tool_result(session, "Answer submitted.", budget=False)
        return grading.answer_reward(state.success), True, None

    def _compact(self, session: Session, summary: str) -> str | None:
        state = self._require_state()
        summary = self._cap_handoff(summary)
        session.handoff = summary
        session.must_compact = False
        if len(state.sessions) >= self.max_sessions:
            return "max_sessions"
        opening = task_message(state.task.question, summary=summary, fork_task=session.fork_task)
        new = self._new_session(parent=session.id, kind="compact", depth=session.depth, opening=opening,
                                fork_task=session.fork_task)
        state.stack[-1] = new.id
        return None

    def _fork(self, session: Session, task: str) -> str | None:
        state = self._require_state()
        if session.depth + 1 > self.max_fork_depth:
            return "max_fork_depth"
        if len(state.sessions) >= self.max_sessions:
            return "max_sessions"
        child = self._new_session(parent=session.id, kind="fork", depth=session.depth + 1,
                                  opening=task_message(state.task.question, fork_task=task), fork_task=task)
        state.stack.append(child.id)
        return None

    def _finish(self, session: Session, result: str) -> None:
        state = self._require_state()
        if session.depth == 0:
            raise ActionError(FINISH_IN_ROOT)
        result = self._cap_handoff(result)
        session.handoff = result
        state.stack.pop()
        parent = state.sessions[state.stack[-1]]
        state.answered_forks.append(session.fork_task or "")
        self._tool_result(parent, f"[Subagent result for {session.fork_task!r}]\n{result}", mentions_of=result)

    def _forced_compaction(self, text: str) -> tuple[Action, str | None, bool]:
        """The reply to a full context is its summary: a compact() call's argument, or the reply itself (then
        reported as an action error, since the agent was asked for compact(summary)); and whether the reply held
        a readable call at all."""
        try:
            action = parse_action(text)
        except ActionError:
            action = None
        if action is not None and action.name == "compact":
            return action, None, True
        # Cut where the parser stops reading: a longer reply still becomes a summary, in time linear in the cap.
        return (Action("compact", strip_think(text[:MAX_ACTION_CHARS]).strip()),
                REPLY_BECAME_SUMMARY, action is not None)

    def _cap_handoff(self, text: str) -> str:
        """A summary or result longer than half a window is cut, so the next session can start."""
        limit = self.session_max_tokens // 2
        tokens = self.count_tokens(text)
        if tokens <= limit:
            return text
        return text[: max(0, len(text) * limit // tokens - 40)] + " [cut: longer than half a context window]"

    # ------------------------------------------------------------------------------------------------
    # Contexts
    # ------------------------------------------------------------------------------------------------
    def _new_session(self, parent: int | None, kind: str, depth: int, opening: str,
                     fork_task: str | None = None) -> Session:
        state = self._require_state()
        sid = len(state.sessions)
        session = Session(id=sid, parent=parent, kind=kind, depth=depth, messages=[], pieces=[], tokens=0,
                          fork_task=fork_task)
        state.sessions.append(session)
        self._append(session, "system", self._system)
        mentions = opening
        if self.show_budget:
            opening += "\n" + budget_note(state.max_steps - state.steps_used)
        self._append(session, "user", opening, mentions_of=mentions)
        return session

    def _append(self, session: Session, role: str, content: str, out: bool = False, mentions_of: str = "") -> None:
        piece = f"{ROLE_TAG[role]}\n{content}\n"
        tokens = self.count_tokens(piece)
        session.messages.append({"role": role, "content": content})
        session.pieces.append(piece)
        session.tokens += tokens
        if out:
            session.tokens_out += tokens
        elif role == "user":
            session.tokens_in += tokens
        if mentions_of:
            self.candidate_maker.record(session, mentions_of)

    def _tool_result(self, session: Session, text: str, mentions_of: str = "", budget: bool = True) -> None:
        state = self._require_state()
        if budget and self.show_budget:
            text += "\n" + budget_note(state.max_steps - state.steps_used)
        self._append(session, "user", text, mentions_of=mentions_of)

    def _check_limits(self) -> str | None:
        """After a step: the budget, then the context window of the session that acts next."""
        state = self._require_state()
        if state.steps_used >= state.max_steps:
            return "max_steps"
        session = state.sessions[state.stack[-1]]
        if session.tokens <= self.session_max_tokens or session.must_compact:
            return None
        if self.overflow == "force_compact" and self.allow_compact:
            session.must_compact = True
            self._append(session, "user", context_full_note(session.tokens, self.session_max_tokens))
            return None
        return "context_overflow"

    def _observation(self) -> str:
        state = self._require_state()
        # The observation is the one copy of the whole context a step makes.
        return "".join([*state.sessions[state.stack[-1]].pieces, _GENERATION_PROMPT])

    def _info(self, acted: Session | None, error: str | None) -> dict[str, Any]:
        state = self._require_state()
        s = state.sessions[state.stack[-1]]
        info: dict[str, Any] = {
            "task_id": state.task.id,
            "session_id": s.id,
            "acted_session_id": acted.id if acted is not None else NO_SESSION,
            "session_kind": s.kind,
            "parent_id": s.parent if s.parent is not None else NO_SESSION,
            "session_task": s.fork_task if s.fork_task is not None else state.task.question,
            "depth": s.depth,
            "steps_used": state.steps_used,
            "steps_left": state.max_steps - state.steps_used,
            "max_steps": state.max_steps,
            "num_sessions": len(state.sessions),
            "context_tokens": s.tokens,
            "messages": list(s.messages),
            "action_error": error,
            "must_compact": s.must_compact,
        }
        if self.candidates:
            info["candidates"] = self.candidate_actions()
        return info

    def _require_state(self) -> EpisodeState:
        if self.state is None:
            raise RuntimeError("call reset() first")
        return self.state

    def _sample_budget(self) -> int:
        spec = self._budget_spec
        if isinstance(spec, int):
            return spec
        if isinstance(spec, tuple):
            return int(self.np_random.integers(spec[0], spec[1] + 1))
        return int(spec[int(self.np_random.integers(len(spec)))])

    # ------------------------------------------------------------------------------------------------
    # Candidates and tasks
    # ------------------------------------------------------------------------------------------------
    def candidate_actions(self) -> list[str]:
        """Valid complete actions for the session that acts next, in a deterministic order
        (:meth:`envs.candidates.Candidates.actions`): ``info["candidates"]``."""
        state = self._require_state()
        return self.candidate_maker.actions(state.task, state.answered_forks, state.sessions[state.stack[-1]])

    def task(self, task_id: str) -> Task:
        """The site's task ``task_id`` as this env asks it (``compare_answer``); a ``KeyError`` naming known ids
        for an unknown one."""
        return self._asked(self.site.task(task_id))

    def _asked(self, task: Task) -> Task:
        return answering_with_year(task) if self.compare_answer == "year" else task


def view(env: gym.Env | EnvView) -> EnvView:
    """The :class:`EnvView` of a WebQA env, through any wrappers (``env.get_wrapper_attr("view")``); an
    :class:`EnvView` is its own.

    Raises:
        TypeError: ``env`` is not a WebQA env.

    Example:
        >>> import gymnasium as gym, envs
        >>> env = gym.make("mosaic/WebQA-Compact-v0", site_size=120, split="test")
        >>> seen = envs.view(env)
        >>> seen.allow_compact, seen.allow_fork, seen.task(seen.tasks[0].id) == seen.tasks[0]
        (True, False, True)
    """
    if isinstance(env, EnvView):
        return env
    try:
        make = env.get_wrapper_attr("view")
    except AttributeError:
        make = None
    seen = make() if callable(make) else None
    if not isinstance(seen, EnvView):
        raise TypeError(f"{type(getattr(env, 'unwrapped', env)).__name__} is not a WebQA env (mosaic/WebQA-*): "
                        "it has no view")
    return seen


def _check_budget(spec: Any) -> int | tuple[int, int] | list[int]:
    """An int, a ``(lo, hi)`` range (kept as a tuple) or a list of choices (kept as a list); never a bool."""
    if is_int(spec):
        if spec < 1:
            raise ValueError(f"max_steps must be >= 1, got {shown(spec)}")
        return int(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and all(is_int(v) for v in spec):
        lo, hi = int(spec[0]), int(spec[1])
        if not 1 <= lo <= hi:
            raise ValueError(f"max_steps range must be (lo, hi) with 1 <= lo <= hi, got {shown(spec)}")
        return lo, hi
    if isinstance(spec, (list, tuple)) and spec and all(is_int(v) and v >= 1 for v in spec):
        return [int(v) for v in spec]
    raise ValueError(f"max_steps must be an int, a (lo, hi) range or a list of ints, got {shown(spec)}")


def _check_families(families: Any, known: set[str]) -> set[str]:
    """A family name or a list of names, each one the site has."""
    names = [families] if isinstance(families, str) else families
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"families must be a family name or a list of names, got {shown(families)}")
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"families {unknown} are unknown on this site: its task families are {sorted(known)}")
    return set(names)


def _check_hops(hops: Any) -> int | tuple[int, int] | None:
    """``None``, a whole number >= 1, or an inclusive ``(lo, hi)`` range (kept as a tuple of ints)."""
    if hops is None:
        return None
    if is_int(hops) and hops >= 1:
        return int(hops)
    if isinstance(hops, (tuple, list)) and len(hops) == 2 and all(is_int(h) for h in hops):
        if 1 <= hops[0] <= hops[1]:
            return int(hops[0]), int(hops[1])
    raise ValueError(f"hops must be None, a whole number >= 1 or a (lo, hi) range with 1 <= lo <= hi, "
                     f"got {shown(hops)}")


def _no_tasks_message(site: Site, split: str, hops: int | tuple[int, int] | None) -> str:
    """Why ``site`` offers no task of ``split`` and ``hops``, and what to do about it."""
    if not site.tasks:
        return (f"site {site.name!r} has no tasks to ask: add a {TASKS_FILE} beside its pages, one task a line, "
                f"e.g. {TASK_EXAMPLE} (README, 'Your own corpus')")
    in_split = site.tasks_for(None if split == "all" else split)
    if not in_split:
        splits = sorted({t.split for t in site.tasks})
        return (f"site {site.name!r} has no {split!r} tasks (its {len(site.tasks)} tasks are {' and '.join(splits)}): "
                f"use split='all', or give tasks a \"split\" in {TASKS_FILE}")
    available = sorted({t.hops for t in in_split})
    return f"no {split!r} task has hops={hops!r} on site {site.name!r}; available hops: {available}"


def _unknown_kwargs_message(unknown: dict[str, Any]) -> str:
    known = [p for p in inspect.signature(WebQAEnv.__init__).parameters if p not in ("self", "unknown")]
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"unknown WebQAEnv argument {', '.join(parts)}; the arguments are: {', '.join(known)}"
