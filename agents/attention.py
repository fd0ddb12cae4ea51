"""Attention that skips the keys a mask hides: the same outputs as SDPA, less arithmetic on CPU.

PyTorch's CPU attention kernel skips the hidden half of a causal mask only when it is given ``is_causal`` and no
mask; with an explicit mask it computes every query-key pair and throws the hidden ones away. Every pass this
project runs with a mask wastes that work: the update's and the scorer's passes after a shared prefix or a stored
context (the query starts at the cache's end, so the mask is causal aligned bottom-right), a batch of rows of
different lengths (padding), and the candidate trees of :func:`agents.lm.score_tree`, where an early choice's
candidates see only the context before it and each candidate only its own tokens. On the fork preset's update,
attention was 65% of the forward passes.

:func:`skip_hidden_keys` plans a mask once per pass (every layer of a pass is given the same mask):

- A mask that is exactly causal aligned bottom-right (a pass after a cache without padding: the learner's) with
  at most as many cached keys as queries past two blocks runs SDPA's causal kernel, which skips the hidden half
  itself but aligns top-left: ``keys - queries`` zero queries go in front, and their outputs are dropped.
- Any other mask of at least two blocks attends in blocks of :data:`BLOCK` queries; each block attends only to the
  keys some query of it sees (a slice when those are a prefix of the keys, a gather when they are fewer than
  :data:`GATHER_BELOW` of them), with the same mask on what is left. Shorter queries attend whole.
- SDPA is given the mask additive (0 / -inf), converted once per pass (up to :data:`ADDITIVE_BYTES`, or
  :data:`INFERENCE_ADDITIVE_BYTES` without autograd): given a boolean mask, SDPA converts it on every call, i.e.
  every layer (about 10% of a call), and keeps each layer's copy for the backward pass.

A hidden key adds ``exp(-inf) = 0`` to a query's softmax, so the outputs are SDPA's to float rounding, gradients
included. Outside the CPU or without a boolean mask it is Transformers' SDPA itself.

:func:`use_skip_hidden_keys` switches a model whose attention is ``"sdpa"`` to it (``"mosaic_sdpa"``, registered
with Transformers' ``AttentionInterface``); the agent and the learner call it on the model they are given. The
implementation is not saved with the model (Transformers does not serialise it).

Example:
    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
    >>> ids = torch.randint(1, 32, (2, 600), generator=torch.Generator().manual_seed(0))
    >>> attention = torch.ones_like(ids); attention[1, 400:] = 0  # the second row is padded
    >>> before = model(ids, attention_mask=attention).logits
    >>> use_skip_hidden_keys(model)
    'mosaic_sdpa'
    >>> after = model(ids, attention_mask=attention).logits
    >>> bool(torch.allclose(before[0], after[0], atol=1e-5) and torch.allclose(before[1, :400], after[1, :400],
    ...                                                                      atol=1e-5))
    True
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import torch

NAME = "mosaic_sdpa"
BLOCK = 256  # queries per block: small enough to skip most of a causal mask's hidden half, large enough to be fast
GATHER_BELOW = 0.75  # gather the visible keys when they are fewer than this share of all (a copy costs)
ADDITIVE_BYTES = 2**28  # the largest additive mask a pass keeps (256 MiB); above it SDPA converts on each call
# Without autograd a pass holds its additive mask across its layers where SDPA made and freed one per layer: above
# this size (a large scoring or evaluation batch) the boolean mask is kept. Holding every one raised a 3-iteration
# demo run's peak RSS by 137 MiB (1,733 -> 1,870 MiB, the same trajectories) for 2% of its time.
INFERENCE_ADDITIVE_BYTES = 2**24


def skip_hidden_keys(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Transformers' attention-function signature: ``query`` ``(batch, heads, q, d)``, ``key``/``value``
    ``(batch, kv_heads, k, d)``, ``attention_mask`` a boolean ``(batch, 1, q, k)`` (True: attend) or None; returns
    ``(output (batch, q, heads, d), None)`` as :func:`transformers.integrations.sdpa_attention.sdpa_attention_forward`,
    which it calls: on the padded query of a causal mask, on each block, or on the whole query."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    queries, keys = query.shape[2], key.shape[2]
    if (attention_mask is None or attention_mask.dtype != torch.bool or query.device.type != "cpu"
            or kwargs.get("position_bias") is not None or attention_mask.shape[-2:] != (queries, keys)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    plan = _plan(attention_mask, query.dtype)
    if plan.causal:
        # Query i sees keys j <= i + keys - queries; SDPA's causal kernel aligns top-left, so `keys - queries`
        # zero queries go first and their outputs are dropped (no gradient reaches them). With as many queries as
        # keys, Transformers keeps every key.
        padding = keys - queries
        if padding:
            query = torch.cat([query.new_zeros(*query.shape[:2], padding, query.shape[3]), query], dim=2)
        out, _ = sdpa_attention_forward(module, query, key, value, None, **{**kwargs, "is_causal": True})
        return out[:, padding:], None
    if plan.blocks is None:
        mask = attention_mask if plan.additive is None else plan.additive  # (None: above the bound)
        return sdpa_attention_forward(module, query, key, value, mask, **kwargs)
    outputs = []
    for (start, stop), (columns, block_mask) in zip(_blocks(queries), plan.blocks):
        k, v = key, value
        if isinstance(columns, int):  # the keys the block sees are the first `columns`: a slice
            k, v = key[:, :, :columns], value[:, :, :columns]
        elif columns is not None:
            k, v = key[:, :, columns], value[:, :, columns]
        if block_mask is None:  # above the bound: the boolean mask's block, cut on each call
            block_mask = _cut(attention_mask, start, stop, columns)
        out, _ = sdpa_attention_forward(module, query[:, :, start:stop], k, v, block_mask, **kwargs)
        outputs.append(out)
    return torch.cat(outputs, dim=1), None


def _blocks(queries: int) -> list[tuple[int, int]]:
    return [(start, min(queries, start + BLOCK)) for start in range(0, queries, BLOCK)]


class _Plan(NamedTuple):
    """How the passes' layers attend under one boolean mask (every layer of a pass is given the same mask object)."""

    mask: weakref.ref  # the boolean mask
    version: int  # its in-place version counter when planned
    dtype: torch.dtype  # the queries'
    grad: bool  # whether autograd was on (it decides how large an additive mask the plan keeps)
    causal: bool  # exactly causal aligned bottom-right, and cheaper so (:func:`_causal_pays`)
    additive: torch.Tensor | None  # under two blocks: the mask as SDPA adds it (0 / -inf, the queries' dtype)
    blocks: list[tuple[int | torch.Tensor | None, torch.Tensor | None]] | None  # per block: keys seen, additive mask


# the plan of the last mask, replaced whole (threads read it safely): every layer of a pass is given the same mask,
# so the plan is made once per pass, not once per layer; a mask changed in place since (its version counter moved),
# given queries of another dtype or met with autograd switched is planned again, and the plan goes when its mask does
_last: list[_Plan | None] = [None]


def _plan(mask: torch.Tensor, dtype: torch.dtype) -> _Plan:
    """The plan of ``mask`` for queries of ``dtype``: the last one, or a new one.

    SDPA turns a boolean mask into an additive one (0 / -inf) on every call, i.e. once per layer, and keeps each
    for the backward pass; the plan makes the same once per pass, so SDPA computes the same, bit for bit (a query
    that sees no key included). Under autograd the layers share it: a pass of 4 rows of 2,048 tokens through 4
    layers keeps 36 MiB of masks (the blocks made from the boolean mask kept 144 MiB, SDPA alone 256 MiB). A mask
    that is the same for every row (Transformers' masks without padding are one row expanded) is converted once,
    and SDPA broadcasts it."""
    last, grad = _last[0], torch.is_grad_enabled()
    if (last is not None and last.mask() is mask and last.version == mask._version and last.dtype == dtype
            and last.grad == grad):
        return last
    queries, keys = mask.shape[-2:]
    one = mask[:1] if mask.shape[0] > 1 and mask.stride(0) == 0 else mask
    causal = _causal_pays(queries, keys) and _is_causal(one)
    additive, blocks = None, None
    convert = one.numel() * torch.finfo(dtype).bits // 8 <= (ADDITIVE_BYTES if grad else INFERENCE_ADDITIVE_BYTES)
    if not causal and queries < 2 * BLOCK:
        additive = _additive(one, dtype) if convert else None
    elif not causal:  # each block's own mask, contiguous (measured 3-10% faster per call than a view of the whole)
        blocks = [(columns, _additive(_cut(one, start, stop, columns), dtype) if convert else None)
                  for (start, stop), columns in zip(_blocks(queries), _visible_keys(one))]
    plan = _Plan(weakref.ref(mask, _forget), mask._version, dtype, grad, causal, additive, blocks)
    _last[0] = plan
    return plan


def _forget(ref: weakref.ref) -> None:
    """Drop the last plan when its mask is gone (its additive mask would otherwise live until the next pass)."""
    last = _last[0]
    if last is not None and last.mask is ref:
        _last[0] = None


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``mask`` as SDPA makes it additive: 0 where True, -inf where False, of ``dtype``."""
    return torch.where(mask, torch.tensor(0.0, dtype=dtype, device=mask.device),
                       torch.tensor(float("-inf"), dtype=dtype, device=mask.device))


def _cut(mask: torch.Tensor, start: int, stop: int, columns: int | torch.Tensor | None) -> torch.Tensor:
    """The rows ``start:stop`` of ``mask`` at the keys a block sees (a view for a slice, a copy for a gather)."""
    rows = mask[..., start:stop, :]
    if isinstance(columns, int):
        return rows[..., :columns]
    return rows if columns is None else rows[..., columns]


def _causal_pays(queries: int, keys: int) -> bool:
    """Whether SDPA's causal kernel, run on ``keys - queries`` padding queries and these, beats the blocks.

    The padding costs ``(keys - queries)^2 / 2`` pairs; the kernel saves the mask's addition on every pair it
    computes and the blocks' share of hidden pairs. Measured (one thread, 4 heads of 32, forward and backward,
    causal time over the blocks'): it pays while the padding is at most the queries past the first two blocks:
    512 queries after 64 keys 1.10x, 1,000 after 455 0.99x and after 700 1.06x, 1,200 after 700 0.93x, 2,000 after
    455 0.81x and after 1,500 0.95x, 3,000 after 2,000 0.89x; under 512 queries it never pays (1.0-3.3x)."""
    return 0 <= keys - queries <= queries - 2 * BLOCK


def _is_causal(mask: torch.Tensor) -> bool:
    """Whether every row of ``mask`` is causal aligned bottom-right: query i sees exactly keys j <= i + k - q."""
    queries, keys = mask.shape[-2:]
    if not (bool(mask[..., -1, :].all()) and not bool(mask[..., 0, keys - queries + 1:].any())):
        return False  # (cheap: the last query sees every key, the first none after its own)
    causal = torch.arange(keys, device=mask.device) <= torch.arange(queries, device=mask.device)[:, None] + (keys - queries)
    return torch.equal(mask, causal.expand(mask.shape))


def _visible_keys(mask: torch.Tensor) -> list[int | torch.Tensor | None]:
    """Per block of queries, the keys some query of it sees: their count when they are the first keys, their
    indices when they are fewer than :data:`GATHER_BELOW` of all, else None (all of them)."""
    queries, keys = mask.shape[-2:]
    seen = mask.reshape(-1, queries, keys).any(0)
    padded = -queries % BLOCK
    if padded:
        seen = torch.cat([seen, seen.new_zeros(padded, keys)])
    per_block = seen.reshape(-1, BLOCK, keys).any(1)
    counts = per_block.sum(1).tolist()
    # the keys are the first `count` exactly when none after them is seen: the last seen key is at count - 1
    ends = (per_block * torch.arange(1, keys + 1, device=mask.device)).amax(1).tolist()
    out: list[int | torch.Tensor | None] = []
    for row, count, end in zip(per_block, counts, ends):
        if count and end == count:
            out.append(int(count))
        elif 0 < count < GATHER_BELOW * keys:
            out.append(row.nonzero().squeeze(1))
        else:
            out.append(None)
    return out


def use_skip_hidden_keys(model: torch.nn.Module) -> str | None:
    """Switch ``model`` (or the model under its LoRA adapters) from ``"sdpa"`` attention to :func:`skip_hidden_keys`;
    any other implementation (eager, flash attention, one a user registered) is left as it is. Returns the
    implementation the model now has, None for a module that is no Transformers model."""
    from transformers import PreTrainedModel

    model = _base_of_adapters(model)
    if not isinstance(model, PreTrainedModel):
        return None
    if model.config._attn_implementation == "sdpa" and model._can_set_attn_implementation():
        _register()
        model.set_attn_implementation(NAME)
    return model.config._attn_implementation


def _base_of_adapters(model: torch.nn.Module) -> torch.nn.Module:
    """The Transformers model under a PEFT wrapper (LoRA adapters: :func:`algos.learn.lora.add_lora`), else
    ``model``."""
    try:
        from peft import PeftModel
    except ImportError:  # (peft is the optional `lora` extra)
        return model
    return model.get_base_model() if isinstance(model, PeftModel) else model


def _register() -> None:
    """Register :data:`NAME` with Transformers' attention and mask interfaces (its masks are SDPA's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, skip_hidden_keys)
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
