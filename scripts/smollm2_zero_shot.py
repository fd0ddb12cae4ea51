"""SmolLM2 zero-shot in generate mode: how often it writes a valid tool call, per worked-exchange variant.

Runs ``LLMAgent`` (generate mode, no training) with SmolLM2-135M-Instruct on the same tasks and seeds for each
prompt variant (the worked exchange put before every session, :data:`envs.prompts.EXAMPLE_EXCHANGE` being the
committed default), the envs of a seed batched in one ``algos.rollout.Collector``, and reports per variant:

- ``valid``: the share of steps whose action the env ran without an ``action_error`` (the parse rate);
- ``well_formed``: the share of steps with a tool call the parser reads (a call that the env then refuses,
  e.g. ``find`` before any page is open, counts here but not in ``valid``);
- ``not_copied``: of the well-formed calls, the share whose argument names nothing of any variant's example
  (``search("Mira Holt")`` copied from the exchange is a copy; ``open(1)`` is not);
- ``tools``: the mix of the well-formed calls; ``success``: the share of episodes answered right.

Shares of steps come with a 95% interval clustered by episode (a ratio estimator over episodes: steps of one
episode are not independent); success with a normal interval over episodes.

Usage (a variant at the defaults, 20 tasks x 2 seeds: about 16 minutes on 2 busy CPU cores; docs/smollm2.md
has the runs)::

    nice -n 10 python scripts/smollm2_zero_shot.py --variants default --out results/smollm2/zero_shot/default.json
    python scripts/smollm2_zero_shot.py --variants default,mira --tasks 4 --seeds 0   # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch

import envs  # noqa: F401  (registers the environments)
from envs.actions import ActionError, parse_action
from envs.prompts import EXAMPLE_EXCHANGE, NO_CALL_FOUND, budget_note, render_transcript

ENV_ID = "mosaic/WebQA-v0"


def _exchange(question: str, calls: Sequence[str], results: Sequence[str], closing: str | None
              ) -> tuple[dict[str, str], ...]:
    """A worked exchange: the question, then each call and the tool result it got, then ``closing`` (a user
    message) when given."""
    messages = [{"role": "user", "content": question}]
    for call, result in zip(calls, results):
        messages += [{"role": "assistant", "content": call}, {"role": "user", "content": result}]
    if len(calls) > len(results):
        messages.append({"role": "assistant", "content": calls[-1]})
    if closing is not None:
        messages.append({"role": "user", "content": closing})
    return tuple(messages)


# The exchange before issue 40: a painter born in a city, then a separate "that was an example" turn.
MIRA = _exchange(
    "Question: In which city was the painter Mira Holt born?\n" + budget_note(9),
    ['search("Mira Holt")', "open(1)", 'answer("Tessaly")'],
    ["[Search results: Search: Mira Holt | /search?q=Mira+Holt | part 1 of 1.]\n"
     "[1] Mira Holt\n/wiki/Mira_Holt\nMira Holt is a painter.\n[2] Painters\n/category/Painters\nMira Holt",
     "[Page: Mira Holt | /wiki/Mira_Holt | part 1 of 1.]\nMira Holt\nMira Holt is a painter.\n"
     "Born | [1] Tessaly\nYear | 1911"],
    "Answer submitted. That was an example; the real question follows.")

# The same exchange without the closing turn: the real question follows the example's last call, so the
# chat never has two user turns in a row.
MIRA_NO_CLOSING = MIRA[:-1]

_FORMAT_NOTE = "(A format example: the tools and replies are real, the topic is made up.)"
# A clearly made-up topic of another kind (a bridge and its designer), marked as format only, ending on the
# call: no closing turn.
BRIDGE = _exchange(
    f"{_FORMAT_NOTE}\nQuestion: Who designed the Zumbo Bridge?\n" + budget_note(9),
    ['search("Zumbo Bridge")', "open(1)", 'answer("Pel Quarro")'],
    ["[Search results: Search: Zumbo Bridge | /search?q=Zumbo+Bridge | part 1 of 1.]\n"
     "[1] Zumbo Bridge\n/wiki/Zumbo_Bridge\nThe Zumbo Bridge is a bridge.\n[2] Bridges\n/category/Bridges\nZumbo Bridge",
     "[Page: Zumbo Bridge | /wiki/Zumbo_Bridge | part 1 of 1.]\nZumbo Bridge\nThe Zumbo Bridge is a bridge.\n"
     "Designer | [1] Pel Quarro\nOpened | 1650"],
    None)
BRIDGE_CLOSING = BRIDGE + ({"role": "user", "content": "Answer submitted. End of the format example."},)

# The bridge exchange in the env's exact formats (each result ends with the steps left), with one slip: a reply
# in prose, the env's error for it, and the call that follows: how to go on after an error.
RECOVERY = _exchange(
    f"{_FORMAT_NOTE}\nQuestion: Who designed the Zumbo Bridge?\n" + budget_note(9),
    ["The Zumbo Bridge was designed by an engineer.", 'search("Zumbo Bridge")', "open(1)", 'answer("Pel Quarro")'],
    [f"Error: {NO_CALL_FOUND}\n" + budget_note(8),
     "[Search results: Search: Zumbo Bridge | /search?q=Zumbo+Bridge | part 1 of 1.]\nSearch: Zumbo Bridge\n"
     "[1] Zumbo Bridge\n/wiki/Zumbo_Bridge\nThe Zumbo Bridge is a bridge.\n" + budget_note(7),
     "[Page: Zumbo Bridge | /wiki/Zumbo_Bridge | part 1 of 1.]\nZumbo Bridge\nThe Zumbo Bridge is a bridge.\n"
     "Designer | [1] Pel Quarro\nOpened | 1650\n" + budget_note(6)],
    None)

# Calls whose arguments are placeholders: nothing to copy but the shape.
PLACEHOLDERS = _exchange(
    "Question: <a question about NAME>\n" + budget_note(9),
    ['search("NAME")', "open(1)", 'answer("ANSWER")'],
    ["[Search results: Search: NAME | /search?q=NAME | part 1 of 1.]\n[1] NAME\n/wiki/NAME\nNAME is ...",
     "[Page: NAME | /wiki/NAME | part 1 of 1.]\nNAME\n... | ANSWER"],
    None)

# One turn only: a question and its first call.
SHORT = _exchange(f"{_FORMAT_NOTE}\nQuestion: Who designed the Zumbo Bridge?\n" + budget_note(9),
                  ['search("Zumbo Bridge")'], [], None)

VARIANTS: dict[str, tuple[str, tuple[dict[str, str], ...]]] = {
    "default": ("envs.prompts.EXAMPLE_EXCHANGE, the committed default: the bridge exchange, then a made-up clock "
                "tower's (two questions, no closing turn)", EXAMPLE_EXCHANGE),
    "none": ("no worked exchange", ()),
    "mira": ("the exchange before issue 40 (Mira Holt, then a closing 'that was an example' turn)", MIRA),
    "mira-no-closing": ("the Mira Holt exchange ending on answer(), no closing turn", MIRA_NO_CLOSING),
    "bridge": ("a made-up bridge and its designer, marked format-only, ending on answer()", BRIDGE),
    "bridge-closing": ("the bridge exchange with a closing 'end of the format example' turn", BRIDGE_CLOSING),
    "recovery": ("the bridge exchange in the env's exact formats, with a prose slip, its error and the call after",
                 RECOVERY),
    "placeholders": ("calls and results with placeholder names (NAME, ANSWER)", PLACEHOLDERS),
    "short": ("one turn: a made-up question and its search call", SHORT),
}

#: The names of every variant's example and of the system prompt's examples: an argument naming one is a copy.
EXAMPLE_TERMS = ("mira holt", "tessaly", "1911", "zumbo", "pel quarro", "1650", "lorro", "1702", "ines vato", "edra vane", "oskarde")
#: Placeholder arguments: a copy when the whole argument is one.
PLACEHOLDER_ARGS = ("name", "answer", "...")


def copied(arg: str | int) -> bool:
    """Whether a call's argument names something of an example (``open(1)``'s number never does)."""
    if not isinstance(arg, str):
        return False
    text = arg.lower().strip()
    return text in PLACEHOLDER_ARGS or any(term in text for term in EXAMPLE_TERMS)


def pick_tasks(env: gym.Env, n: int) -> list[str]:
    """``n`` task ids spread evenly over the env's tasks (in their order)."""
    tasks = [t.id for t in env.unwrapped.tasks]
    if n > len(tasks):
        raise SystemExit(f"--tasks {n}: the env has only {len(tasks)} tasks of these settings")
    return [tasks[(i * len(tasks)) // n] for i in range(n)]


def share(hits: Sequence[int], totals: Sequence[int]) -> dict[str, Any]:
    """``sum(hits) / sum(totals)`` and its 95% interval clustered by episode (a ratio estimator's linearised
    variance over the episodes; normal quantile), clipped to [0, 1].

    >>> share([1, 2], [2, 2])
    {'share': 0.75, 'low': 0.26, 'high': 1.0, 'hits': 3, 'of': 4, 'episodes': 2}
    """
    h, t = np.asarray(hits, float), np.asarray(totals, float)
    keep = t > 0
    h, t = h[keep], t[keep]
    k = int(h.size)
    if k == 0 or t.sum() == 0:
        return {"share": None, "low": None, "high": None, "hits": 0, "of": 0, "episodes": k}
    r = h.sum() / t.sum()
    half = float("nan")
    if k > 1:
        se = math.sqrt(((h - r * t) ** 2).sum() / (k * (k - 1))) / t.mean()
        half = 1.96 * se
    low, high = (max(0.0, r - half), min(1.0, r + half)) if k > 1 else (None, None)
    return {"share": round(float(r), 3), "low": None if low is None else round(low, 3),
            "high": None if high is None else round(high, 3), "hits": int(h.sum()), "of": int(t.sum()),
            "episodes": k}


def mean_interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean and its 95% normal interval, clipped to [0, 1]."""
    x = np.asarray(values, float)
    m = float(x.mean())
    half = 1.96 * float(x.std(ddof=1)) / math.sqrt(x.size) if x.size > 1 else float("nan")
    return {"mean": round(m, 3), "low": round(max(0.0, m - half), 3), "high": round(min(1.0, m + half), 3),
            "episodes": int(x.size)}


def exchange_tokens(tokenizer, examples) -> int:
    """How many tokens the exchange adds to every prompt (in the tokenizer's chat template, else the transcript)."""
    if not examples:
        return 0
    text = (tokenizer.apply_chat_template(list(examples), tokenize=False) if getattr(tokenizer, "chat_template", None)
            else render_transcript(examples, add_generation_prompt=False))
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def run_variant(name: str, examples, model, tokenizer, args, task_ids: list[str]) -> dict[str, Any]:
    from agents.llm import LLMAgent
    from algos.rollout import Collector, Request

    episodes, samples = [], []
    started = time.time()
    for seed in args.seeds:
        agent = LLMAgent(model, tokenizer, mode="generate", temperature=args.temperature, seed=seed,
                         max_new_tokens=args.max_new_tokens, examples=examples)
        env_kwargs = dict(site_size=args.site_size, hops=args.hops, split="all", max_steps=args.max_steps)
        collector = Collector(lambda: gym.make(ENV_ID, **env_kwargs), min(args.num_envs, len(task_ids)))
        requests = [Request(seed=1000 * seed + i, options={"task_id": tid}, transcript=True)
                    for i, tid in enumerate(task_ids)]
        trajectories = collector.run(agent, requests, progress=f"{name} seed {seed}")
        for env in collector.envs:
            env.close()
        for traj in trajectories:
            steps = traj.transcript or []
            calls = []
            for step in steps:
                try:
                    action = parse_action(step["action"])
                except ActionError:
                    calls.append(None)
                else:
                    calls.append((action.name, action.arg))
            episodes.append({
                "seed": seed, "task_id": traj.task_id, "steps": len(steps),
                "valid": sum(not s["error"] for s in steps),
                "well_formed": sum(c is not None for c in calls),
                "not_copied": sum(c is not None and not copied(c[1]) for c in calls),
                "tools": Counter(c[0] for c in calls if c is not None),
                "success": float(traj.tree.get("success", False)),
            })
            if len(samples) < args.samples:
                samples.append({"seed": seed, "task_id": traj.task_id, "actions": [s["action"] for s in steps]})
    tools = sum((e["tools"] for e in episodes), Counter())
    calls = sum(tools.values())
    return {
        "description": VARIANTS[name][0],
        "exchange_messages": len(examples),
        "exchange_tokens": exchange_tokens(tokenizer, examples),
        "valid": share([e["valid"] for e in episodes], [e["steps"] for e in episodes]),
        "well_formed": share([e["well_formed"] for e in episodes], [e["steps"] for e in episodes]),
        "not_copied": share([e["not_copied"] for e in episodes], [e["well_formed"] for e in episodes]),
        "tools": {t: round(c / calls, 3) for t, c in tools.most_common()} if calls else {},
        "success": mean_interval([e["success"] for e in episodes]),
        "per_seed_valid": {str(s): share([e["valid"] for e in episodes if e["seed"] == s],
                                         [e["steps"] for e in episodes if e["seed"] == s])["share"]
                           for s in args.seeds},
        "seconds": round(time.time() - started, 1),
        "samples": samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--variants", default="default,mira",
                   help=f"comma-separated prompt variants, of: {', '.join(VARIANTS)}")
    p.add_argument("--tasks", type=int, default=20, help="tasks, spread evenly over the site's tasks (split all)")
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds (the agent's sampling)")
    p.add_argument("--site-size", type=int, default=300, help="entities of the builtin site")
    p.add_argument("--hops", type=int, default=1, help="task hops")
    p.add_argument("--max-steps", type=int, default=6, help="step budget of an episode")
    p.add_argument("--max-new-tokens", type=int, default=40, help="a step's most generated tokens")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    p.add_argument("--num-envs", type=int, default=20, help="envs acting in one batch")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--samples", type=int, default=3, help="episodes' actions kept per variant in the output")
    p.add_argument("--model", default="smollm2", help="model spec for agents.models.load_model")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here (also printed)")
    args = p.parse_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or not names:
        p.error(f"unknown variant(s) {unknown}: use {', '.join(VARIANTS)}")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds {args.seeds!r}: give comma-separated integers, e.g. 0,1")
    if args.tasks < 1 or args.num_envs < 1 or args.max_steps < 1 or args.max_new_tokens < 1 or not args.seeds:
        p.error("--tasks, --num-envs, --max-steps, --max-new-tokens must be >= 1 and --seeds non-empty")
    torch.set_num_threads(args.threads)
    from agents.models import load_model

    model, tokenizer = load_model(args.model)
    model.eval()
    probe = gym.make(ENV_ID, site_size=args.site_size, hops=args.hops, split="all", max_steps=args.max_steps)
    task_ids = pick_tasks(probe, args.tasks)
    probe.close()
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "variants")}
    result = {"command": "python scripts/smollm2_zero_shot.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "settings": {**settings, "split": "all", "task_ids": task_ids}, "variants": {}}
    for name in names:
        result["variants"][name] = run_variant(name, VARIANTS[name][1], model, tokenizer, args, task_ids)
        v = result["variants"][name]
        print(f"{name:16s} valid {v['valid']['share']:.2f} [{v['valid']['low']}, {v['valid']['high']}]  "
              f"well-formed {v['well_formed']['share']:.2f}  not copied {v['not_copied']['share']}  "
              f"success {v['success']['mean']:.2f}  tools {v['tools']}  ({v['seconds']} s)", file=sys.stderr)
        if args.out is not None:  # written after each variant: a long run keeps what it has measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
