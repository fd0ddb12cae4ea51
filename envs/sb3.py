"""The WebQA environments for Stable-Baselines3: a discrete choice among the env's candidate actions.

Stable-Baselines3 takes no text spaces. :class:`CandidateActions` turns a WebQA env made with
``candidates=True`` into one with a ``Discrete(max_candidates)`` action (index ``i`` executes the ``i``-th
candidate action string), an action mask in the form sb3-contrib's ``MaskablePPO`` reads, and a fixed-size
numeric observation built from the same context a text agent sees. Rewards, termination, truncation and
``info`` are the underlying env's, step for step.

Example:
    >>> from envs.sb3 import make_sb3_env
    >>> env = make_sb3_env(site_size=150, hops=1, max_steps=8)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape == env.observation_space.shape, int(env.action_masks().sum()) == len(env.candidates)
    (True, True)
    >>> obs, reward, terminated, truncated, info = env.step(0)
    >>> info["action_text"] == info["messages"][-2]["content"], info["steps_used"]
    (True, 1)

With Stable-Baselines3's ``make_vec_env``, pass :func:`make_sb3_env` itself, or the id with
``wrapper_class=CandidateActions`` and ``render_mode`` in ``env_kwargs`` (for a string id it asks for
``"rgb_array"``, which a text env does not render)::

    make_vec_env(make_sb3_env, n_envs=4, env_kwargs={"site_size": 1000, "hops": 1})
    make_vec_env("mosaic/WebQA-v0", n_envs=4, wrapper_class=CandidateActions,
                 env_kwargs={"site_size": 1000, "render_mode": None})
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from .actions import TOOL_ARGS, parse_action
from .prompts import budget_note
from .session import SessionView
from .webqa import EnvView, view

__all__ = ["CandidateActions", "fit_candidates", "make_sb3_env"]

TOOLS = tuple(TOOL_ARGS)
SESSION_KINDS = ("root", "compact", "fork")
SLOT_FEATURES = len(TOOLS) + 7
GLOBAL_FEATURES = 12 + len(SESSION_KINDS)
#: Sent to the underlying env for a masked index: it holds no tool call, so it costs a step as an error.
INVALID_ACTION = "(no action: the chosen index is not one of the valid candidates)"

_WORD = re.compile(r"[^\W_]+")
# Question words that say nothing about which line answers it.
_STOPWORDS = frozenset(
    "a an and at by did do does for from in is of on or the to was were what when where which who whom whose "
    "with".split()
)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _content_words(text: str) -> set[str]:
    return {w for w in _words(text) if w not in _STOPWORDS}


class CandidateActions(gym.Wrapper[np.ndarray, np.int64, str, str], gym.utils.RecordConstructorArgs):
    """A WebQA env as ``Discrete(max_candidates)`` over its candidate actions, with a mask and numeric features.

    **Actions.** Slot ``i`` is the ``i``-th of the env's candidates (``info["candidates"]``, in the env's order).
    When there are more than ``max_candidates``, ``open(n)`` link candidates are dropped from the last one
    backwards until the rest fit (links are the only long group: a page can show dozens, while searches,
    scrolls, compact, forks and answers are few), then any remainder is cut from the end. :meth:`action_masks`
    is true exactly on the slots that hold a candidate (:attr:`candidates` lists them; ``info["candidates"]``
    stays the env's full list). It can be all false, e.g. at the start of a corpus task that names no search
    queries; MaskablePPO then picks any index. A masked or out-of-range index is not an exception: the
    underlying env steps :data:`INVALID_ACTION`, which costs a step and comes back as ``info["action_error"]``
    (while a full context waits for its summary, the env takes any reply as that summary, so there it compacts).
    ``info["action_text"]`` is the string that was stepped.

    **Observation.** A ``float32`` vector in ``[0, 1]``, blocks in this order:

    1. *question* (``hash_dims``): which hashed words (``zlib.crc32`` of each lower-cased word, modulo
       ``hash_dims``) occur in the acting session's task (the question, or a fork's sub-question).
    2. *last tool result* (``hash_dims``): the same over the last message the env showed the session (the
       latest tool result; after reset, the task), without its steps-left note.
    3. *slots* (``max_candidates * SLOT_FEATURES``), per slot: the tool's one-hot (in ``TOOL_ARGS`` order);
       valid; its text in the question (the text: a search query, the visible text of ``open(n)``'s link, an
       answer, ...); the share of its words that are question words; its text in the last tool result;
       support: over the lines of the session's tool results that contain its text, the largest share of the
       question's other content words that the line holds (how well a seen value answers the question);
       already visited (a search run or a page opened in this session); its position among the candidates of
       its tool (0 first, 1 last). An empty slot is all zeros.
    4. *budget and sessions* (``GLOBAL_FEATURES``): steps left / max steps; 1 / steps left; steps used / max
       steps; depth / max fork depth; sessions / max sessions; context tokens / window (capped at 1); context
       full (must compact); a page is open; the part of the page on screen (0 top, 1 bottom); the last action
       was an error; candidates / ``max_candidates`` (capped at 1); candidates were dropped; the session kind's
       one-hot (root, compact, fork).

    Args:
        env: a WebQA env (``gym.make("mosaic/WebQA-v0", ...)``, any wrappers); candidates are switched on.
        max_candidates: the number of discrete actions N. The default is above the most candidates that random
            rollouts met on builtin sites (46), so there it rarely drops any.
        hash_dims: buckets of each hashed bag of words.

    Raises:
        TypeError: when ``env`` is not a WebQA env.

    Example:
        >>> import gymnasium as gym, envs
        >>> env = CandidateActions(gym.make("mosaic/WebQA-v0", site_size=150, hops=1), max_candidates=16)
        >>> env.action_space, env.observation_space.shape
        (Discrete(16), (383,))
    """

    def __init__(self, env: gym.Env, max_candidates: int = 64, hash_dims: int = 64):
        # Recorded so that env.spec can remake the wrapped env (check_env's render check does).
        gym.utils.RecordConstructorArgs.__init__(self, max_candidates=max_candidates, hash_dims=hash_dims)
        super().__init__(env)
        view(env)  # a TypeError for an env that is no WebQA env
        for name, value in (("max_candidates", max_candidates), ("hash_dims", hash_dims)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        # The discrete actions are the candidates: the env must list them in every info.
        env.set_wrapper_attr("candidates", True)
        self.webqa: EnvView = view(env)
        self.max_candidates = max_candidates
        self.hash_dims = hash_dims
        size = 2 * hash_dims + max_candidates * SLOT_FEATURES + GLOBAL_FEATURES
        self.action_space = gym.spaces.Discrete(max_candidates)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32)
        self.candidates: list[str] = []
        self._dropped = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        _, info = self.env.reset(seed=seed, options=options)
        return self._observe(info), info

    def step(self, action: int | np.integer):
        index = int(action)
        text = self.candidates[index] if 0 <= index < len(self.candidates) else INVALID_ACTION
        # gymnasium types a wrapper's self.env with the wrapper's own action type (int64); the inner env takes text.
        _, reward, terminated, truncated, info = self.env.step(text)  # type: ignore[arg-type]
        info["action_text"] = text
        return self._observe(info), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Which of the ``max_candidates`` indices hold a valid candidate now (``MaskablePPO`` reads this)."""
        mask = np.zeros(self.max_candidates, dtype=bool)
        mask[: len(self.candidates)] = True
        return mask

    # ------------------------------------------------------------------------------------------------
    # Observation
    # ------------------------------------------------------------------------------------------------
    def _observe(self, info: dict[str, Any]) -> np.ndarray:
        self.candidates, self._dropped = fit_candidates(info["candidates"], self.max_candidates)
        session = self.webqa.acting_session()
        last = info["messages"][-1]["content"]
        note = budget_note(info["steps_left"])
        last = last[: -len(note)] if last.endswith(note) else last
        return np.concatenate([
            self._hashed(info["session_task"]),
            self._hashed(last),
            self._slots(session, info["messages"], info["session_task"], last),
            self._globals(session, info),
        ]).astype(np.float32)

    def _hashed(self, text: str) -> np.ndarray:
        out = np.zeros(self.hash_dims, dtype=np.float32)
        for word in set(_words(text)):
            out[zlib.crc32(word.encode()) % self.hash_dims] = 1.0
        return out

    def _slots(self, session: SessionView, messages: list[dict[str, str]], question: str, last: str) -> np.ndarray:
        out = np.zeros((self.max_candidates, SLOT_FEATURES), dtype=np.float32)
        question_folded, last_folded = question.casefold(), last.casefold()
        question_words = _content_words(question)
        # Tool results only: the opening repeats the question, which would support every value it names.
        lines = [(line.casefold(), _content_words(line)) for m in messages[2:] if m["role"] == "user"
                 for line in m["content"].splitlines()]
        actions = [parse_action(c) for c in self.candidates]
        for i, action in enumerate(actions):
            text = self._slot_text(session, action.name, action.arg)
            folded, words = text.casefold(), set(_words(text))
            others = question_words - words
            support = max((len(others & line_words) / len(others) for line, line_words in lines
                           if folded and folded in line), default=0.0) if others else 0.0
            same_tool = [j for j, other in enumerate(actions) if other.name == action.name]
            out[i, TOOLS.index(action.name)] = 1.0
            out[i, len(TOOLS):] = (
                1.0,
                float(bool(folded) and folded in question_folded),
                len(words & question_words) / len(words) if words else 0.0,
                float(bool(folded) and folded in last_folded),
                support,
                float(self._visited(session, action.name, text)),
                same_tool.index(i) / max(1, len(same_tool) - 1),
            )
        return out.ravel()

    @staticmethod
    def _slot_text(session: SessionView, tool: str, arg: str | int) -> str:
        """What a slot names: ``open(n)``'s link text, a summary's first line, or the argument itself."""
        if tool == "open" and isinstance(arg, int) and session.page is not None and arg <= len(session.page.links):
            return session.page.links[arg - 1].text
        if tool in ("scroll", "compact"):
            # A direction or a long summary names nothing a question could mention.
            return ""
        return str(arg)

    @staticmethod
    def _visited(session: SessionView, tool: str, text: str) -> bool:
        if tool == "search":
            return f"Search: {text}" in session.pages_read
        return tool == "open" and text in session.pages_read

    def _globals(self, session: SessionView, info: dict[str, Any]) -> np.ndarray:
        env = self.webqa
        steps_left, max_steps = info["steps_left"], info["max_steps"]
        page = session.page
        chunks = len(page.chunks) if page is not None else 0
        kind = np.zeros(len(SESSION_KINDS), dtype=np.float32)
        kind[SESSION_KINDS.index(info["session_kind"])] = 1.0
        return np.concatenate([np.array([
            steps_left / max_steps,
            1.0 / max(1, steps_left),
            info["steps_used"] / max_steps,
            info["depth"] / max(1, env.max_fork_depth),
            info["num_sessions"] / env.max_sessions,
            min(1.0, info["context_tokens"] / env.session_max_tokens),
            float(info["must_compact"]),
            float(page is not None),
            session.chunk / (chunks - 1) if chunks > 1 else 0.0,
            float(info["action_error"] is not None),
            min(1.0, len(info["candidates"]) / self.max_candidates),
            float(self._dropped),
        ], dtype=np.float32), kind])


def fit_candidates(candidates: Sequence[str], limit: int) -> tuple[list[str], bool]:
    """The candidates that get a slot, and whether any were dropped (see :class:`CandidateActions`).

    Example:
        >>> fit_candidates(['search("x")', "open(1)", "open(2)", "open(3)", 'answer("y")'], 4)
        (['search("x")', 'open(1)', 'open(2)', 'answer("y")'], True)
    """
    out = list(candidates)
    excess = len(out) - limit
    if excess <= 0:
        return out, False
    links = [i for i, c in enumerate(out) if parse_action(c).name == "open"]
    drop = set(links[len(links) - min(excess, len(links)):])
    out = [c for i, c in enumerate(out) if i not in drop]
    return out[:limit], True


def make_sb3_env(env_id: str = "mosaic/WebQA-v0", max_candidates: int = 64, hash_dims: int = 64,
                 **kwargs: Any) -> CandidateActions:
    """``gym.make(env_id, candidates=True, **kwargs)`` wrapped in :class:`CandidateActions`.

    Example:
        >>> env = make_sb3_env(site_size=150, hops=1, max_candidates=8)
        >>> env.action_space
        Discrete(8)
    """
    return CandidateActions(gym.make(env_id, candidates=True, **kwargs), max_candidates=max_candidates,
                            hash_dims=hash_dims)
