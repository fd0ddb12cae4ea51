"""LoRA for the learners: low-rank adapters (through ``peft``) on every linear layer of a causal LM, trained in
place of its weights, and merged back into them when the run saves its model.

The adapters are injected into the model object itself, so the agent, the learner and the checkpoint keep
working with the model they were given (its class and its forward are unchanged); only the adapters' weights
require gradients, so the optimizer keeps state for them alone. ``peft`` is an optional extra
(``pip install 'mosaic-gym[lora]'``).

Example:
    >>> from agents.models import load_model
    >>> model, _ = load_model("tiny-1m", texts=["a b c"] * 20)
    >>> adapters = add_lora(model, rank=4, seed=0)
    >>> trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    >>> 0 < trainable < model.num_parameters() / 10
    True
    >>> merge_lora(adapters) is model, any(p.requires_grad is False for p in model.parameters())
    (True, False)
"""

from __future__ import annotations

from typing import Any

import torch

LORA_INSTALL = "pip install 'mosaic-gym[lora]'"


def add_lora(model: torch.nn.Module, rank: int, seed: int = 0, alpha: int | None = None) -> Any:
    """Inject rank-``rank`` LoRA adapters (scale ``alpha / rank``, default ``alpha = 2 * rank``) into every linear
    layer of ``model`` but its output head, in place, and freeze every other weight. Returns the ``peft`` handle
    that :func:`merge_lora` takes. The adapters' random initialisation draws from ``seed`` alone (the global torch
    RNG is left as it was), so a resumed run builds the same model before loading its checkpoint."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ModuleNotFoundError(f"lora_rank > 0 needs peft: {LORA_INSTALL}") from None
    if rank < 1:
        raise ValueError(f"LoRA rank {rank}: give 1 or more (0 means no LoRA: train every weight)")
    config = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, target_modules="all-linear",
                        lora_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def merge_lora(adapters: Any) -> torch.nn.Module:
    """Fold the adapters into the weights they adapt and remove them: the model object that :func:`add_lora`
    took, now a plain model again (every weight trainable) that ``save_pretrained`` writes as usual."""
    model = adapters.merge_and_unload()
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model
