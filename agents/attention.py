"""Attention that skips the keys a mask hides: the same outputs as SDPA, less arithmetic on CPU.

PyTorch's CPU attention kernel skips the hidden half of a causal mask only when it is given ``is_causal`` and no
mask; with an explicit mask it computes every query-key pair and throws the hidden ones away. Every pass this
project runs with a mask wastes that work: the update's and the scorer's passes after a shared prefix or a stored
context (the query starts at the cache's end, so the mask is causal aligned bottom-right), a batch of rows of
different lengths (padding), and the candidate trees of :func:`agents.lm.score_tree`, where an early choice's
candidates see only the context before it and each candidate only its own tokens. On the fork preset's update,
attention was 65% of the forward passes.

:func:`skip_hidden_keys` attends in blocks of :data:`BLOCK` queries; each block attends only to the keys some
query of it sees (a slice when those are a prefix of the keys, a gather when they are fewer than
:data:`GATHER_BELOW` of them), with the same mask on what is left. A hidden key adds ``exp(-inf) = 0`` to a
query's softmax, so the outputs are SDPA's to float rounding, gradients included. Outside the CPU, without a
boolean mask, or for short queries it is Transformers' SDPA itself.

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
from typing import Any

import torch

NAME = "mosaic_sdpa"
BLOCK = 256  # queries per block: small enough to skip most of a causal mask's hidden half, large enough to be fast
GATHER_BELOW = 0.75  # gather the visible keys when they are fewer than this share of all (a copy costs)


def skip_hidden_keys(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Transformers' attention-function signature: ``query`` ``(batch, heads, q, d)``, ``key``/``value``
    ``(batch, kv_heads, k, d)``, ``attention_mask`` a boolean ``(batch, 1, q, k)`` (True: attend) or None; returns
    ``(output (batch, q, heads, d), None)`` as :func:`transformers.integrations.sdpa_attention.sdpa_attention_forward`,
    which it calls on each block."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    queries, keys = query.shape[2], key.shape[2]
    if (attention_mask is None or attention_mask.dtype != torch.bool or query.device.type != "cpu"
            or queries < 2 * BLOCK or kwargs.get("position_bias") is not None or attention_mask.shape[-1] != keys):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outputs = []
    for (start, stop), columns in zip(_blocks(queries), _visible_keys(attention_mask)):
        mask, k, v = attention_mask[..., start:stop, :], key, value
        if isinstance(columns, int):  # the keys the block sees are the first `columns`: a slice
            k, v, mask = key[:, :, :columns], value[:, :, :columns], mask[..., :columns]
        elif columns is not None:
            k, v, mask = key[:, :, columns], value[:, :, columns], mask[..., columns]
        out, _ = sdpa_attention_forward(module, query[:, :, start:stop], k, v, mask, **kwargs)
        outputs.append(out)
    return torch.cat(outputs, dim=1), None


def _blocks(queries: int) -> list[tuple[int, int]]:
    return [(start, min(queries, start + BLOCK)) for start in range(0, queries, BLOCK)]


# (a weak reference to the last mask, its version, its blocks' visible keys), one tuple replaced whole (threads read
# it safely): every layer of a pass is given the same mask, so its blocks are found once per pass, not once per
# layer; a mask changed in place since (its version counter moved) is read again
_last: list[tuple[weakref.ref, int, list[int | torch.Tensor | None]] | None] = [None]


def _visible_keys(mask: torch.Tensor) -> list[int | torch.Tensor | None]:
    """Per block of queries, the keys some query of it sees: their count when they are the first keys, their
    indices when they are fewer than :data:`GATHER_BELOW` of all, else None (all of them)."""
    last = _last[0]
    if last is not None and last[0]() is mask and last[1] == mask._version:
        return last[2]
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
    _last[0] = (weakref.ref(mask), mask._version, out)
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
