"""Benchmark attention that skips the keys a mask hides (:mod:`agents.attention`) beside SDPA on the same tensors.

The masks are the ones this project's passes carry: a causal pass after a 455-token shared prefix (the update's and
the scorer's, after the system message or a stored context), a padded batch (rows of different lengths), a candidate
tree after a long context (six choices of eight candidates each, every choice seeing more of the context than the
one before, as :func:`agents.lm.score_tree`'s), and an acting step (eight rows' new prompts of up to 300 tokens
after their caches, padded, as the agent feeds them: too few queries for blocks). For each: the time of a pass's
attention, forward and backward (:data:`LAYERS` layers given one new mask, as a model's pass gives them; the minimum
over ``--repeat`` runs) by Transformers' SDPA and by :func:`agents.attention.skip_hidden_keys`, the path the latter
takes (the causal kernel, blocks, or the whole query), the share of query-key pairs it still computes, and the
largest difference of the two outputs (float rounding); and the times of the forward pass alone, without autograd
(the agent's passes).

Usage:
    python -m mosaic_gym.bench.bench_attention            # contexts of 1,000, 2,000 and 3,000 tokens
    python -m mosaic_gym.bench.bench_attention --quick    # 1,000 and 2,000
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import torch

from agents.attention import BLOCK, _blocks, _plan, skip_hidden_keys
from mosaic_gym.bench.common import at_least, figure, machine, torch_machine
from mosaic_gym.bench.registry import Benchmark

PACKAGES = ("torch", "transformers")
PREFIX = 455  # the system message's tokens, which the update and the scorer run once for every row
HEADS, DIM, LAYERS = 4, 32, 4  # tiny-1m's attention


class _Layer(torch.nn.Module):  # what the attention functions read of a layer
    num_key_value_groups = 1
    is_causal = True


def causal_after_prefix(length: int) -> torch.Tensor:
    """The mask of a row of ``length`` tokens fed after the shared prefix: causal, aligned bottom-right."""
    queries = length - PREFIX
    return (torch.arange(length)[None] <= torch.arange(queries)[:, None] + PREFIX)[None, None]


def padded_batch(length: int) -> torch.Tensor:
    """Two rows fed from the start, of ``length`` and ``length // 2`` tokens: causal, the shorter padded."""
    causal = torch.tril(torch.ones(length, length, dtype=torch.bool))
    short = causal.clone()
    short[:, length // 2:] = False
    short[length // 2:, 0] = True  # (a padding query sees one key, as SDPA's masks keep it finite)
    return torch.stack([causal, short])[:, None]


def tree_mask(past: int, branches: list[tuple[int, int]]) -> torch.Tensor:
    """A candidate tree after ``past`` keys, as :func:`agents.lm.score_tree`'s mask: each ``(seen, length)`` branch
    of ``length`` tokens sees the first ``seen`` past keys and its own earlier tokens."""
    tree = sum(n for _, n in branches)
    mask = torch.zeros(tree, past + tree, dtype=torch.bool)
    at = 0
    for seen, n in branches:
        mask[at:at + n, :seen] = True
        mask[at:at + n, past + at:past + at + n] = torch.tril(torch.ones(n, n, dtype=torch.bool))
        at += n
    return mask[None, None]


def candidate_tree(length: int) -> torch.Tensor:
    """Six choices of eight 20-token candidates after ``length`` context tokens, choice k seeing the first
    (k + 1) / 6 of them."""
    return tree_mask(length, [(length * (k + 1) // 6, 20) for k in range(6) for _ in range(8)])


def acting_step(length: int) -> torch.Tensor:
    """Eight rows after a cache of ``length`` columns, as Transformers masks the agent's step: row r's context fills
    the first ``length - 40 r`` of them (the rest is padding), and its new prompt the last ``300 - 20 r`` of the 300
    new columns (left-padded, so every row ends at the last column)."""
    from transformers.masking_utils import sdpa_mask

    padding = torch.zeros(8, length + 300, dtype=torch.bool)
    for r in range(8):
        padding[r, :length - 40 * r] = True
        padding[r, length + 20 * r:] = True
    mask = sdpa_mask(batch_size=8, q_length=300, kv_length=length + 300, q_offset=length, attention_mask=padding)
    assert mask is not None  # (None only where no padding and a causal kernel would do: here there is padding)
    return mask


MASKS: dict[str, Callable[[int], torch.Tensor]] = {
    "causal after a shared prefix": causal_after_prefix, "padded batch": padded_batch,
    "candidate tree": candidate_tree, "acting step": acting_step}


def path(mask: torch.Tensor) -> str:
    """The way :func:`skip_hidden_keys` attends under ``mask`` (its own plan for the pass): "causal kernel",
    "blocks" or "whole"."""
    plan = _plan(mask, torch.float32)
    return "causal kernel" if plan.causal else "blocks" if plan.blocks is not None else "whole"


def pairs_computed(mask: torch.Tensor) -> float:
    """The share of a mask's query-key pairs that :func:`skip_hidden_keys` attends over (the causal kernel: the
    lower triangle of its padded queries)."""
    plan = _plan(mask, torch.float32)
    queries, keys = mask.shape[-2:]
    if plan.blocks is None:
        return keys * (keys + 1) / 2 / (queries * keys) if plan.causal else 1.0
    done = 0
    for (start, stop), (columns, _) in zip(_blocks(queries), plan.blocks):
        width = keys if columns is None else columns if isinstance(columns, int) else len(columns)
        done += (stop - start) * width
    return done / (queries * keys)


def timed(fn: Callable[..., tuple[torch.Tensor, Any]], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          mask: torch.Tensor, repeat: int, backward: bool = True) -> tuple[float, torch.Tensor]:
    """The least seconds of ``repeat`` passes of ``fn`` through :data:`LAYERS` layers, forward and backward (or
    forward only, without autograd, as the agent's passes), each pass given a new copy of ``mask`` (what is done
    once per pass is timed once per pass), and its output."""
    best, out = float("inf"), None
    for _ in range(repeat):
        fresh = mask.clone()
        leaves = [t.detach().requires_grad_(backward) for t in (q, k, v)]
        started = time.perf_counter()
        with torch.set_grad_enabled(backward):
            outs = [fn(_Layer(), *leaves, fresh, scaling=DIM ** -0.5)[0] for _ in range(LAYERS)]
            if backward:
                torch.stack([o.sum() for o in outs]).sum().backward()
        best = min(best, time.perf_counter() - started)
        out = outs[0]
    assert out is not None
    return best, out.detach()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every mask at every length, both ways."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    generator = torch.Generator().manual_seed(0)
    rows = []
    for name, make in MASKS.items():
        for length in args.lengths:
            mask = make(length)
            batch, queries, keys = mask.shape[0], mask.shape[-2], mask.shape[-1]
            q, k, v = (torch.randn(batch, HEADS, n, DIM, generator=generator) for n in (queries, keys, keys))
            sdpa_s, expected = timed(sdpa_attention_forward, q, k, v, mask, args.repeat)
            skip_s, got = timed(skip_hidden_keys, q, k, v, mask, args.repeat)
            forward = [timed(fn, q, k, v, mask, args.repeat, backward=False)[0]
                       for fn in (sdpa_attention_forward, skip_hidden_keys)]
            live = mask.any(-1).reshape(batch, queries)  # queries that see a key
            rows.append({"mask": name, "context": length, "queries": queries, "keys": keys, "batch": batch,
                         "sdpa_ms": round(sdpa_s * 1e3, 2), "skip_ms": round(skip_s * 1e3, 2),
                         "ratio": round(skip_s / sdpa_s, 3), "sdpa_forward_ms": round(forward[0] * 1e3, 2),
                         "skip_forward_ms": round(forward[1] * 1e3, 2),
                         "forward_ratio": round(forward[1] / forward[0], 3), "path": path(mask),
                         "pairs_computed": round(pairs_computed(mask), 3),
                         "max_abs_difference": float((got - expected)[live].abs().max())})
    return {"bench": "attention", "settings": args.settings, "machine": {**machine(PACKAGES), **torch_machine()},
            "config": {"lengths": list(args.lengths), "repeat": args.repeat, "heads": HEADS, "head_dim": DIM,
                       "layers": LAYERS, "prefix": PREFIX, "block": BLOCK},
            "rows": rows}


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per mask and context: the skipping attention's forward and backward beside SDPA's."""
    return [figure(f"{row['mask']}, {row['context']} tokens ({row['path']}): {LAYERS} layers forward + backward",
                   row["skip_ms"], "ms",
                   "SDPA, the same tensors", row["sdpa_ms"]) for row in result["rows"]]


def lengths(text: str) -> list[int]:
    """``--lengths``: comma-separated context lengths, each longer than the shared prefix."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers, comma-separated (e.g. 1000,2000)") from None
    if any(n <= PREFIX for n in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each context must be longer than the {PREFIX}-token prefix")
    return values


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=lengths,
                        help="context lengths, comma-separated (default 1000,2000,3000; quick: 1000,2000)")
    parser.add_argument("--repeat", type=at_least(1), help="runs of each pass; the least time counts (default 5)")


BENCHMARK = Benchmark(
    "attention", "attention that skips the keys a mask hides (agents.attention), forward and backward, beside SDPA "
    "on the same tensors: causal after a shared prefix, a padded batch, a candidate tree, an acting step", measure,
    figures,
    quick="contexts of 1,000 and 2,000 tokens", smoke="a context of 1,000 tokens, one run",
    defaults={"full": {"lengths": [1000, 2000, 3000], "repeat": 5}, "quick": {"lengths": [1000, 2000], "repeat": 3},
              "smoke": {"lengths": [1000], "repeat": 1}},
    options=options, suites=(), torch=True)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
