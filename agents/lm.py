"""Language-model helpers shared by the agent that acts and the learner that trains it.

:class:`agents.llm.LLMAgent` scores choose-mode candidates with :func:`score_tree` (no gradient) and
:func:`algos.logprobs.choice_logprobs` re-scores them with it (with gradient): one scorer, so the policy a learner
trains is the one the agent sampled from by construction, not by a test keeping two copies equal.

- :func:`cache_kwarg`: the forward argument that takes a KV cache, whatever the Transformers version.
- :func:`attention_mask_4d`: a custom ``(batch, 1, query, key)`` mask in the form the model's attention takes;
  :func:`padded_causal_mask`: the causal mask of a padded batch's pass, made once for SDPA.
- :func:`score_tree`: the token log-probs of many candidate continuations in one tree-masked pass over a cache.
- :func:`reserved_cache` (and :func:`cache_rows`, some of its rows without a copy): a KV cache with room for
  the columns a step will add, written in place (no copy of the whole cache per forward pass, as a
  ``DynamicCache`` makes).
- :func:`keys_values`: each layer's keys and values tensors of a cache, or a clear error for a layer without.
- :func:`common_prefix`: how many leading token ids two sequences share (a new session's stored prefix, the
  update's shared opening).
- :func:`candidate_log_policy`: the choose-mode policy, ``log softmax(score / temperature)`` over each choice's
  candidates, from the candidates' summed token log-probs; the agent samples from it, the learner trains it.

Example:
    >>> import torch
    >>> from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
    >>> prompt, candidates = [1, 5, 6], [[7, 8], [9]]
    >>> cache = DynamicCache()
    >>> logits = model(torch.tensor([prompt]), use_cache=True, **{cache_kwarg(model): cache}).logits
    >>> seen = torch.ones(len(prompt), dtype=torch.bool)
    >>> branches = [[Branch(ids, start=len(prompt), visible=seen, prefix=(0, len(prompt) - 1)) for ids in candidates]]
    >>> scores = score_tree(model, cache, branches, logits)
    >>> alone = model(torch.tensor([prompt + [7, 8]])).logits.log_softmax(-1)
    >>> bool(torch.allclose(scores.per_branch()[0], alone[0, [2, 3], [7, 8]], atol=1e-5)), scores.sizes
    (True, [2, 1])
    >>> policy = candidate_log_policy(scores.sums().detach(), scores.sizes, [2], [True], [1.0])
    >>> policy.dtype, policy.shape, round(float(policy.exp().sum()), 9)
    (torch.float64, torch.Size([1, 2]), 1.0)
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch

from .attention import NAME as SKIPPING_SDPA  # (SDPA's masks: agents.attention)

if TYPE_CHECKING:
    from transformers import DynamicCache


def cache_kwarg(model: torch.nn.Module) -> str:
    """The forward argument that takes a cache: Transformers renamed ``past_key_values`` to ``cache`` during v5."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _takes_sdpa_masks(model: torch.nn.Module) -> bool:
    """Whether ``model``'s attention is SDPA's (Transformers' or :mod:`agents.attention`'s), which takes boolean
    4D masks (a config naming no implementation: Transformers' default, SDPA)."""
    return getattr(model.config, "_attn_implementation", "sdpa") in ("sdpa", SKIPPING_SDPA)


def attention_mask_4d(model: torch.nn.Module, allowed: torch.Tensor) -> torch.Tensor:
    """A custom ``(batch, 1, query, key)`` mask as ``model``'s attention takes it (bool for SDPA, additive else)."""
    if _takes_sdpa_masks(model):
        return allowed
    dtype = next(model.parameters()).dtype
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def padded_causal_mask(model: torch.nn.Module, attention: torch.Tensor, queries: int) -> torch.Tensor:
    """The mask of a pass of ``queries`` tokens that are the last of ``attention``'s ``(batch, keys)`` columns
    (1: a real token), causal over the columns: for SDPA the ``(batch, 1, queries, keys)`` boolean mask
    Transformers builds from it (query ``i`` sees key ``j`` when ``j <= keys - queries + i`` and ``j`` is real),
    made here in one broadcast (Transformers' mask functions took 1.5 s of the fork preset's iteration); for any
    other attention the 2D mask itself, which Transformers turns into what that attention takes. So is a mask
    Transformers would not build at all (no padding, and one query or no cached key: SDPA's own causal kernel).

    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
    ...                                      num_attention_heads=1, attn_implementation="sdpa"))
    >>> attention = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 1]])
    >>> padded_causal_mask(model, attention, 2).int().tolist()
    [[[[0, 1, 1, 0], [0, 1, 1, 1]]], [[[1, 1, 0, 0], [1, 1, 0, 1]]]]
    """
    if not _takes_sdpa_masks(model):
        return attention
    if queries in (1, attention.shape[1]) and bool(attention.all()):
        return attention
    return _causal_columns(queries, attention.shape[1], attention.device) & attention.bool()[:, None, None, :]


def _causal_columns(queries: int, keys: int, device: torch.device) -> torch.Tensor:
    """``(queries, keys)``: True where key ``j <= keys - queries + i`` (query ``i`` is column ``keys - queries + i``)."""
    return torch.arange(keys, device=device) <= torch.arange(keys - queries, keys, device=device)[:, None]


@dataclass(frozen=True)
class Branch:
    """One candidate continuation in a tree pass: its tokens, and the prefix of its cache row it follows.

    Attributes:
        ids: the candidate's token ids (at least one).
        start: the position id of its first token: the length of the prefix it follows.
        visible: bool over the cache's columns, True at the prefix's keys (the acting agent's cache rows
            have padding between cached and new tokens, so a prefix need not be the first ``start`` columns).
        prefix: the index, into the logits given to :func:`score_tree`, of the logits that predict ``ids[0]``
            (those of the prefix's last token, computed by the pass that filled the cache).
    """

    ids: list[int]
    start: int
    visible: torch.Tensor
    prefix: tuple[int, ...]


@dataclass
class TreeScores:
    """The token log-probs of every branch of a tree pass, branch by branch (row by row, in order).

    Attributes:
        first: ``(branches,)``, ``log p(ids[0] | prefix)`` of each branch.
        rest: ``log p(ids[k] | prefix, ids[:k])`` for ``k >= 1``, the branches' tokens one after another.
        owner: ``(len(rest),)``, the branch each entry of ``rest`` belongs to.
        sizes: each branch's number of tokens.
    """

    first: torch.Tensor
    rest: torch.Tensor
    owner: torch.Tensor
    sizes: list[int]

    def sums(self) -> torch.Tensor:
        """Each branch's summed token log-prob, ``(branches,)``, in two ops (cheap to backpropagate)."""
        return self.first.index_add(0, self.owner, self.rest) if len(self.rest) else self.first

    def per_branch(self) -> list[torch.Tensor]:
        """Each branch's token log-probs, ``[first, *rest of its own]``."""
        later = torch.split(self.rest, [n - 1 for n in self.sizes])
        return [torch.cat([self.first[b : b + 1], own]) for b, own in enumerate(later)]


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading ids ``a`` and ``b`` share, at most ``limit`` (a binary search over slice comparisons,
    which run in C).

    Example:
        >>> common_prefix((1, 2, 3, 4), [1, 2, 9], 10), common_prefix((1, 2), [1, 2, 3], 1)
        (2, 1)
    """
    lo, hi = 0, min(len(a), len(b), limit)
    a, b = list(a[:hi]), list(b[:hi])
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def keys_values(cache: DynamicCache, needs: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values; a ValueError for a layer that has none (linear attention, an empty layer),
    saying who ``needs`` them (e.g. ``"a shared prefix needs"``)."""
    out = []
    for i, layer in enumerate(cache.layers):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise ValueError(f"{needs} every layer's keys and values: layer {i} ({type(layer).__name__}) has none")
        out.append((keys, values))
    return out


def reserved_cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], length: int) -> DynamicCache:
    """A cache over per-layer ``(keys, values)`` buffers of shape ``(batch, heads, capacity, head_dim)`` whose
    first ``length`` columns hold the cache: each forward pass writes its new columns into the buffers' room.

    A ``DynamicCache`` concatenates each pass's columns to the layer's whole cache, a new copy of every layer's
    keys and values per pass while the old one is still held. The attention reads the same keys and values in
    the same order either way. A pass past the capacity concatenates, as a ``DynamicCache`` does. For acting
    only (no gradient: the buffers are written in place).

    >>> keys = torch.zeros(1, 1, 4, 2)
    >>> cache = reserved_cache([(keys, keys.clone())], length=1)
    >>> k, v = cache.update(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2), 0)
    >>> k.shape[2], cache.get_seq_length(), k.data_ptr() == keys.data_ptr()
    (3, 3, True)
    """
    from transformers import DynamicCache

    cache = DynamicCache()
    layer = _reserved_layer_class()
    cache.layers = [layer(k, v, length) for k, v in layers]
    return cache


def cache_rows(cache: DynamicCache, start: int, stop: int) -> DynamicCache | None:
    """Rows ``start:stop`` of a :func:`reserved_cache` as a reserved cache over the same buffers (no copy: a
    pass on it writes its columns into those rows' room); None for any other cache.

    >>> keys = torch.zeros(3, 1, 4, 2)
    >>> rows = cache_rows(reserved_cache([(keys, keys.clone())], length=2), 1, 3)
    >>> k, _ = rows.update(torch.ones(2, 1, 1, 2), torch.ones(2, 1, 1, 2), 0)
    >>> k.shape, float(keys[1:, :, 2].sum()), float(keys[0].sum())
    (torch.Size([2, 1, 3, 2]), 4.0, 0.0)
    """
    layer = _reserved_layer_class()
    reserved = [l for l in cache.layers if isinstance(l, layer)]
    if len(reserved) < len(cache.layers):
        return None
    return reserved_cache([(l.buffers[0][start:stop], l.buffers[1][start:stop]) for l in reserved], reserved[0].length)


@functools.cache
def _reserved_layer_class() -> type[Any]:
    """The layer class, made on first use (this module does not import Transformers until a cache is made)."""
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values are the first columns of buffers with room to grow."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
            super().__init__()
            self.device, self.is_initialized = keys.device, True
            self.buffers, self.length = (keys, values), length
            self.keys, self.values = keys[:, :, :length], values[:, :, :length]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
                   ) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = self.buffers
            end = self.length + key_states.shape[-2]
            if end > keys.shape[-2]:  # past the room: grow as a DynamicLayer does
                keys = torch.cat([keys[:, :, : self.length], key_states], dim=-2)
                values = torch.cat([values[:, :, : self.length], value_states], dim=-2)
                self.buffers = (keys, values)
            else:
                keys[:, :, self.length : end] = key_states
                values[:, :, self.length : end] = value_states
            self.length = end
            self.keys, self.values = keys[:, :, :end], values[:, :, :end]
            return self.keys, self.values

    return ReservedLayer


def score_tree(model: torch.nn.Module, cache: DynamicCache, rows: Sequence[Sequence[Branch]],
               prefix_logits: torch.Tensor, pad_id: int = 0) -> TreeScores:
    """Token log-probs of candidate continuations, every candidate of a cache row in one pass over that row.

    Row ``r`` of the pass continues row ``r`` of ``cache`` (the prefixes' keys and values, ``past`` columns)
    with its branches laid side by side: a branch's token attends to the keys its ``visible`` marks and to its
    own branch's earlier tokens only, at the positions it would have right after its prefix. So no branch
    copies its prefix's keys and values, and all of a row's candidates cost one pass. A branch's first token
    is scored by ``prefix_logits[branch.prefix]``, the rest by the tree pass. Gradients flow where the inputs
    carry them (the learner's); the cache grows by the pass's columns.
    """
    device = prefix_logits.device
    input_ids, positions, allowed, owner, rest_at = _tree_inputs(rows, pad_id)
    logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask_4d(model, allowed.to(device)),
                   position_ids=positions.to(device), use_cache=True, **{cache_kwarg(model): cache}).logits
    branches = [b for row in rows for b in row]
    # One gather each (indexing many slices would make the backward pass build a full-size gradient per slice).
    at = torch.tensor([b.prefix for b in branches], device=device)
    first_ids = torch.tensor([[b.ids[0]] for b in branches], device=device)
    first = torch.log_softmax(prefix_logits[tuple(at.T)].float(), -1).gather(1, first_ids).squeeze(1)
    rest = first.new_zeros(0)
    if rest_at:
        later = torch.tensor(rest_at, device=device)
        # log_softmax(x)[t] as x[t] - logsumexp(x): no (tokens, vocab) copy of the logits is made, gathered or
        # normalised (at 48 rows of 300 candidate tokens and a 2,000-token vocabulary, three copies of 115 MB).
        row, column = later[:, 0], later[:, 1]
        rest = logits[row, column, later[:, 2]].float() - torch.logsumexp(logits.float(), -1)[row, column]
    owner_t = torch.tensor(owner, dtype=torch.long, device=device)
    return TreeScores(first, rest, owner_t, [len(b.ids) for b in branches])


def candidate_log_policy(sums: torch.Tensor, sizes: Sequence[int], counts: Sequence[int],
                         length_normalize: Sequence[bool], temperature: Sequence[float]) -> torch.Tensor:
    """``log pi`` over the candidates of each choice, ``pi = softmax(score / temperature)``: the choose-mode policy.

    Args:
        sums: ``(candidates,)``, each candidate's summed token log-prob (:meth:`TreeScores.sums`), the choices'
            candidates one after another.
        sizes: each candidate's number of tokens.
        counts: each choice's number of candidates (summing to ``len(sums)``).
        length_normalize: per choice, whether its ``score`` is the mean token log-prob (else the sum).
        temperature: per choice, the softmax temperature (positive).

    Returns:
        ``(choices, max(counts))`` float64, ``-inf`` past a choice's own candidates. The agent samples from this
        table and the learner differentiates it (gradients flow to ``sums``): one function in one dtype, so the
        probability an action was sampled with is the one the learner's ratio starts from, to float64 rounding.
        float64 because the reduction is a few numbers per step, and the agent's records (``choice_probs``)
        must sum to 1 exactly enough to be checked.
    """
    if len(counts) != len(length_normalize) or len(counts) != len(temperature) or sum(counts) != len(sums):
        raise ValueError("candidate_log_policy: counts, length_normalize and temperature need one entry per "
                         "choice, and counts must add up to len(sums)")
    device = sums.device
    # The mean is taken in the scorer's float32, as the acting agent always has, before the float64 softmax.
    per_token = sums / torch.tensor(sizes, dtype=sums.dtype, device=device)
    normalize = torch.tensor([n for n, count in zip(length_normalize, counts) for _ in range(count)], device=device)
    scores = torch.where(normalize, per_token, sums).double()
    most = max(counts)
    slot = torch.tensor([i * most + m for i, count in enumerate(counts) for m in range(count)], device=device)
    table = torch.full((len(counts) * most,), float("-inf"), dtype=torch.float64, device=device)
    table = table.index_put((slot,), scores).view(len(counts), most)
    temperatures = torch.tensor(temperature, dtype=torch.float64, device=device)[:, None]
    return torch.log_softmax(table / temperatures, -1)


def _tree_inputs(rows: Sequence[Sequence[Branch]], pad_id: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[tuple[int, int, int]]]:
    """The tree pass's input ids, position ids and ``(rows, 1, width, past + width)`` mask; and, per token
    after a branch's first, its branch (``owner``) and its ``(row, column, token)`` in the pass (``rest_at``)."""
    past = next(b for row in rows for b in row).visible.shape[0]
    width = max(sum(len(b.ids) for b in row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    allowed = torch.zeros((len(rows), 1, width, past + width), dtype=torch.bool)
    owner: list[int] = []
    rest_at: list[tuple[int, int, int]] = []
    index = 0
    for r, row in enumerate(rows):
        offset = 0
        for branch in row:
            n = len(branch.ids)
            block = slice(offset, offset + n)
            input_ids[r, block] = torch.tensor(branch.ids)
            positions[r, block] = branch.start + torch.arange(n)
            allowed[r, 0, block, :past] = branch.visible
            allowed[r, 0, block, past + offset : past + offset + n] = torch.ones(n, n, dtype=torch.bool).tril()
            # Query offset+k predicts the branch's token k+1 (the prefix's logits predict token 0).
            owner += [index] * (n - 1)
            rest_at += [(r, offset + k, branch.ids[k + 1]) for k in range(n - 1)]
            index += 1
            offset += n
        pad = torch.arange(offset, width)
        allowed[r, 0, pad, past + pad] = True  # padding attends to itself only, so every query has a key
    return input_ids, positions, allowed, owner, rest_at
