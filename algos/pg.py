"""Policy gradient for LLM policies across sessions: broadcast or Mosaic credit, one loss, read top to bottom.

Every session is its own training sequence (its own context), with the loss on the tokens the model
generated in it. The objective (``docs/algorithms.md``, eqs. (12)-(15)) for a batch of sessions s with tokens t:

    ratio_t = exp(logp_t - old_logp_t)
    loss    = sum_{s,t in gen(s)} -min(ratio_t * A_s, clip(ratio_t, 1 - eps, 1 + eps) * A_s) / N_gen
              + kl_coef * sum_{s,t} k3(ref_logp_t, logp_t) / N_gen

``N_gen`` is the number of generated tokens in the whole batch (token-mean over the batch), so a trajectory
with more sessions does not weigh more for having more rows.

A choose-mode policy (``LLMAgent(mode="choose")``) acts by sampling one of the env's candidates from the
softmax of their scores, so its unit is the choice, not the token: for such sequences ``logp`` is
``log softmax_c(score_c / T)[chosen]`` over that step's candidates (:func:`choice_logprobs`), and ``N_gen``
counts choices. (Training the chosen candidate's own tokens instead would miss the ``-E_pi[grad score]`` term.)
``A_s`` comes from :mod:`algos.advantages` (``broadcast`` or ``mosaic``), computed per group with statistics
once per trajectory.

Example:
    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    >>> seq = TrainSequence(token_ids=[1, 5, 6, 7], gen_mask=[False, False, True, True],
    ...                     old_logprobs=[0.0, 0.0, -3.4, -3.5], advantage=1.0)
    >>> pg = PolicyGradient(model, PGConfig(lr=1e-3))
    >>> stats = pg.update([seq])
    >>> [k for k in ("approx_kl", "kl_after", "entropy", "optimizer_steps") if k in stats]
    ['approx_kl', 'kl_after', 'entropy', 'optimizer_steps']
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import torch

from agents.lm import Branch, cache_kwarg, candidate_log_policy, common_prefix, score_tree
from agents.records import Choice, TrainSequence

from . import advantages as adv
from .config import PGConfig

if TYPE_CHECKING:
    from transformers import DynamicCache


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
    first_of: dict[tuple, int] = {}
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
    tree = [[] for _ in running]
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
        return cls(list(first[:n]), [(layer.keys, layer.values) for layer in cache.layers])

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
    if start:
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


def _runs(sequences: Sequence[TrainSequence]) -> list[list[TrainSequence]]:
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
    for members in _runs(sequences):
        longest_if = max(longest, members[0].length)
        if batch and longest_if * (count + 1) > max_tokens:
            yield batch
            batch, count, longest_if = [], 0, members[0].length
        batch += members
        count += 1
        longest = longest_if
    if batch:
        yield batch


class PolicyGradient:
    """Clipped, token-level policy gradient on a causal LM, with broadcast or Mosaic advantages.

    Args:
        model: the policy (a Transformers causal LM; the one the ``LLMAgent`` samples from).
        config: :class:`PGConfig`.
    """

    def __init__(self, model: torch.nn.Module, config: PGConfig | None = None):
        self.config = config or PGConfig()
        self.device = torch.device(self.config.device)
        self.model = model.to(self.device, dtype=getattr(torch, self.config.dtype))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr,
                                           weight_decay=self.config.weight_decay)
        self.ref_model = None
        if self.config.kl_coef > 0:
            self.ref_model = copy.deepcopy(self.model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)

    # --- credit assignment ------------------------------------------------------------------------
    def advantages(self, rewards: Sequence[float], session_traj: Sequence[int],
                   contributions: Sequence[float] | None = None, advantage: str | None = None) -> np.ndarray:
        """One group's advantage per session row (row s belongs to trajectory ``session_traj[s]``), under the
        learner's credit or, with ``advantage``, under the other one with the same settings
        (:func:`algos.advantages.by_name`; a training run asks its :class:`algos.credit.Credit`)."""
        c = self.config
        if advantage is not None and advantage not in adv.ALGORITHMS:
            raise ValueError(f"advantage={advantage!r}: use one of {adv.ALGORITHMS} (None: the learner's own)")
        return adv.by_name(advantage or c.advantage, rewards, session_traj, contributions,
                           normalize_std=c.normalize_std, lambda_use=c.lambda_use, beta=c.beta, clip=c.adv_clip)

    # --- the update -------------------------------------------------------------------------------
    def update(self, sequences: Sequence[TrainSequence]) -> dict[str, float]:
        """PPO on a batch of session sequences: ``epochs`` passes, each in ``minibatches`` optimizer steps.

        Each minibatch's loss is its units' token-mean (with one minibatch: the whole batch's, eq. (13)). From the
        second step on, the pass that computes a minibatch's loss also measures the KL between the policy that
        sampled the batch and the current one (after the steps taken so far); with ``target_kl`` set, the update
        stops before a step when that KL passes ``1.5 * target_kl`` (SB3's rule). After the last step, one pass
        without gradient over every sequence measures what the update did (:meth:`measure`): the metrics
        ``kl_after``, ``clip_fraction_after``, ``entropy`` and the mean change of the chosen units' log-probs for
        positive, negative and zero advantages (``dlogp_pos``, ``dlogp_neg``, ``dlogp_zero``).
        """
        c = self.config
        sequences = [s for s in sequences if s.num_units > 0]
        if not sequences:
            return {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "grad_norm": 0.0, "tokens": 0,
                    "sequences_run": 0, "optimizer_steps": 0}
        # Choice sequences and token sequences never share a micro-batch (their units differ).
        sequences = [s for s in sequences if s.choices] + [s for s in sequences if not s.choices]
        self.model.train()
        ref_prefix = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_prefix = SharedPrefix.of(self.ref_model, sequences, self.device)
        stats: dict[str, float] = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0, "kl_ref": 0.0}
        kls: list[float] = []
        steps = 0
        stopped = False
        ran: set[int] = set()
        for epoch in range(c.epochs):
            for part in minibatch_split(sequences, c.minibatches, seed=epoch):
                total = float(sum(s.num_units * s.weight for s in part))
                # A sequence of advantage 0 adds nothing to the loss or its gradient (unless a KL or entropy term
                # is on): it is not run. (In the demo, most sessions of most iterations: groups that all succeeded
                # or all failed, with no session's contribution telling them apart.) It still counts in the
                # token-mean, as it did when every sequence ran.
                running = [s for s in part if s.advantage != 0 or c.kl_coef > 0 or c.entropy_coef > 0]
                step = self._step(running, total, ref_prefix, measure_kl=steps > 0 and bool(running))
                if steps > 0 and running:
                    kls.append(step["approx_kl"])
                    if c.target_kl is not None and step["approx_kl"] > 1.5 * c.target_kl:
                        stopped = True  # (its gradient is dropped: the step is not taken)
                        self.optimizer.zero_grad(set_to_none=True)
                        break
                self.optimizer.step()
                steps += 1
                ran.update(id(s) for s in running)
                for key in ("loss", "clip_fraction", "grad_norm", "kl_ref"):
                    stats[key] = step[key]
            if stopped:
                break
        self.model.eval()
        stats.update(self.measure(sequences))
        stats["approx_kl"] = float(np.mean(kls)) if kls else 0.0  # measured by the passes after the first step
        stats["kl_step_max"] = float(max(kls)) if kls else 0.0
        stats["optimizer_steps"] = steps
        stats["stopped_by_target_kl"] = float(stopped)
        stats["tokens"] = float(sum(s.num_units * s.weight for s in sequences))
        stats["sequences_run"] = len(ran)
        return stats

    def _step(self, running: Sequence[TrainSequence], total: float, ref_prefix: SharedPrefix | None,
              measure_kl: bool) -> dict[str, float]:
        """The loss and gradient of one minibatch (``running``, normalised by ``total`` units), clipped; the
        optimizer step is the caller's. With nothing to run (every sequence of advantage 0) the gradient is zeros:
        the optimizer still takes its momentum step, as it did when such sequences ran."""
        c = self.config
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = clipped = kl_sum = approx_kl = 0.0
        prefix = SharedPrefix.of(self.model, running, self.device)
        for batch in _homogeneous(micro_batches(running, c.micro_batch_tokens)):
            logp, old, mask, entropy = _unit_logprobs(self.model, batch, self.device, prefix,
                                                      with_entropy=c.entropy_coef > 0)
            adv_t = torch.tensor([s.advantage for s in batch], device=self.device)[:, None]
            w = torch.tensor([s.weight for s in batch], device=self.device)[:, None] * mask
            ratio = torch.exp(logp - old)
            surrogate = torch.minimum(ratio * adv_t, torch.clamp(ratio, 1 - c.clip_eps, 1 + c.clip_eps) * adv_t)
            loss = -(surrogate * w).sum() / total
            if c.entropy_coef > 0:
                loss = loss - c.entropy_coef * (entropy * w).sum() / total
            if self.ref_model is not None:
                with torch.no_grad():
                    ref = _unit_logprobs(self.ref_model, batch, self.device, ref_prefix)[0]
                k3 = _k3(ref - logp)
                loss = loss + c.kl_coef * (k3 * w).sum() / total
                kl_sum += float((k3.detach() * w).sum())
            if loss.requires_grad:  # (not when every choice of the micro-batch had a single candidate)
                loss.backward()
            loss_sum += float(loss.detach())
            clipped += float(((torch.abs(ratio - 1) > c.clip_eps) * mask).sum())
            if measure_kl:
                approx_kl += float((_k3(logp.detach() - old) * w).sum())
        if prefix is not None:
            prefix.backward()
        for p in self.model.parameters():  # (a gradient of zeros where no pass ran: AdamW's step is the same)
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        units = max(float(sum(s.num_units * s.weight for s in running)), 1e-12)
        return {"loss": loss_sum, "clip_fraction": clipped / units, "grad_norm": float(grad_norm),
                "kl_ref": kl_sum / total, "approx_kl": approx_kl / units}

    @torch.no_grad()
    def measure(self, sequences: Sequence[TrainSequence]) -> dict[str, float]:
        """What the policy now is against the one that sampled ``sequences``, one pass without gradient.

        ``kl_after``: the k3 estimate of KL(sampling policy || current policy) per unit; ``clip_fraction_after``:
        the units whose ratio left ``[1 - clip_eps, 1 + clip_eps]``; ``entropy``: nats per choice of several
        candidates (choose mode) or per generated token; ``dlogp_pos`` / ``dlogp_neg`` / ``dlogp_zero``: the mean
        change of the chosen units' log-probs where the advantage was positive, negative or zero (None where none
        was); ``units_measured``. Sequences of one :func:`run_key` run once.
        """
        c = self.config
        sums = {"kl": 0.0, "clip": 0.0, "units": 0.0, "ent": 0.0, "ent_units": 0.0}
        delta = {"pos": [0.0, 0.0], "neg": [0.0, 0.0], "zero": [0.0, 0.0]}
        if not sequences:
            return {}
        prefix = SharedPrefix.of(self.model, sequences, self.device)
        for batch in _homogeneous(micro_batches(sequences, c.micro_batch_tokens)):
            logp, old, mask, entropy = _unit_logprobs(self.model, batch, self.device, prefix, with_entropy=True)
            w = torch.tensor([s.weight for s in batch], device=self.device)[:, None] * mask
            diff = logp - old
            sums["kl"] += float((_k3(diff) * w).sum())
            sums["clip"] += float(((torch.abs(torch.exp(diff) - 1) > c.clip_eps) * w).sum())
            sums["units"] += float(w.sum())
            # Entropy over units that were a choice (several candidates) or a generated token.
            real = mask if not batch[0].choices else mask & torch.tensor(
                [[len(ch.candidates) > 1 for ch in s.choices] + [False] * (mask.shape[1] - len(s.choices))
                 for s in batch], device=self.device)
            sums["ent"] += float((entropy * real).sum())
            sums["ent_units"] += float(real.sum())
            for b, s in enumerate(batch):
                kind = "pos" if s.advantage > 0 else "neg" if s.advantage < 0 else "zero"
                units = real[b]
                delta[kind][0] += float(diff[b][units].sum())
                delta[kind][1] += float(units.sum())
        units = max(sums["units"], 1.0)
        out: dict[str, float] = {"kl_after": sums["kl"] / units, "clip_fraction_after": sums["clip"] / units,
                                 "entropy": sums["ent"] / sums["ent_units"] if sums["ent_units"] else 0.0,
                                 "units_measured": sums["units"]}
        for kind, (total, n) in delta.items():
            out[f"dlogp_{kind}"] = total / n if n else None
        return out


def _k3(diff: torch.Tensor) -> torch.Tensor:
    """The k3 estimate (eq. (14)) per unit, ``e^d - d - 1`` of ``d = log p - log q`` for samples of ``q``: of
    KL(q || p), non-negative, unbiased (Schulman's approximation). The update's KL to its reference takes
    ``d = logp_ref - logp``; what it measures of its own move, ``d = logp_new - logp_old``."""
    return torch.exp(diff) - diff - 1


def minibatch_split(sequences: Sequence[TrainSequence], minibatches: int, seed: int = 0
                    ) -> list[list[TrainSequence]]:
    """``sequences`` in ``minibatches`` parts of near-equal size, in an order shuffled by ``seed`` (one part: all,
    in order). Sequences of one :func:`run_key` stay in one part (they share a pass).

    >>> seqs = [TrainSequence([1, k], [False, True], [0.0, 0.0]) for k in range(5)]
    >>> [len(p) for p in minibatch_split(seqs, 2, seed=0)]
    [3, 2]
    """
    if minibatches <= 1:
        return [list(sequences)]
    members = _runs(sequences)
    order = np.random.default_rng(seed).permutation(len(members))
    parts: list[list[TrainSequence]] = [[] for _ in range(min(minibatches, len(members)))]
    for n, i in enumerate(order):
        parts[n % len(parts)] += members[i]
    return [p for p in parts if p]


def _unit_logprobs(model: torch.nn.Module, batch: Sequence[TrainSequence], device: torch.device,
                   prefix: SharedPrefix | None = None, with_entropy: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logp, old, mask, entropy)`` of the batch's loss units (choices or generated tokens), zero outside
    ``mask``; ``entropy`` is zeros unless ``with_entropy`` (choices: always computed, it costs nothing).

    Outside the loss (prompts, padding) log-probs are zeroed before any exp: there they could overflow, and
    inf * 0 would turn a masked sum into nan.
    """
    if batch[0].choices:
        logp, old, mask, entropy = choice_logprobs(model, batch, device, prefix)
    elif with_entropy:
        logp, mask, entropy = sequence_logprobs(model, batch, device, prefix, with_entropy=True)
        old = _padded([s.old_logprobs for s in batch], logp.shape, device)
    else:
        logp, mask = sequence_logprobs(model, batch, device, prefix)
        entropy = torch.zeros_like(logp)
        old = _padded([s.old_logprobs for s in batch], logp.shape, device)
    return (torch.where(mask, logp, 0.0), torch.where(mask, old, 0.0), mask, torch.where(mask, entropy, 0.0))


def _homogeneous(batches: Iterable[list[TrainSequence]]) -> Iterable[list[TrainSequence]]:
    """Micro-batches split where choice sequences end and token sequences begin."""
    for batch in batches:
        split = [s for s in batch if s.choices], [s for s in batch if not s.choices]
        yield from (part for part in split if part)


def _padded(rows: Sequence[Sequence[float]], shape: torch.Size, device: torch.device) -> torch.Tensor:
    out = torch.zeros(shape, device=device)
    for b, row in enumerate(rows):
        out[b, : len(row)] = torch.tensor(row, device=device)
    return out
