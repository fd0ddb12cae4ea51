"""Log-probabilities of a policy's own actions, with gradient: the one scorer the learner and the credit estimators
share.

A session is a :class:`agents.records.TrainSequence`. :func:`sequence_logprobs` gives the log-prob of every token of
a sequence (generate mode, and teacher forcing); :func:`choice_logprobs` gives, for a choose-mode sequence, the
log-policy of each chosen candidate among that step's candidates, scored by :func:`agents.lm.score_tree` (the
function the agent samples with, so the policy a learner trains is the one that acted). :class:`SharedPrefix`
runs the tokens every sequence of a batch opens with once; :func:`micro_batches` packs sequences into passes of at
most a given padded size, sequences of one :func:`run_key` in one run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Literal, Sequence, overload

import numpy as np
import torch

from agents.lm import Branch, cache_kwarg, candidate_log_policy, common_prefix, keys_values, score_tree
from agents.records import Choice, TrainSequence

if TYPE_CHECKING:
    from transformers import DynamicCache


@overload
def sequence_logprobs(model: torch.nn.Module, sequences: Sequence[TrainSequence], device: torch.device,
                      prefix: SharedPrefix | None = None, with_entropy: Literal[False] = False
                      ) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def sequence_logprobs(model: torch.nn.Module, sequences: Sequence[TrainSequence], device: torch.device,
                      prefix: SharedPrefix | None = None, *, with_entropy: Literal[True]
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


def sequence_logprobs(model: torch.nn.Module, sequences: Sequence[TrainSequence], device: torch.device,
                      prefix: SharedPrefix | None = None, with_entropy: bool = False
                      ) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token log-probs of a padded batch: ``logp[b, t]`` of token ``t`` given tokens ``< t``.

    Returns ``(logp, mask)`` of shape ``(B, L)``; ``mask`` marks generated tokens (position 0 is never one).
    With ``prefix`` (:class:`SharedPrefix`, which every sequence starts with) the pass feeds only what follows it.
    With ``with_entropy``, a third tensor of the same shape: the entropy (nats) of the next-token distribution
    that predicted each token.
    """
    length = max(len(s.token_ids) for s in sequences)
    ids = torch.zeros((len(sequences), length), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((len(sequences), length), dtype=torch.bool)
    for b, s in enumerate(sequences):
        n = len(s.token_ids)
        ids[b, :n] = torch.tensor(s.token_ids)
        attn[b, :n] = 1
        mask[b, :n] = torch.tensor(s.gen_mask)
    mask[:, 0] = False
    ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
    # Logits only where a generated token is predicted (the vocabulary projection is costly elsewhere).
    keep = mask.any(0).nonzero().squeeze(1) - 1
    logits = _causal_pass(model, ids, attn, keep, prefix).float()
    logp = torch.zeros(ids.shape, device=device)
    table = torch.log_softmax(logits, dim=-1)
    logp[:, keep + 1] = table.gather(-1, ids[:, keep + 1, None]).squeeze(-1)
    if not with_entropy:
        return logp, mask
    entropy = torch.zeros(ids.shape, device=device)
    entropy[:, keep + 1] = -(table.exp() * table).sum(-1)
    return logp, mask, entropy


def choice_logprobs(model: torch.nn.Module, sequences: Sequence[TrainSequence], device: torch.device,
                    prefix: SharedPrefix | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs of the chosen candidates, ``logp[b, j]`` for choice ``j`` of sequence ``b``.

    Two passes: the sequences (causal, with a cache), then every candidate of every choice at once as branches
    of a tree over that cache, by :func:`agents.lm.score_tree`, the scorer :class:`agents.llm.LLMAgent` acts
    with: a candidate token attends to its sequence's first ``prompt_len`` tokens and to its own candidate's
    earlier tokens, at the positions it would have right after that prefix. Gradients flow through both passes.
    Returns ``(logp, old, mask, entropy)`` of shape ``(B, J)``: the current and the sampling-time log-probs, which
    ``(b, j)`` hold a choice, and the entropy (nats) of each choice's candidate policy (0 for a choice of one
    candidate). ``prefix`` as in :func:`sequence_logprobs`.
    """
    batch = len(sequences)
    count = max(len(s.choices) for s in sequences)
    choices = [(b, j, c) for b, s in enumerate(sequences) for j, c in enumerate(s.choices)]
    rows = torch.tensor([b for b, _, _ in choices], device=device)
    cols = torch.tensor([j for _, j, _ in choices], device=device)
    old = torch.zeros((batch, count), device=device).index_put(
        (rows, cols), torch.tensor([c.old_logprob for _, _, c in choices], device=device))
    mask = torch.zeros_like(old, dtype=torch.bool).index_put((rows, cols), torch.ones_like(rows, dtype=torch.bool))
    # A choice of one candidate has log pi = 0 whatever the weights (no gradient), so only the others are
    # scored, and a sequence is run only up to the last of their prefixes: what follows it (often a forced
    # compaction's prompt and summary, the session's last step) changes none of the logits read.
    scored = [(j, b, c) for j, (b, _, c) in enumerate(choices) if len(c.candidates) > 1]
    active = sorted({b for _, b, _ in scored})
    logp = torch.zeros_like(old)
    entropy = torch.zeros_like(old)
    if not active:
        return logp, old, mask, entropy
    # Rows whose scored part is the same (the tokens up to their last scored choice, and those choices' candidates,
    # temperatures and normalisation: see run_key) get the same candidate scores, so one of them runs for all:
    # each keeps its own chosen index and sampling-time log-prob, and the gradient sums over them through the gather.
    own: dict[int, list[Choice]] = {b: [] for b in active}
    for _, b, c in scored:
        own[b].append(c)
    first_of: dict[tuple | None, int] = {}
    rep = {b: first_of.setdefault(run_key(sequences[b]), b) for b in active}
    running = [b for b in active if rep[b] == b]
    row_of = {b: r for r, b in enumerate(running)}
    ends = [max(c.prompt_len for c in own[b]) for b in running]
    length = max(ends)
    ids = torch.zeros((len(running), length), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for r, (b, end) in enumerate(zip(running, ends)):
        ids[r, :end] = torch.tensor(sequences[b].token_ids[:end])
        attn[r, :end] = 1
    # Logits only where a candidate's first token is predicted: the last token of some choice's prefix.
    keep = sorted({c.prompt_len - 1 for b in running for c in own[b]})
    column = {col: i for i, col in enumerate(keep)}
    tree: list[list[Branch]] = [[] for _ in running]
    spans: dict[int, list[range]] = {b: [] for b in running}  # each running row's choices' candidates in the tree
    start = 0
    for b in running:
        for c in own[b]:
            tree[row_of[b]] += _branches(c, row_of[b], length, column)
            spans[b].append(range(start, start + len(c.candidates)))
            start += len(c.candidates)
    cache = _new_cache() if prefix is None else prefix.cache(len(running))
    first = _causal_pass(model, ids.to(device), attn.to(device), torch.tensor(keep, device=device), prefix, cache)
    tree_scores = score_tree(model, cache, tree, first)
    # Every scored choice, in order, reads its candidates' scores from its row's representative (the k-th scored
    # choice of a row is the k-th of its representative's: the same prompt and candidates).
    seen = dict.fromkeys(active, 0)
    at_tree: list[int] = []
    for _, b, _ in scored:
        at_tree += spans[rep[b]][seen[b]]
        seen[b] += 1
    sums = tree_scores.sums()
    if len(running) < len(active):
        sums = sums[torch.tensor(at_tree, device=sums.device)]
    sizes = [tree_scores.sizes[i] for i in at_tree]
    chosen, ent = _chosen_logprobs(sums, sizes, [c for _, _, c in scored])
    at = torch.tensor([j for j, _, _ in scored], device=device)
    logp = logp.index_put((rows[at], cols[at]), chosen)
    entropy = entropy.index_put((rows[at], cols[at]), ent)
    return logp, old, mask, entropy


def run_key(sequence: TrainSequence) -> tuple | None:
    """What a sequence's scored choices (those of several candidates) depend on: its tokens up to the last of
    them, and each one's prompt length, candidates, temperature and normalisation (not the index chosen nor its
    sampling-time log-prob); None when it has no such choice. Sequences of equal keys have equal candidate
    log-policies for any weights: a group's runs often repeat whole sessions (the same search, the same page,
    the same answer), and :func:`choice_logprobs` runs such sequences once."""
    scored = [c for c in sequence.choices if len(c.candidates) > 1]
    if not scored:
        return None
    end = max(c.prompt_len for c in scored)
    return (tuple(sequence.token_ids[:end]),
            tuple((c.prompt_len, tuple(map(tuple, c.candidates)), c.temperature, c.length_normalize) for c in scored))


class SharedPrefix:
    """The tokens every sequence of an update opens with, run through the model once for all its micro-batches.

    Every session opens with the same system message (in the demo 456 of a session's 1,170 tokens, and its
    micro-batches hold one session each), so every micro-batch ran those tokens again, forward and backward.
    :meth:`of` runs them once, as one row; each micro-batch starts from their keys and values (:meth:`cache`)
    and feeds only the rest of its rows. Keys and values at a position depend only on the tokens up to it, so the
    logits are those of the whole rows, to float rounding. So is the gradient: a micro-batch's backward stops at
    the prefix's keys and values (leaves that gather the gradient of every micro-batch), and :meth:`backward`
    takes the sum once through the prefix's own pass. The prefix ends before the first column any sequence
    scores, so every scored logit comes from a micro-batch's pass.

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
        >>> seqs = [TrainSequence([1, 2, 3, 4, 5], [False, False, False, True, True], [0.0] * 5),
        ...         TrainSequence([1, 2, 3, 9], [False, False, False, True], [0.0] * 4)]
        >>> SharedPrefix.of(model, seqs, torch.device("cpu"), min_tokens=1).ids  # column 2 predicts token 3
        [1, 2]
    """

    def __init__(self, ids: list[int], layers: list[tuple[torch.Tensor, torch.Tensor]]):
        self.ids = ids
        self._outputs = layers
        self._leaves = [tuple(t.detach().requires_grad_(t.requires_grad) for t in kv) for kv in layers]

    @classmethod
    def of(cls, model: torch.nn.Module, sequences: Sequence[TrainSequence], device: torch.device,
           min_tokens: int = 16) -> SharedPrefix | None:
        """The prefix of ``sequences`` run through ``model`` (with gradient where autograd is on), or None when
        fewer than two sequences share at least ``min_tokens`` before their first scored column."""
        if len(sequences) < 2:
            return None
        first = sequences[0].token_ids
        n = min(_first_scored(s) for s in sequences)
        for s in sequences[1:]:
            n = common_prefix(first, s.token_ids, n)
        if n < min_tokens:
            return None
        cache = _new_cache()
        model(input_ids=torch.tensor([first[:n]], device=device), use_cache=True, logits_to_keep=1,
              **{cache_kwarg(model): cache})
        return cls(list(first[:n]), keys_values(cache, "a shared prefix needs"))

    def __len__(self) -> int:
        return len(self.ids)

    def cache(self, rows: int) -> DynamicCache:
        """A new cache holding the prefix's keys and values for ``rows`` rows (gradients reach the leaves)."""
        cache = _new_cache()
        for i, (keys, values) in enumerate(self._leaves):
            cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), i)
        return cache

    def backward(self) -> None:
        """Back-propagate the gradient the micro-batches left at the prefix's keys and values through its pass."""
        pairs = [(out, leaf.grad) for outs, leaves in zip(self._outputs, self._leaves)
                 for out, leaf in zip(outs, leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([out for out, _ in pairs], [grad for _, grad in pairs])
        self._outputs = []


def _first_scored(s: TrainSequence) -> int:
    """The first column whose logits a sequence's loss reads (the last token before its first unit)."""
    if s.choices:
        return min(c.prompt_len for c in s.choices) - 1
    generated = np.flatnonzero(np.asarray(s.gen_mask[1:], dtype=bool))
    return int(generated[0]) if len(generated) else len(s.token_ids)


def _causal_pass(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, keep: torch.Tensor,
                 prefix: SharedPrefix | None, cache: DynamicCache | None = None) -> torch.Tensor:
    """The logits of a right-padded batch at its columns ``keep`` (sorted); after ``prefix``, if given, on
    ``cache`` (which then must start with the prefix's keys: :meth:`SharedPrefix.cache`)."""
    start = 0 if prefix is None else len(prefix)
    if prefix is not None and start:
        if len(keep) and int(keep[0]) < start:
            raise ValueError(f"the shared prefix ({start} tokens) covers column {int(keep[0])}, which is scored")
        if not bool((ids[:, :start] == torch.tensor(prefix.ids, device=ids.device)).all()):
            raise ValueError("a sequence does not start with the shared prefix it is given")
        cache = prefix.cache(ids.shape[0]) if cache is None else cache
    if cache is None:
        return model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
    return model(input_ids=ids[:, start:], attention_mask=attn, use_cache=True, logits_to_keep=keep - start,
                 **{cache_kwarg(model): cache}).logits


def _new_cache() -> DynamicCache:
    from transformers import DynamicCache

    return DynamicCache()


def _chosen_logprobs(scores: torch.Tensor, sizes: Sequence[int], choices: Sequence[Choice]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``log pi(chosen)`` of each choice, from every candidate's summed token log-prob (in choice order), by
    :func:`agents.lm.candidate_log_policy`, the policy the agent sampled from (float64; float32 for the loss);
    and the entropy of each choice's policy, ``-sum_c pi_c log pi_c`` (differentiable, for an entropy bonus)."""
    table = candidate_log_policy(scores, sizes, [len(c.candidates) for c in choices],
                                 [c.length_normalize for c in choices], [c.temperature for c in choices])
    picked = torch.tensor([c.index for c in choices], device=scores.device)[:, None]
    finite = torch.isfinite(table)
    entropy = -(torch.where(finite, table.exp() * table, 0.0)).sum(1)
    return table.gather(1, picked).squeeze(1).float(), entropy.float()


def _branches(choice: Choice, row: int, length: int, column: dict[int, int]) -> list[Branch]:
    """A choice's candidates as branches of row ``row``, after its prefix (the first ``prompt_len`` tokens)."""
    prefix = torch.arange(length) < choice.prompt_len
    return [Branch(ids, choice.prompt_len, prefix, (row, column[choice.prompt_len - 1])) for ids in choice.candidates]


def runs(sequences: Sequence[TrainSequence]) -> list[list[TrainSequence]]:
    """``sequences`` grouped by :func:`run_key` (one pass of :func:`choice_logprobs` serves a group), each group in
    the place of its first member; a sequence without a key is a group of its own."""
    runs: dict[object, list[TrainSequence]] = {}
    for s in sequences:
        key = run_key(s)
        runs.setdefault(id(s) if key is None else key, []).append(s)
    return list(runs.values())


def micro_batches(sequences: Sequence[TrainSequence], max_tokens: int) -> Iterable[list[TrainSequence]]:
    """Consecutive groups whose padded size (runs x longest) stays within ``max_tokens``.

    Choice sequences of one :func:`run_key` are one run of :func:`choice_logprobs`: they count once, and they go
    together, in the place of the first of them (a group's repeated sessions share a pass).
    """
    batch: list[TrainSequence] = []
    count = longest = 0
    for members in runs(sequences):
        longest_if = max(longest, members[0].length)
        if batch and longest_if * (count + 1) > max_tokens:
            yield batch
            batch, count, longest_if = [], 0, members[0].length
        batch += members
        count += 1
        longest = longest_if
    if batch:
        yield batch
