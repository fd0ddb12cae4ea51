"""An agent over any Transformers causal LM: batched sampling with per-session KV caches, or candidate choice.

Per env of a batch, :class:`LLMAgent` keeps one cache per session (``info["session_id"]``): a session's
context only grows, so each step feeds the model just the tokens that are new since the last step. It is a
:class:`agents.base.RecordingAgent`: :meth:`LLMAgent.act_batch_recorded` returns, with the actions, one
:class:`agents.records.AgentStep` per env (the tokens the model conditioned on, the tokens it produced and
their log-probs) for learners; :func:`agents.records.pack_session` turns a session's steps into training
sequences. Candidates are scored by :func:`agents.lm.score_tree`, the scorer the learner uses too.

Example:
    >>> from agents.models import load_model
    >>> from envs.prompts import render_transcript
    >>> model, tokenizer = load_model("tiny-1m", texts=['search("Edra Vane")'] * 30)
    >>> agent = LLMAgent(model, tokenizer, max_new_tokens=8, seed=0)
    >>> messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Who?"}]
    >>> info = {"session_id": 0, "messages": messages}
    >>> (action,), (step,) = agent.act_batch_recorded([render_transcript(messages)], [info])
    >>> step.text == action and len(step.gen_ids) == len(step.logprobs) <= 8
    True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Hashable, Sequence, cast

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from envs.actions import call_complete
from envs.prompts import render_transcript

from .attention import use_skip_hidden_keys
from .base import RecordingAgent
from .lm import (Branch, cache_kwarg, cache_rows, candidate_log_policy, keys_values, padded_causal_mask, reserved_cache,
                 score_tree)
from .records import AgentStep

KV = tuple[tuple[torch.Tensor, torch.Tensor], ...]
"""Per layer, keys and values of one sequence: ``[1, kv_heads, length, head_dim]`` each."""

def tool_call_complete(text: str) -> bool:
    """Whether ``text`` holds a finished tool call (:func:`envs.actions.call_complete`, the parser's own rule).

    Generation stops there, so a model that would ramble on after its call costs no tokens for it.

    Example:
        >>> tool_call_complete('search("a (b")'), tool_call_complete('search("a)')
        (True, False)
    """
    return call_complete(text)


@dataclass
class _Session:
    """A session's tokens as the agent last saw them, and the keys/values of a prefix of them.

    ``checkpoints`` pairs a text with how many of ``ids`` stand for it, longest first: the prompt and the
    output as tokens, the prompt and the action returned (no trailing eos), the prompt alone.
    """

    ids: list[int]
    checkpoints: list[tuple[str, int]]
    kv: KV | None


@dataclass
class _Row:
    """One sequence of a batched forward pass: cached keys/values (``past`` tokens), then new tokens.

    The pass consumes ``kv``: once it is copied into the batch, the row lets go of it (``None``), so that a
    step holds no session's keys twice.
    """

    kv: KV | None
    new_ids: list[int]
    past: int


class _PrefixStore:
    """The keys/values of recent contexts, for any step whose prompt starts with one: a step takes the longest
    stored prefix of its prompt when it is longer than what its session's own cache holds.

    A context is a session's tokens as the agent last ran them: every step stores its session's (replacing the
    entry its previous step stored, a prefix of it), and a finished episode's stay until pushed out. Keys at a
    position depend only on the tokens up to it (causal attention, each sequence's own positions), so a
    context's keys computed in one session serve any prompt that starts with those ids: the same values up to
    float rounding (another batch, another order of additions). Every session of an env opens with the same
    system message, a group's runs with the same task; and a continuation of Mosaic's rollout estimator starts
    from a state its rollout (or a sibling continuation) already ran, then often takes the same steps again, so
    it computes the keys of none of that again. At most ``capacity`` tokens in all, the least recently used
    dropped first; emptied by the agent when the model's weights change (:func:`_weights_version`).
    """

    MIN_SHARED = 8  # a shorter gain is not worth a lookup's bookkeeping

    def __init__(self, capacity: int | None, max_bytes: int = 0) -> None:
        self.capacity = capacity  # (None: as many tokens as ``max_bytes`` of keys/values hold, known at the first add)
        self.max_bytes = max_bytes
        self._entries: dict[tuple[int, ...], tuple[np.ndarray, KV]] = {}  # (least recently used first)
        self._table: tuple[list[tuple[int, ...]], np.ndarray] | None = None  # every entry's ids, padded with -1

    def clear(self) -> None:
        self._entries.clear()
        self._table = None

    def _shared(self, ids: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """Every entry (its key) and how many leading ids it shares with ``ids``, in one comparison."""
        if self._table is None:
            keys = list(self._entries)
            width = max((len(key) for key in keys), default=0)
            table = np.full((len(keys), width), -1, dtype=np.int64)
            for row, key in enumerate(keys):
                table[row, : len(key)] = self._entries[key][0]
            self._table = keys, table
        keys, table = self._table
        n = min(len(ids), table.shape[1])
        differ = table[:, :n] != ids[:n]  # (padding is -1, never an id: an entry shares at most its length)
        shared = np.where(differ.any(1), differ.argmax(1), n)
        return keys, shared

    def longest_prefix(self, ids: Sequence[int], beyond: int = 0) -> KV | None:
        """Keys/values of the longest stored prefix of ``ids``, leaving at least one id to feed, if it covers at
        least ``MIN_SHARED`` ids more than ``beyond`` (what the caller holds already); else None."""
        if not self._entries:
            return None
        keys, shared = self._shared(np.asarray(ids, dtype=np.int64))
        shared = np.minimum(shared, len(ids) - 1)
        best = int(shared.argmax())
        n = int(shared[best])
        if n < max(beyond + self.MIN_SHARED, self.MIN_SHARED):
            return None
        key = keys[best]
        found = self._entries.pop(key)
        self._entries[key] = found  # most recently used now (the table's rows need no new order)
        return tuple((k[:, :, :n], v[:, :, :n]) for k, v in found[1])

    def add(self, ids: Sequence[int], kv: KV) -> None:
        """Store a context: ``ids`` with the keys/values a step left for them (covering a prefix of them)."""
        n = min(len(ids), kv[0][0].shape[2])
        if self.capacity is None:
            per_token = sum((k.shape[1] * k.shape[3] + v.shape[1] * v.shape[3]) * k.element_size() for k, v in kv)
            self.capacity = self.max_bytes // per_token
        if not self.capacity or n < self.MIN_SHARED or n > self.capacity:
            return
        key = tuple(ids[:n])
        array = np.asarray(key, dtype=np.int64)
        if self._entries:
            keys, shared = self._shared(array)
            if (shared == n).any():
                return  # (its keys are a prefix of a stored context's)
            lengths = np.array([len(k) for k in keys])
            for row in np.flatnonzero(shared == lengths):
                del self._entries[keys[row]]  # (a prefix of this one's)
        self._entries[key] = (array, tuple((k[:, :, :n], v[:, :, :n]) for k, v in kv))
        total = sum(map(len, self._entries))
        while total > self.capacity:
            oldest = next(iter(self._entries))
            del self._entries[oldest]
            total -= len(oldest)
        self._table = None


PREFIX_CACHE_BYTES = 256 << 20
"""The context store's size when ``prefix_cache_tokens`` is not given: 256 MiB of keys and values. The entries of
live sessions are the sessions' own tensors (no copy), so this bounds what finished sessions keep."""


def _weights_version(model: torch.nn.Module) -> tuple[tuple[int, int], ...] | None:
    """Where each weight lives and how often it was written in place (a weight replaced moves, one updated in
    place counts up): what the agent's stores are valid for. None for weights made under
    ``torch.inference_mode``, which keep no version (no store is then trusted past a step)."""
    try:
        return tuple((p.data_ptr(), p._version) for p in model.parameters())
    except RuntimeError:
        return None


class _ScoreStore:
    """The candidate scores of recent choices, by the token ids of their prompt and candidates.

    A choice's scores (each candidate's token log-probs after the prompt) depend only on those ids and the
    weights, and choices repeat: a group's runs open with the same prompt and candidates, a continuation's first
    step is the step it branched from, and a policy that agrees with itself reaches the same states again (in the
    demo's Mosaic iteration, 92% of the continuations' choices and 63% of the rollouts' had been scored before).
    A repeat takes the scores the first computed, so it acts exactly as a pass would have, to float rounding.
    At most ``capacity`` choices, the least recently used dropped first; emptied by the agent when the model's
    weights change (:func:`_weights_version`).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: dict[bytes, tuple[torch.Tensor, list[torch.Tensor]]] = {}  # (least recently used first)

    def clear(self) -> None:
        self._entries.clear()

    @staticmethod
    def key(prompt_ids: Sequence[int], cand_ids: Sequence[Sequence[int]]) -> bytes:
        """A digest of the prompt's and every candidate's ids (each run of ids preceded by its length)."""
        runs = [prompt_ids, *cand_ids]
        flat = np.concatenate([[len(r), *r] for r in runs]).astype(np.int64)
        return hashlib.blake2b(flat.tobytes(), digest_size=16).digest()

    def get(self, key: bytes) -> tuple[torch.Tensor, list[torch.Tensor]] | None:
        """The summed token log-prob of each candidate and their token log-probs, if this choice was scored."""
        found = self._entries.pop(key, None)
        if found is not None:
            self._entries[key] = found  # most recently used now
        return found

    def put(self, key: bytes, sums: torch.Tensor, token_logprobs: list[torch.Tensor]) -> None:
        if not self.capacity:
            return
        self._entries[key] = (sums, token_logprobs)
        while len(self._entries) > self.capacity:
            del self._entries[next(iter(self._entries))]


class LLMAgent(RecordingAgent):
    """An agent over a Transformers causal LM and its tokenizer.

    The prompt is the tokenizer's chat template over ``info["messages"]`` when it has one, else the plain
    transcript of :func:`envs.prompts.render_transcript` (which is the observation string itself).

    Args:
        model: a causal LM with full attention (Llama, Qwen2, SmolLM2, the tiny models of :mod:`agents.models`).
        tokenizer: its tokenizer.
        mode: ``"generate"`` samples an action; ``"choose"`` samples one of ``info["candidates"]`` from the
            softmax of their log-likelihoods.
        temperature: sampling temperature; ``0`` is greedy (argmax).
        max_new_tokens: generation stops here if no tool call ended before.
        device: where to run; default: the model's device.
        seed: seeds the sampling generator: the same seed and inputs give the same actions.
        length_normalize: choose mode: score a candidate by its mean token log-prob instead of the sum.
        reuse_kv: keep each session's keys/values between steps (off: recompute the whole context each step,
            over the same tokens; for checking and for models whose cache cannot be sliced).
        max_score_tokens: choose mode: at most this many cached-plus-new token slots per scoring pass.
        max_prompt_tokens: at most this many new-token slots (envs x the widest prompt's new tokens) per pass over
            the prompts; a batch past it goes through in runs of consecutive envs, into one cache. A pass's
            transients grow with it (the MLP's activations, the attention mask of new x all tokens): a batch of
            24 fresh 1,500-token prompts is 36,000 slots.
        prefix_cache_tokens: keep the keys/values of recent contexts (each session's tokens as a step last ran
            them, a finished episode's too), up to this many tokens in all, and start a step from the longest
            prefix its prompt shares with one of them where that covers more than its session's own cache
            (every session of an env opens with the same system message, a group's with the same task, and a
            continuation of Mosaic's rollout estimator starts where its rollout ran, and often runs the same
            steps again): its prompt pass then feeds only the rest. The keys are the model's as it is: its
            weights changed in place (an optimizer's step, ``load_state_dict``) or replaced empty the store, as
            does :meth:`reset`. ``None`` (the default): as many tokens as :data:`PREFIX_CACHE_BYTES` of this
            model's keys and values hold (65,536 for the 4-layer tiny-1m); ``0``: off.
        score_cache_choices: choose mode: keep the candidate scores of up to this many recent choices, by the
            token ids of their prompt and candidates, and do not score a choice again that repeats one (a
            group's runs open with the same state; a continuation's first step repeats the step it branched
            from). Emptied, like the context store, when the weights change and by :meth:`reset`. ``0``: off.
        examples: messages put after the env's system message in every prompt: a worked exchange that shows a
            small instruct model the call format (:data:`envs.prompts.EXAMPLE_EXCHANGE`; ``()``: none). They
            are the agent's own prefix: the env's window does not count them.

    Example:
        >>> from agents.models import load_model
        >>> model, tokenizer = load_model("tiny-1m", texts=["open(1) open(2)"] * 30)
        >>> agent = LLMAgent(model, tokenizer, mode="choose", temperature=0)
        >>> info = {"session_id": 0, "messages": [{"role": "user", "content": "Go."}],
        ...         "candidates": ["open(1)", "open(2)"]}
        >>> (action,), (step,) = agent.act_batch_recorded([""], [info])
        >>> action in info["candidates"], round(float(step.choice_probs.sum()), 6)
        (True, 1.0)
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        mode: str = "generate",
        temperature: float = 1.0,
        max_new_tokens: int = 256,
        device: str | torch.device | None = None,
        seed: int = 0,
        length_normalize: bool = False,
        reuse_kv: bool = True,
        max_score_tokens: int = 1 << 16,
        max_prompt_tokens: int = 8192,
        prefix_cache_tokens: int | None = None,
        score_cache_choices: int = 4096,
        examples: Sequence[dict[str, str]] = (),
    ) -> None:
        if mode not in ("generate", "choose"):
            raise ValueError(f"mode must be 'generate' or 'choose', got {mode!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        use_skip_hidden_keys(model)  # (the same outputs as SDPA, less work on CPU: agents.attention)
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.length_normalize = length_normalize
        self.reuse_kv = reuse_kv
        self.max_score_tokens = max_score_tokens
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        self.max_prompt_tokens = max_prompt_tokens
        if prefix_cache_tokens is not None and prefix_cache_tokens < 0:
            raise ValueError(f"prefix_cache_tokens must be >= 0 (0: off), got {prefix_cache_tokens}")
        self.prefix_cache_tokens = prefix_cache_tokens if reuse_kv else 0
        self._prefixes = _PrefixStore(self.prefix_cache_tokens, PREFIX_CACHE_BYTES)
        if score_cache_choices < 0:
            raise ValueError(f"score_cache_choices must be >= 0 (0: off), got {score_cache_choices}")
        self._scores = _ScoreStore(score_cache_choices)
        self._weights: tuple[tuple[int, int], ...] | None = None  # what both stores hold values of
        self.examples = [dict(m) for m in examples]
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._sessions: dict[tuple[int, Hashable], _Session] = {}
        self._chat = bool(getattr(tokenizer, "chat_template", None))
        self._cache_kwarg = cache_kwarg(model)
        self._pad_id = next(i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if isinstance(eos, list) else [eos]
        self._eos_ids = {i for i in (*eos, tokenizer.eos_token_id) if i is not None}

    # --- the Agent protocol ---------------------------------------------------------------------------
    def reset(self, index: int | None = None) -> None:
        """Drop the session caches of every env, or of env ``index``."""
        if index is None:
            self._sessions.clear()
            self._prefixes.clear()
            self._scores.clear()
        else:
            self._sessions = {k: s for k, s in self._sessions.items() if k[0] != index}

    @torch.no_grad()
    def act_batch_recorded(self, observations: Sequence[str], infos: Sequence[dict[str, Any]]
                           ) -> tuple[list[str], list[AgentStep]]:
        """Actions for a batch of envs in one batched pass, and the step record of each.

        Caches belong to ``(info["env_index"], info["session_id"])``; without ``env_index`` (a plain list of
        envs) the env is its position in the batch.
        """
        steps = self._step(observations, infos)
        return [step.text for step in steps], steps

    def record(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], actions: Sequence[str]
               ) -> list[AgentStep]:
        """Record ``actions`` (another agent's, e.g. an oracle's) as this agent's steps, without running the model.

        The steps hold the prompt ids this agent would condition on and the action's ids as it would emit them
        (log-probs are left at 0): teacher forcing for behaviour cloning, at the cost of tokenizing.
        """
        return self._step(observations, infos, actions)

    def _step(self, observations: Sequence[str], infos: Sequence[dict[str, Any]],
              forced: Sequence[str] | None = None) -> list[AgentStep]:
        keys = [(info.get("env_index", i), info.get("session_id")) for i, info in enumerate(infos)]
        prompts = [self._prompt(obs, info) for obs, info in zip(observations, infos)]
        self._check_weights()
        rows, prompt_ids = [], []
        results: Sequence[tuple[AgentStep, KV | None]]
        for key, prompt in zip(keys, prompts):
            ids, kv = self._context(key, prompt)
            prompt_ids.append(ids)
            past = 0 if kv is None else kv[0][0].shape[2]
            rows.append(_Row(kv, ids[past:], past))
        if forced is not None:
            encoded = [self.encode_action(a) for a in forced]
            results = [(AgentStep(None, [], ids, torch.zeros(len(ids)), a), None) for ids, a in zip(encoded, forced)]
        elif self.mode == "generate":
            results = self._generate(rows)
        else:
            results = self._choose(rows, [self._candidates(info) for info in infos], prompt_ids)
        steps = []
        for key, prompt, ids, (step, kv) in zip(keys, prompts, prompt_ids, results):
            step.session_id, step.prompt_ids = key[1], ids
            steps.append(step)
            if kv is not None:
                self._prefixes.add(ids + step.gen_ids, kv)
            checkpoints = [
                (prompt + self._decode(step.gen_ids), len(ids) + len(step.gen_ids)),
                (prompt + step.text, len(ids) + len(self._without_eos(step.gen_ids))),
                (prompt, len(ids)),
            ]
            self._sessions[key] = _Session(ids + step.gen_ids, checkpoints, kv if self.reuse_kv else None)
        return steps

    def encode_action(self, action: str) -> list[int]:
        """The token ids of an action string as this agent feeds it after a prompt (what it would emit)."""
        return self._encode(action, False)

    @torch.no_grad()
    def score_after(self, contexts: Sequence[Sequence[int]], ids: Sequence[int]) -> list[float]:
        """The summed log-prob of ``ids`` after each context (token ids), by the model as it is now.

        A context starts from the keys of the longest prefix it shares with a stored one (``prefix_cache_tokens``):
        a context this agent ran (a step's prompt, a session's first or last) feeds only what the store lacks,
        such as the action its last step chose. The same log-probs as one plain pass over each context and
        ``ids``, to float rounding. Mosaic's likelihood estimator scores the gold answer after the contexts
        around each session this way (:func:`algos.credit.estimators.likelihood_contributions`).
        """
        if not ids:
            raise ValueError("score_after needs at least one id to score")
        if any(not context for context in contexts):
            raise ValueError("score_after needs a non-empty context to score after")
        if not contexts:
            return []
        self._check_weights()
        rows = []
        for context in contexts:
            context = list(context)
            kv = self._prefixes.longest_prefix(context)
            past = 0 if kv is None else kv[0][0].shape[2]
            rows.append(_Row(kv, context[past:], past))
        sums, _, _ = self._score_candidates(rows, [[list(ids)]] * len(rows))
        return [float(row_sums[0]) for row_sums in sums]

    def _check_weights(self) -> None:
        """Empty the stores if the model's weights changed since they were filled (:func:`_weights_version`)."""
        weights = _weights_version(self.model)
        if weights is None or weights != self._weights:
            self._prefixes.clear()
            self._scores.clear()
            self._weights = weights

    # --- prompts and session caches -----------------------------------------------------------------
    def _prompt(self, observation: str, info: dict[str, Any]) -> str:
        messages = info.get("messages")
        if messages is None:
            return observation
        if self.examples:
            head = 1 if messages and messages[0]["role"] == "system" else 0
            messages = [*messages[:head], *self.examples, *messages[head:]]
        if self._chat:
            # (a string: tokenize=False; the stub's return type covers every combination of the arguments)
            return cast(str, self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        return render_transcript(messages)

    def _encode(self, text: str, first: bool) -> list[int]:
        # A chat template writes its own special tokens; a bare transcript gets the tokenizer's (e.g. a BOS).
        return self.tokenizer(text, add_special_tokens=first and not self._chat)["input_ids"]

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`_encode` (not the first) of each text, in one call to the tokenizer."""
        return list(self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]) if texts else []

    def _decode(self, ids: list[int]) -> str:
        # (one sequence of ids decodes to one string; the stub's str | list[str] covers a batch of sequences too)
        return cast(str, self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def _without_eos(self, ids: list[int]) -> list[int]:
        return ids[:-1] if ids and ids[-1] in self._eos_ids else ids

    def _context(self, key: tuple[int, Hashable], prompt: str) -> tuple[list[int], KV | None]:
        """The prompt's token ids and the cached keys/values of a prefix of them (at least one id uncached).

        The session's earlier tokens are reused up to the longest checkpoint whose text starts the prompt;
        only the rest is tokenized. With none (a new session, or earlier turns rewritten), the whole prompt is.
        The keys are the session's own, or those of the longest prefix the prompt shares with a stored context
        (``prefix_cache_tokens``) where that covers more.
        """
        session = self._sessions.get(key)
        checkpoints = session.checkpoints if session is not None else []
        reused = next(((text, n) for text, n in checkpoints if prompt.startswith(text)), None)
        if reused is None:
            ids = self._encode(prompt, True)
            return ids, self._prefixes.longest_prefix(ids)
        text, n = reused
        assert session is not None  # (reused is one of its checkpoints)
        ids = session.ids[:n] + self._encode(prompt[len(text) :], False)
        # The session's keys move to this step's row (the step stores the session's new ones when it ends): a
        # step that fails leaves the session to recompute them, over the same tokens.
        kv, session.kv = session.kv, None
        keep = 0
        if kv is not None:
            # Logits come from the last fed token, so at least one token must be left to feed.
            keep = min(kv[0][0].shape[2], n, len(ids) - 1)
            kv = tuple((k[:, :, :keep], v[:, :, :keep]) for k, v in kv) if keep > 0 else None
        # Another session may have run further along the same tokens (a continuation repeating its rollout).
        return ids, self._prefixes.longest_prefix(ids, beyond=keep) or kv

    # --- batched forward passes -----------------------------------------------------------------------
    def _forward(
        self, rows: Sequence[_Row], logits_to_keep: int = 0, room: int = 0
    ) -> tuple[torch.Tensor, DynamicCache, torch.Tensor, torch.Tensor]:
        """One pass over a batch of rows; returns logits of the new tokens, the cache, the mask and next positions.

        Layout: each row's cached keys/values are right-aligned in the first ``P`` columns and its new tokens
        right-aligned in the last ``S``; the gap between is masked padding. Position ids are each row's own
        (cached length onward), so rotary embeddings match an unpadded pass; the causal mask runs over columns.
        The cache holds room for the ``S`` columns and ``room`` more (the passes that follow on it), written in
        place (:func:`agents.lm.reserved_cache`). A batch of more than ``max_prompt_tokens`` new-token slots
        goes through in runs of consecutive rows, in the same layout, each writing its rows of one cache.
        """
        batch, past = len(rows), max(r.past for r in rows)
        width = max(len(r.new_ids) for r in rows)
        input_ids = torch.full((batch, width), self._pad_id, dtype=torch.long)
        positions = torch.zeros((batch, width), dtype=torch.long)
        mask = torch.zeros((batch, past + width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row.new_ids)
            input_ids[i, width - n :] = torch.tensor(row.new_ids)
            positions[i, width - n :] = torch.arange(row.past, row.past + n)
            mask[i, past - row.past : past] = 1
            mask[i, past + width - n :] = 1
        cache = DynamicCache()
        if past > 0:
            cache = reserved_cache(self._stack_past(rows, past, past + width + room), past)
        for row in rows:
            row.kv = None  # in the batch now (see _Row)
        mask = mask.to(self.device)
        pass_mask = padded_causal_mask(self.model, mask, width)  # (Transformers' own, made once for every run)
        step = max(1, self.max_prompt_tokens // width)  # rows per pass
        whole = step >= batch
        logits = []
        for start in range(0, batch, step):
            stop = min(start + step, batch)
            if whole:
                part = cache
            elif past > 0:
                reserved = cache_rows(cache, start, stop)  # (these rows of the batch's buffers, written in place)
                assert reserved is not None  # (past > 0: cache is a reserved_cache, above)
                part = reserved
            else:
                part = DynamicCache()  # (a first step: these rows' keys are copied into the batch's cache below)
            out = self.model(
                input_ids=input_ids[start:stop].to(self.device),
                attention_mask=pass_mask[start:stop],
                position_ids=positions[start:stop].to(self.device),
                use_cache=True,
                **{self._cache_kwarg: part},
                logits_to_keep=logits_to_keep,
            )
            logits.append(out.logits)
            if not whole and past == 0:
                cache = _into_batch(cache if start > 0 else None, part, start, batch, width + room)
        if not whole and past > 0:  # each run extended its rows; the batch's cache now holds the new columns too
            cache = reserved_cache([_buffers(layer) for layer in cache.layers], past + width)
        next_positions = torch.tensor([r.past + len(r.new_ids) for r in rows], device=self.device)
        return torch.cat(logits) if len(logits) > 1 else logits[0], cache, mask, next_positions

    def _stack_past(self, rows: Sequence[_Row], past: int, capacity: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The rows' cached keys and values right-aligned in the first ``past`` of ``capacity`` columns.

        Only the padding in front of a row's keys is zeroed (masked, it must still be finite: a hidden key's weight
        is exactly 0, and 0 times a finite value is 0); the room after ``past`` is written by the passes that
        extend the cache before any reads it (:func:`agents.lm.reserved_cache`), so it is left unset.
        """
        template = next(r.kv for r in rows if r.kv is not None)
        layers = []
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_empty((len(rows), k0.shape[1], capacity, k0.shape[3]))
            values = v0.new_empty((len(rows), v0.shape[1], capacity, v0.shape[3]))
            for i, row in enumerate(rows):
                gap = past - row.past
                if gap:
                    keys[i, :, :gap] = 0
                    values[i, :, :gap] = 0
                if row.kv is not None:
                    keys[i, :, gap:past] = row.kv[layer][0][0]
                    values[i, :, gap:past] = row.kv[layer][1][0]
            layers.append((keys, values))
        return layers

    @staticmethod
    def _row_kv(cache: DynamicCache, mask: torch.Tensor, i: int) -> KV:
        """Row ``i``'s keys/values without its padding: the cache columns where its mask is 1."""
        kv = keys_values(cache, "the agent's caches need")
        columns = mask[i, : kv[0][0].shape[2]].nonzero().squeeze(1)
        # The columns are a few runs (its past, right-aligned, then its new tokens): copied as slices, which is
        # several times faster than gathering them one by one.
        gaps = ((columns[1:] - columns[:-1]) != 1).nonzero().squeeze(1).tolist()
        bounds = [0, *(g + 1 for g in gaps), len(columns)]
        runs = [(int(columns[a]), int(columns[b - 1]) + 1) for a, b in zip(bounds, bounds[1:]) if b > a]

        def rows(t: torch.Tensor) -> torch.Tensor:
            parts = [t[i : i + 1, :, a:b] for a, b in runs]
            return torch.cat(parts, 2) if len(parts) != 1 else parts[0].clone()

        return tuple((rows(keys), rows(values)) for keys, values in kv)

    def _sample(self, scores: torch.Tensor) -> torch.Tensor:
        """Indices drawn from ``softmax(scores / temperature)`` per row (argmax at temperature 0)."""
        if self.temperature == 0:
            return scores.argmax(-1)
        return self._draw(torch.softmax(scores / self.temperature, -1))

    def _draw(self, probs: torch.Tensor) -> torch.Tensor:
        """One index per row of ``probs`` (rows summing to 1), from the agent's generator."""
        # argmax(p / E) with E ~ Exp(1) is a draw from p, and much cheaper than multinomial on CPU.
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        return (probs / noise).argmax(-1)

    # --- generate ---------------------------------------------------------------------------------------
    def _generate(self, rows: Sequence[_Row]) -> list[tuple[AgentStep, KV]]:
        logits, cache, mask, positions = self._forward(rows, logits_to_keep=1, room=self.max_new_tokens)
        batch = len(rows)
        gen: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        active = [True] * batch
        for _ in range(self.max_new_tokens):
            last = logits[:, -1].float()
            tokens = self._sample(last)
            token_logprobs = torch.log_softmax(last, -1).gather(1, tokens[:, None]).squeeze(1)
            for i, (token, logprob) in enumerate(zip(tokens.tolist(), token_logprobs.tolist())):
                if not active[i]:
                    continue
                gen[i].append(token)
                logprobs[i].append(logprob)
                finished = token in self._eos_ids or len(gen[i]) >= self.max_new_tokens
                active[i] = not (finished or tool_call_complete(self._decode(gen[i])))
            if not any(active):
                break
            # Finished rows feed padding that nothing attends to, so their caches end at their last fed token.
            feeding = torch.tensor(active, device=self.device)
            feed = torch.where(feeding, tokens, torch.full_like(tokens, self._pad_id))
            mask = torch.cat([mask, feeding.long()[:, None]], dim=1)
            logits = self.model(
                input_ids=feed[:, None],
                attention_mask=mask,
                position_ids=positions[:, None],
                use_cache=True,
                **{self._cache_kwarg: cache},
            ).logits
            positions = positions + feeding.long()
        results = []
        for i in range(batch):
            text = self._decode(self._without_eos(gen[i]))
            step = AgentStep(None, [], gen[i], torch.tensor(logprobs[i], dtype=torch.float32), text)
            results.append((step, self._row_kv(cache, mask, i)))
        return results

    # --- choose -----------------------------------------------------------------------------------------
    def _candidates(self, info: dict[str, Any]) -> list[str]:
        candidates = info.get("candidates")
        if not candidates:
            raise ValueError("mode='choose' needs info['candidates']: make the env with candidates=True")
        return list(candidates)

    def _choose(self, rows: Sequence[_Row], candidates: Sequence[Sequence[str]], prompt_ids: Sequence[list[int]]
                ) -> list[tuple[AgentStep, KV | None]]:
        """Score every candidate after its env's prompt, then sample one per env from the softmax of the scores.

        The prompts go through one pass (their last logits score each candidate's first token). Then each env's
        candidates go through one more pass together, as a tree over the prompt's cache: every candidate token
        attends to the whole prompt and to its own candidate's earlier tokens only, at the positions it would
        have right after the prompt (:func:`agents.lm.score_tree`, the learner's scorer too).

        Only choices not seen before are scored: one of a single candidate (a forced action, such as the
        compaction a full context must make) has ``pi = 1`` whatever the model says, so no pass would change the
        action, its ``choice_logprob`` (0) or the learner's gradient (which skips such choices too): its step's
        ``logprobs`` are zeros and it hands back no cache (a step that continued its session would recompute the
        keys). A choice the score store holds (``score_cache_choices``), or that an earlier env of the batch
        repeats, takes those scores; it hands back the cache it came with (or the repeated env's), and the next
        step of its session feeds what the cache lacks. Every env still draws from the generator in order, so
        the draws are those of a batch that scored every env.
        """
        flat = self._encode_many([c for cands in candidates for c in cands])  # (one tokenizer call: faster)
        bounds = np.cumsum([0, *map(len, candidates)])
        cand_ids = [flat[a:b] for a, b in zip(bounds, bounds[1:])]
        if any(not ids for env_ids in cand_ids for ids in env_ids):
            raise ValueError("every candidate must be a non-empty action string")
        # (with the store off, every env's choice is its own: scored, even where another env repeats it)
        keys = [None if len(ids) == 1 else self._scores.key(p, ids) if self._scores.capacity
                else e.to_bytes(8, "big") for e, (p, ids) in enumerate(zip(prompt_ids, cand_ids))]
        known: dict[bytes, tuple[torch.Tensor, list[torch.Tensor]]] = {}
        scored: dict[bytes, int] = {}  # the envs this batch scores, by key (the first of a repeated choice)
        for e, key in enumerate(keys):
            if key is None:
                rows[e].kv = None  # (not scored: its session's keys are let go)
            elif key not in known and key not in scored:
                found = self._scores.get(key)
                if found is not None:
                    known[key] = found
                else:
                    scored[key] = e
        order = list(scored.values())
        prompt_kv: dict[int, KV] = {}
        if order:
            sums, token_logprobs, kvs = self._score_candidates([rows[e] for e in order], [cand_ids[e] for e in order])
            for j, (key, e) in enumerate(scored.items()):  # (order: scored's envs, each with its key)
                known[key] = (sums[j], token_logprobs[j])
                self._scores.put(key, *known[key])
                prompt_kv[e] = kvs[j]
        choosing = [(e, key) for e, key in enumerate(keys) if key is not None]
        # The policy a learner trains: this one, at temperature 1 when sampling is greedy.
        policy: dict[str, Any] = {"temperature": self.temperature or 1.0, "length_normalize": self.length_normalize}
        log_policy = None
        if choosing:
            counts = [len(cand_ids[e]) for e, _ in choosing]
            log_policy = candidate_log_policy(
                torch.cat([known[key][0] for _, key in choosing]),
                [len(ids) for e, _ in choosing for ids in cand_ids[e]], counts,
                [policy["length_normalize"]] * len(counts), [policy["temperature"]] * len(counts))
        where = {e: j for j, (e, _) in enumerate(choosing)}
        results: list[tuple[AgentStep, KV | None]] = []
        for e, ids in enumerate(cand_ids):
            key = keys[e]
            if key is None:
                logp = torch.zeros(1, dtype=torch.float64)
            else:
                assert log_policy is not None  # (made above: this env is one of those choosing)
                logp = log_policy[where[e], : len(ids)]
            if self.temperature == 0:
                choice = int(logp.argmax())
                probs = torch.nn.functional.one_hot(torch.tensor(choice), len(ids)).double()
            else:
                probs = logp.exp()
                choice = int(self._draw(probs[None].to(self.device))[0])
            chosen = torch.zeros(len(ids[choice])) if key is None else known[key][1][choice].float()
            step = AgentStep(None, [], ids[choice], chosen, candidates[e][choice], probs, choice, ids, policy,
                             float(logp[choice]))
            # The cache covers the prompt (or, for a choice not scored here, what the row came with); the chosen
            # candidate's tokens are fed with the next step's suffix.
            if key is None:
                kv: KV | None = None
            elif e in prompt_kv:
                kv = prompt_kv[e]
            else:
                kv = prompt_kv.get(scored.get(key, -1), rows[e].kv)
            results.append((step, kv))
        return results

    def _score_candidates(self, rows: Sequence[_Row], cand_ids: Sequence[Sequence[list[int]]]
                          ) -> tuple[list[torch.Tensor], list[list[torch.Tensor]], list[KV]]:
        """Per row: each candidate's summed token log-prob ``(candidates,)``, their token log-probs, and the
        prompt's keys/values.

        Rows of similar lengths go through their passes together (:func:`length_buckets`): a pass lays its rows
        out as wide as its longest, so a child session's short context batched with its parent's long one would
        attend over the parent's length of padding (on the fork preset, most of an iteration's time).
        """
        shapes = [(r.past, len(r.new_ids), sum(map(len, ids))) for r, ids in zip(rows, cand_ids)]
        sums: list[torch.Tensor] = [torch.empty(0)] * len(rows)
        token_logprobs: list[list[torch.Tensor]] = [[] for _ in rows]
        prompt_kv: list[KV] = [()] * len(rows)
        for bucket in length_buckets(shapes):
            scored = self._score_bucket([rows[i] for i in bucket], [cand_ids[i] for i in bucket])
            for i, row_sums, row_logprobs, kv in zip(bucket, *scored):
                sums[i], token_logprobs[i], prompt_kv[i] = row_sums, row_logprobs, kv
        return sums, token_logprobs, prompt_kv

    def _score_bucket(self, rows: Sequence[_Row], cand_ids: Sequence[Sequence[list[int]]]
                      ) -> tuple[list[torch.Tensor], list[list[torch.Tensor]], list[KV]]:
        """:meth:`_score_candidates` over rows in one layout: a pass over the prompts, then tree passes."""
        chunks = self._score_chunks(cand_ids, max(r.past for r in rows) + max(len(r.new_ids) for r in rows))
        # The tree passes extend the batch's cache by their width: room for the widest tree. A chunk (a run of
        # consecutive envs) scores over its rows of the batch's buffers, written in place: no copy of the keys.
        room = max(sum(map(len, ids)) for ids in cand_ids)
        logits, cache, mask, next_positions = self._forward(rows, logits_to_keep=1, room=room)
        last = logits[:, -1]
        del logits
        host_mask = mask.bool().cpu()
        token_logprobs: dict[tuple[int, int], torch.Tensor] = {}
        sums: dict[tuple[int, int], torch.Tensor] = {}
        for envs in chunks:
            tree = [[Branch(ids, int(next_positions[e]), host_mask[e], (e,)) for ids in cand_ids[e]] for e in envs]
            # One chunk of every env scores over the batch's cache itself (the pass extends it; nothing reads it
            # after): no copy of every prompt's keys. A first step's cache holds no room (a plain cache): copied.
            rows_cache = cache if len(chunks) == 1 else (cache_rows(cache, envs[0], envs[-1] + 1)
                                                         or _rows_of(cache, envs, room))
            scored = score_tree(self.model, rows_cache, tree, last, self._pad_id)
            del rows_cache
            keys = [(e, c) for e in envs for c in range(len(cand_ids[e]))]
            token_logprobs.update(zip(keys, (lp.cpu() for lp in scored.per_branch())))
            sums.update(zip(keys, scored.sums().cpu()))
        # Each session's keys are cut out only now, after the scoring copies are gone: a tree pass over the whole
        # cache has extended it, but the prompt's columns (where the mask is 1) are as they were.
        prompt_kv = [self._row_kv(cache, mask, i) for i in range(len(rows))]
        del cache
        sums_by_row = [torch.stack([sums[(e, c)] for c in range(len(ids))]) for e, ids in enumerate(cand_ids)]
        lps_by_row = [[token_logprobs[(e, c)] for c in range(len(ids))] for e, ids in enumerate(cand_ids)]
        return sums_by_row, lps_by_row, prompt_kv

    def _score_chunks(self, cand_ids: Sequence[Sequence[list[int]]], past: int) -> list[list[int]]:
        """Group envs so each group's tree pass, ``envs * (past + new)`` slots, fits ``max_score_tokens``."""
        chunks: list[list[int]] = []
        widest = 0
        for e, ids in enumerate(cand_ids):
            new = sum(map(len, ids))
            grown = (len(chunks[-1]) + 1) * (past + max(widest, new)) if chunks else None
            if grown is None or grown > self.max_score_tokens:
                chunks.append([])
                widest = 0
            chunks[-1].append(e)
            widest = max(widest, new)
        return chunks


BUCKET_SLACK = 1.25
"""A row joins a bucket while the bucket's padded attention slots stay within this factor of its rows' own."""
BUCKET_FLOOR_SLOTS = 1 << 15
"""Below this many padded slots a bucket takes any row: a pass's fixed cost outweighs so little padding."""


def length_buckets(shapes: Sequence[tuple[int, int, int]], slack: float = BUCKET_SLACK,
                   floor: int = BUCKET_FLOOR_SLOTS) -> list[list[int]]:
    """Rows grouped for scoring passes: each bucket's rows laid out together waste little attention on padding.

    ``shapes`` holds, per row, its cached tokens, new tokens and tree (candidate) tokens. A bucket's passes lay
    its rows out as wide as their longest: the prompt pass attends from ``new`` query slots to ``past + new``
    key columns, the tree pass from ``tree`` slots to ``past + new + tree``, each the bucket's maximum. Rows are
    taken shortest first; one joins the current bucket while the bucket's padded slots stay within ``slack``
    times the slots its rows would use alone (or under ``floor``), else it starts the next bucket.

    Example:
        >>> length_buckets([(1200, 10, 40), (0, 300, 40), (1190, 12, 40), (0, 310, 38)], floor=0)
        [[1, 3], [2, 0]]
    """
    order = sorted(range(len(shapes)), key=lambda i: (shapes[i][0] + shapes[i][1], shapes[i]))
    buckets: list[list[int]] = []
    own = 0
    for i in order:
        alone = _attention_slots([shapes[i]])
        if buckets:
            padded = _attention_slots([shapes[j] for j in buckets[-1]] + [shapes[i]])
            if padded <= max(slack * (own + alone), floor):
                buckets[-1].append(i)
                own += alone
                continue
        buckets.append([i])
        own = alone
    return buckets


def _attention_slots(shapes: Sequence[tuple[int, int, int]]) -> int:
    """Query-key pairs of the prompt and tree passes over these rows laid out together (padding included)."""
    past, new, tree = (max(s[k] for s in shapes) for k in range(3))
    return len(shapes) * (new * (past + new) + tree * (past + new + tree))


def _into_batch(cache: DynamicCache | None, part: DynamicCache, start: int, batch: int, capacity: int
                ) -> DynamicCache:
    """``part``'s rows written into rows ``start:`` of ``cache``, a :func:`agents.lm.reserved_cache` of ``batch``
    rows and ``capacity`` columns (None: made here, from ``part``'s shapes; every run of rows writes all of its
    rows' columns, and the room after them is written before it is read, so the buffers start unset)."""
    done = keys_values(part, "the agent's caches need")
    if cache is None:
        def unset(t: torch.Tensor) -> torch.Tensor:
            return t.new_empty((batch, t.shape[1], capacity, t.shape[3]))

        cache = reserved_cache([(unset(keys), unset(values)) for keys, values in done], done[0][0].shape[2])
    for layer, (keys, values) in zip(cache.layers, done):
        length = keys.shape[2]
        for buffer, new in zip(_buffers(layer), (keys, values)):
            buffer[start : start + new.shape[0], :, :length] = new
    return cache


def _rows_of(cache: DynamicCache, rows: Sequence[int], room: int = 0) -> DynamicCache:
    """A new cache of the given rows of ``cache`` (their keys and values copied once, into buffers with ``room``
    more columns for the pass that follows: :func:`agents.lm.reserved_cache`)."""
    kv = keys_values(cache, "the agent's caches need")
    length = kv[0][0].shape[2]
    layers = []
    for keys, values in kv:
        copies = []
        for full in (keys, values):
            buffer = full.new_empty((len(rows), full.shape[1], length + room, full.shape[3]))
            for j, r in enumerate(rows):
                buffer[j, :, :length] = full[r]
            copies.append(buffer)
        layers.append((copies[0], copies[1]))
    return reserved_cache(layers, length)


def _buffers(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values buffers (with room to grow) of a :func:`agents.lm.reserved_cache` layer; a ValueError
    for any other layer."""
    buffers = getattr(layer, "buffers", None)
    if buffers is None:
        raise ValueError(f"a cache written in place needs reserved layers (agents.lm.reserved_cache), "
                         f"not {type(layer).__name__}")
    return buffers
