"""BudgetMix vs a fixed budget: train both from one warm start, compare their Pass@(1,T) curves.

RL gains are known to shrink when the step budget at test time is smaller than the one trained with. This
example warm-starts one tiny policy on the embedded demo's tasks (``mosaic train``'s defaults, with the steps
left shown to the agent), then runs RL twice from it: once with a fixed budget, once with BudgetMix (each
group's budget drawn from a set), and measures Pass@(1,T) on held-out tasks for several T with the budget
told to the agent (the ``rerun`` protocol), for the warm start too.

    python examples/budgetmix.py --out runs/budgetmix          # 51 min of CPU time (25+ min on 2 cores)
    python examples/budgetmix.py --quick --out /tmp/budgetmix  # a smoke run (a minute or two)

Writes ``results.json`` (both tables) and ``pass_at_1.png`` (Pass@(1,T) against T, one curve per training).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

import envs  # noqa: E402,F401  (registers the environments)
from agents.llm import LLMAgent  # noqa: E402
from agents.models import load_model  # noqa: E402
from algos.learn.config import compaction_demo  # noqa: E402
from algos.evaluate import pass_at_kt  # noqa: E402
from algos.learn.train import train  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/budgetmix", help="folder for the runs and results")
    p.add_argument("--fixed", type=int, default=8, help="the fixed training budget")
    p.add_argument("--mix", default="2,3,4,6,8", help="the BudgetMix set (uniform over it)")
    p.add_argument("--ts", default="2,3,4,6,8", help="evaluation budgets T")
    p.add_argument("--n", type=int, default=4, help="samples per held-out task")
    p.add_argument("--iterations", type=int, default=8, help="RL iterations of each training")
    p.add_argument("--quick", action="store_true", help="tiny settings, for a smoke test")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = Path(args.out)
    demo = compaction_demo()  # the demo these results were made with (one summary per compaction)
    # 48 envs, the demo's default when docs/results.md's results were made (the batching decides the samples).
    base = compaction_demo(algo=demo.algo, env_kwargs={**demo.env_kwargs, "max_steps": args.fixed, "show_budget": True},
                           iterations=0, num_envs=48, seed=args.seed, out=str(out / "warm_start"))
    if args.quick:
        base = dataclasses.replace(base, env_kwargs={**base.env_kwargs, "site_size": 150}, model="tiny-100k",
                                   bc_episodes=8, bc_epochs=1, tasks_per_iter=2, group_size=2, eval_episodes=1,
                                   eval_tasks=4, num_envs=8)
        args.iterations, args.n, args.ts = 1, 1, "2,4,8"
    ts = [int(t) for t in args.ts.split(",")]

    train(base)  # the shared warm start (no RL)
    warm = str(out / "warm_start" / "final")
    results = {}
    for name, budgets in (("warm_start", None), ("fixed", str(args.fixed)), ("budgetmix", args.mix)):
        if budgets is not None:
            train(dataclasses.replace(base, model=warm, bc_episodes=0, iterations=args.iterations, budgets=budgets,
                                      out=str(out / name)))
        model, tokenizer = load_model(str(out / name / "final"))
        agent = LLMAgent(model, tokenizer, mode="choose", seed=args.seed)
        make = lambda: gym.make("mosaic/WebQA-v0", **{**base.env_kwargs, "split": "test"})  # noqa: E731
        tasks = [t.id for t in envs.view(make()).tasks[:base.eval_tasks]]  # every test task but with --quick
        result = pass_at_kt(agent, make, ks=[1], ts=ts, n=args.n, protocol="rerun", num_envs=base.num_envs,
                            tasks=tasks)
        result.save(out / name)
        results[name] = {"budgets": budgets or "none (no RL)", "pass_at_1": dict(zip(ts, result.table[0].tolist()))}
        print(f"{name} ({results[name]['budgets']}):", result.markdown())

    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for name, r in results.items():
        ax.plot(ts, [r["pass_at_1"][t] for t in ts], marker="o", label=f"{name} ({r['budgets']})")
    ax.set_xlabel("budget T at test time")
    ax.set_ylabel("Pass@(1,T), held-out")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "pass_at_1.png")
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
