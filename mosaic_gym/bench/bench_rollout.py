"""Benchmark rollouts: LLMAgent stepping real WebQA envs beside bare ``model.generate`` on the same prompts.

For each context length (``short``: the first steps of fresh episodes; ``long``: steps after the contexts were
filled to about ``--long-tokens`` tokens by scripted searches), a batch of envs takes ``--steps`` steps with
:class:`agents.LLMAgent` (KV caches reused across steps, and again with ``reuse_kv=False``), timing the agent
and the envs. Then ``model.generate`` samples ``--max-new-tokens`` tokens for each recorded batch of prompts
(the same token ids, left-padded), as a rollout without an agent would. Prints one JSON object (and writes it
to ``--out``): generated tokens a second for each, and ``ratio`` = rollout tokens/s over generate tokens/s.

Usage:
    python -m mosaic_gym.bench.bench_rollout                   # tiny-3m, batch 8
    python -m mosaic_gym.bench.bench_rollout --quick           # tiny-1m, batch 4, fewer steps and tokens
    python -m mosaic_gym.bench.bench_rollout --smoke           # tiny-1m, batch 2, 1 step, 4 new tokens
    python -m mosaic_gym.bench.bench_rollout --model smollm2 --batch 16
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any


import gymnasium as gym
import torch

import envs  # noqa: F401  (registers the environments)
from agents.llm import LLMAgent
from mosaic_gym.bench.common import figure, load_bench_model, model_report
from mosaic_gym.bench.registry import Benchmark
from envs.actions import format_action

ENV_ID = "mosaic/WebQA-v0"
PACKAGES = ("torch", "transformers", "tokenizers", "gymnasium")


def make_envs(batch: int, tokenizer: Any, long_tokens: int) -> list[gym.Env]:
    # Exact token counts, a window the long contexts fit in, and a budget no measurement runs out of.
    return [
        gym.make(
            ENV_ID,
            site_size=120,
            max_steps=10_000,
            session_max_tokens=4 * long_tokens,
            token_counter=lambda text: len(tokenizer.encode(text, add_special_tokens=False)),
        )
        for _ in range(batch)
    ]


def fill_context(env: gym.Env, info: dict[str, Any], target_tokens: int) -> tuple[str, dict[str, Any]]:
    """Search the question's words one after another until the context holds ``target_tokens`` tokens."""
    words = re.findall(r"[A-Z][a-z]+", info["session_task"]) or ["museum"]
    k = 0
    obs = ""
    while info["context_tokens"] < target_tokens:
        obs, _, _, _, info = env.step(format_action("search", f"{words[k % len(words)]} {k}"))
        k += 1
    return obs, info


def start(envs_: list[gym.Env], seed: int, long_tokens: int | None) -> list[Any]:
    """Reset every env (env i with ``seed + i``), fill its context if asked, and snapshot it."""
    snapshots = []
    for i, env in enumerate(envs_):
        _, info = env.reset(seed=seed + i)
        if long_tokens:
            fill_context(env, info, long_tokens)
        snapshots.append(envs.view(env).snapshot())
    return snapshots


def rollout(agent: LLMAgent, envs_: list[gym.Env], snapshots: list[Any], steps: int, warm: bool) -> dict[str, Any]:
    """``steps`` timed agent steps over every env from the snapshots (after one untimed step when ``warm``)."""
    observations: list[Any] = []
    infos: list[dict[str, Any]] = []
    for env, snapshot in zip(envs_, snapshots):
        observation, info = env.reset(options={"snapshot": snapshot})
        observations.append(observation)
        infos.append(info)
    agent.reset()
    tokens = prompt_tokens = 0
    agent_s = env_s = 0.0
    prompts: list[list[list[int]]] = []
    for step in range(steps + int(warm)):
        t0 = time.perf_counter()
        actions, recorded = agent.act_batch_recorded(observations, infos)
        t1 = time.perf_counter()
        for i, (env, action) in enumerate(zip(envs_, actions)):
            observations[i], _, terminated, truncated, infos[i] = env.step(action)
            if terminated or truncated:
                observations[i], infos[i] = env.reset(options={"snapshot": snapshots[i]})
                agent.reset(i)
        t2 = time.perf_counter()
        if warm and step == 0:
            continue
        agent_s += t1 - t0
        env_s += t2 - t1
        tokens += sum(len(s.gen_ids) for s in recorded)
        prompt_tokens += sum(len(s.prompt_ids) for s in recorded)
        prompts.append([s.prompt_ids for s in recorded])
    calls = steps * len(envs_)
    return {
        "tokens": tokens,
        "mean_prompt_tokens": round(prompt_tokens / calls),
        "mean_new_tokens": round(tokens / calls, 1),
        "agent_s": round(agent_s, 3),
        "env_s": round(env_s, 3),
        "tokens_per_s": round(tokens / (agent_s + env_s), 1),
        "agent_tokens_per_s": round(tokens / agent_s, 1),
        "prompts": prompts,
    }


@torch.no_grad()
def bare_generate(model: Any, tokenizer: Any, prompts: list[list[list[int]]], new_tokens: int) -> dict[str, Any]:
    """``model.generate`` over each batch of prompts (left-padded), exactly ``new_tokens`` sampled tokens a row."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    tokens, seconds = 0, 0.0
    for batch in prompts:
        width = max(map(len, batch))
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        t0 = time.perf_counter()
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=pad,
        )
        seconds += time.perf_counter() - t0
        tokens += (out.shape[1] - width) * len(batch)
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def bench_context(
    model: Any, tokenizer: Any, args: argparse.Namespace, long_tokens: int | None
) -> dict[str, Any]:
    envs_ = make_envs(args.batch, tokenizer, args.long_tokens)
    snapshots = start(envs_, args.seed, long_tokens)
    result: dict[str, Any] = {"context": "long" if long_tokens else "short", "batch": args.batch}
    for name, reuse in (("agent", True), ("agent_no_kv_reuse", False)):
        agent = LLMAgent(model, tokenizer, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed,
                         reuse_kv=reuse)
        result[name] = rollout(agent, envs_, snapshots, args.steps, warm=bool(long_tokens))
    prompts = result["agent"]["prompts"]
    result["generate"] = bare_generate(model, tokenizer, prompts, args.max_new_tokens)
    for name in ("agent", "agent_no_kv_reuse"):
        del result[name]["prompts"]
    result["ratio"] = round(result["agent"]["tokens_per_s"] / result["generate"]["tokens_per_s"], 3)
    result["ratio_no_kv_reuse"] = round(
        result["agent_no_kv_reuse"]["tokens_per_s"] / result["generate"]["tokens_per_s"], 3
    )
    for env in envs_:
        env.close()
    return result


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="a load_model spec: tiny-1m|tiny-3m|tiny-10m|smollm2|folder (default tiny-3m)")
    parser.add_argument("--batch", type=int, help="envs stepped together (default 8)")
    parser.add_argument("--steps", type=int, help="timed steps per context (default 6)")
    parser.add_argument("--max-new-tokens", type=int, help="generation cap per step (default 32)")
    parser.add_argument("--long-tokens", type=int, help="context filled before the long steps (default 2048)")
    parser.add_argument("--seed", type=int, default=0, help="env and sampling seed")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark, as ``args`` (its command line's) set it, as one JSON-ready dict."""
    model, tokenizer, device = load_bench_model(args)
    return {
        **model_report("rollout", args, model, device, PACKAGES, ENV_ID),
        "max_new_tokens": args.max_new_tokens,
        "steps": args.steps,
        "contexts": [bench_context(model, tokenizer, args, None),
                     bench_context(model, tokenizer, args, args.long_tokens)],
    }


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows: rollout tokens/s beside bare ``model.generate`` on the same prompts, per context."""
    return [
        figure(f"LLMAgent rollout, {c['context']} context ({c['agent']['mean_prompt_tokens']} prompt tokens, "
               f"batch {c['batch']})", c["agent"]["tokens_per_s"], "tokens/s",
               "bare model.generate on the same prompts", c["generate"]["tokens_per_s"])
        for c in result["contexts"]
    ]


BENCHMARK = Benchmark(
    "rollout", "LLMAgent rollout tokens/s beside bare model.generate on the same prompts", measure, figures,
    quick="tiny-1m, batch 4, 3 steps, 16 new tokens",
    smoke="tiny-1m, batch 2, 1 step, 4 new tokens, 256 long-context tokens",
    defaults={"full": dict(model="tiny-3m", batch=8, steps=6, max_new_tokens=32, long_tokens=2048),
              "quick": dict(model="tiny-1m", batch=4, steps=3, max_new_tokens=16, long_tokens=1024),
              "smoke": dict(model="tiny-1m", batch=2, steps=1, max_new_tokens=4, long_tokens=256)},
    options=options, torch=True)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
