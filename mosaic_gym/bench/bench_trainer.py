"""Benchmark the learner: tokens a second through ``PolicyGradient.update`` on packed session sequences, beside
a bare forward and backward of the same model on the same tokens.

The sequences are real ones: the oracle plays WebQA episodes (compacting and forking) while an ``LLMAgent``
records, by teacher forcing, the exact tokens it conditions on and emits and their log-probs; each session is
packed into its training sequence (``session_sequences``) and gets an advantage of +1 or -1. Then, interleaved
and ``repeat`` times after an untimed warm-up (fastest counts):

- ``update``: ``PolicyGradient.update(sequences)``: micro-batches, log-probs of the generated tokens (logits only
  where they are predicted), the clipped surrogate, backward, gradient clipping and an AdamW step;
- ``bare``: over the same micro-batches (same padding), ``model(input_ids, attention_mask)``, the mean
  next-token cross-entropy over every real token, and backward: the least work a training step on these
  tokens does.

Tokens a second count the sequences' real tokens (prompts and generated, no padding); ``ratio`` is update
tokens/s over bare tokens/s. Prints one JSON object (and writes it to ``--out``).

Usage:
    python -m mosaic_gym.bench.bench_trainer             # tiny-3m, 2 episodes of any difficulty
    python -m mosaic_gym.bench.bench_trainer --quick     # tiny-1m, 4 one-hop episodes (one session each)
    python -m mosaic_gym.bench.bench_trainer --smoke     # tiny-1m, 1 one-hop episode on a site of 150
    python -m mosaic_gym.bench.bench_trainer --model tiny-10m --episodes 32 --threads 2
    python -m mosaic_gym.bench.bench_trainer --model smollm2 --episodes 4 --hops 1 --window 1024 --lora-rank 16
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence


import gymnasium as gym
import torch
import torch.nn.functional as F

import envs  # noqa: F401  (registers the environments)
from agents import OracleAgent
from agents.llm import LLMAgent
from algos.learn.bc import TeacherForcing
from algos.learn.config import PGConfig
from algos.learn.pg import PolicyGradient
from algos.logprobs import micro_batches
from algos.rollout import Collector, Request, TrainSequence, session_sequences
from mosaic_gym.bench.common import at_least, figure, load_bench_model, model_report
from mosaic_gym.bench.registry import Benchmark

ENV_ID = "mosaic/WebQA-v0"
PACKAGES = ("torch", "transformers", "tokenizers", "gymnasium")


def sequences_from_oracle(model: Any, tokenizer: Any, args: argparse.Namespace, device: str) -> list[TrainSequence]:
    """Every session of ``args.episodes`` teacher-forced oracle episodes as a training sequence, advantages +1/-1."""
    kwargs = {"site_size": args.site_size, "session_max_tokens": args.window}
    if args.hops is not None:
        kwargs["hops"] = args.hops
    make_env = lambda: gym.make(ENV_ID, **kwargs)  # noqa: E731
    oracle = OracleAgent(make_env(), compact_at=0.5, fork=True)
    forced = TeacherForcing(oracle, LLMAgent(model, tokenizer, device=device))
    requests = [Request(seed=s, options={}) for s in range(args.episodes)]
    trajectories = Collector(make_env, num_envs=4).run(forced, requests)
    sequences = []
    for k, trajectory in enumerate(trajectories):
        for session in session_sequences(trajectory).values():
            for sequence in session:
                sequence.advantage = 1.0 if k % 2 == 0 else -1.0
                sequences.append(sequence)
    return sequences


def bare_forward_backward(model: torch.nn.Module, batches: Sequence[list[TrainSequence]], device: torch.device
                          ) -> None:
    """Forward, mean next-token cross-entropy over every real token, and backward, one micro-batch at a time."""
    model.train()
    model.zero_grad(set_to_none=True)
    total = sum(len(s.token_ids) - 1 for batch in batches for s in batch)
    for batch in batches:
        length = max(len(s.token_ids) for s in batch)
        ids = torch.zeros((len(batch), length), dtype=torch.long)
        attn = torch.zeros_like(ids)
        for b, s in enumerate(batch):
            ids[b, : len(s.token_ids)] = torch.tensor(s.token_ids)
            attn[b, : len(s.token_ids)] = 1
        ids, attn = ids.to(device), attn.to(device)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        losses = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="none")
        loss = (losses * attn[:, 1:].flatten()).sum() / total
        loss.backward()
    model.eval()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="a load_model spec: tiny-1m|tiny-3m|tiny-10m|smollm2|folder (default tiny-3m)")
    parser.add_argument("--episodes", type=int, help="teacher-forced oracle episodes (default 2)")
    parser.add_argument("--window", type=int, default=4096, help="the env's session_max_tokens: how long sessions get")
    parser.add_argument("--hops", type=int, help="only tasks of this many hops (default: every task; quick: 1)")
    parser.add_argument("--site-size", type=int, help="builtin site entities (default 300; smoke 150)")
    parser.add_argument("--repeat", type=at_least(1), help="timed passes of each, after a warm-up (default 3)")
    parser.add_argument("--lora-rank", type=int, default=0,
                        help="also time the update of a copy of the model with LoRA adapters of this rank (needs peft)")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark, as ``args`` (its command line's) set it, as one JSON-ready dict."""
    model, tokenizer, device = load_bench_model(args)
    sequences = sequences_from_oracle(model, tokenizer, args, device)
    config = PGConfig(device=device)
    learner = PolicyGradient(model, config)
    batches = list(micro_batches(sequences, config.micro_batch_tokens))
    update_s = bare_s = float("inf")
    for attempt in range(args.repeat + 1):
        synchronize(learner.device)
        start = time.perf_counter()
        learner.update(sequences)
        synchronize(learner.device)
        middle = time.perf_counter()
        bare_forward_backward(model, batches, learner.device)
        synchronize(learner.device)
        end = time.perf_counter()
        if attempt > 0:  # the first pass of each warms up (allocations, kernels) and does not count
            update_s, bare_s = min(update_s, middle - start), min(bare_s, end - middle)
    tokens = sum(len(s.token_ids) for s in sequences)
    lora = _lora_row(model, sequences, config, args) if args.lora_rank else {}
    return {
        **model_report("trainer", args, model, device, PACKAGES, ENV_ID),
        "episodes": args.episodes,
        "window": args.window,
        "hops": args.hops,
        "sequences": len(sequences),
        "micro_batches": len(batches),
        "tokens": tokens,
        "generated_tokens": sum(s.num_generated for s in sequences),
        "padded_tokens": sum(len(b) * max(len(s.token_ids) for s in b) for b in batches),
        "longest_sequence": max(len(s.token_ids) for s in sequences),
        "update_s": round(update_s, 4),
        "bare_s": round(bare_s, 4),
        "update_tokens_per_s": round(tokens / update_s, 1),
        "bare_tokens_per_s": round(tokens / bare_s, 1),
        "ratio": round(bare_s / update_s, 3),
        **lora,
    }


def _lora_row(model: torch.nn.Module, sequences: list[TrainSequence], config: PGConfig, args: argparse.Namespace
              ) -> dict[str, Any]:
    """The same update on a copy of ``model`` with LoRA adapters (:func:`algos.learn.lora.add_lora`): its tokens/s, and
    its speed over the full update's as ``lora_speedup``."""
    import copy

    from algos.learn.lora import add_lora

    adapted = copy.deepcopy(model)
    add_lora(adapted, args.lora_rank)
    learner = PolicyGradient(adapted, config)
    best = float("inf")
    for attempt in range(args.repeat + 1):
        synchronize(learner.device)
        start = time.perf_counter()
        learner.update(sequences)
        synchronize(learner.device)
        if attempt > 0:
            best = min(best, time.perf_counter() - start)
    tokens = sum(len(s.token_ids) for s in sequences)
    trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    return {"lora_rank": args.lora_rank, "lora_trainable_parameters": trainable, "lora_update_s": round(best, 4),
            "lora_update_tokens_per_s": round(tokens / best, 1)}


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary row: update tokens/s beside a bare forward and backward on the same tokens."""
    return [figure(f"PolicyGradient.update, {result['model']} ({result['sequences']} session sequences)",
                   result["update_tokens_per_s"], "tokens/s", "bare forward + backward, same tokens",
                   result["bare_tokens_per_s"])]


BENCHMARK = Benchmark(
    "trainer", "PolicyGradient.update tokens/s beside a bare forward + backward on the same tokens", measure,
    figures, quick="tiny-1m, 4 one-hop episodes, 1 repeat", smoke="tiny-1m, 1 one-hop episode on a site of 150, "
    "1 repeat", defaults={"full": dict(model="tiny-3m", episodes=2, repeat=3, site_size=300),
                          "quick": dict(model="tiny-1m", episodes=4, hops=1, repeat=1, site_size=300),
                          "smoke": dict(model="tiny-1m", episodes=1, hops=1, repeat=1, site_size=150)},
    options=options, torch=True)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
