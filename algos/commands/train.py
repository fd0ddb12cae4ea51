"""``mosaic train``: warm start, then broadcast or Mosaic policy gradient; held-out success before and after."""

from __future__ import annotations

import argparse
import json

from .common import parse_hops


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..config import TrainConfig

    d = TrainConfig()
    p = subparsers.add_parser(
        "train",
        help="train an LLM policy (warm start + RL with broadcast or Mosaic credit)",
        description=(
            "Train an LLM policy across sessions. With no arguments: the embedded CPU demo, a tiny model on easy "
            "builtin tasks (one-hop questions, candidate actions) in a 600-token window, so each episode takes two "
            "sessions (read, compact, answer from the summary); oracle warm start then Mosaic RL, under 15 "
            "minutes on 2 cores; it prints held-out success before and after RL, and sessions per trajectory."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--algo", default=d.algo, choices=["broadcast", "mosaic"], help="credit assignment")
    p.add_argument("--env", default=d.env_id, help="environment id (mosaic/WebQA-v0, -Compact-, -Fork-, -Single-)")
    p.add_argument("--site-size", type=int, default=d.env_kwargs["site_size"], help="entities of the builtin site")
    p.add_argument("--site-seed", type=int, default=0, help="which builtin site")
    p.add_argument("--hops", default=str(d.env_kwargs["hops"]), help="task difficulty: N or LO-HI")
    p.add_argument("--max-steps", type=int, default=d.env_kwargs["max_steps"], help="fixed step budget T")
    p.add_argument("--session-max-tokens", type=int, default=d.env_kwargs.get("session_max_tokens"),
                   help="context window of a session: past it the env asks the agent to compact")
    p.add_argument("--budgets", default=None,
                   help="BudgetMix: '8' fixed, '4,8,16' uniform set, 'log:4-32' log-uniform, 'schedule:0=4,20=8'")
    p.add_argument("--env-kwargs", default="{}", help="more env kwargs as JSON")
    p.add_argument("--model", default=d.model, help="tiny-1m | tiny-3m | tiny-10m | smollm2 | a folder | a hub id")
    p.add_argument("--mode", default=d.mode, choices=["choose", "generate"],
                   help="choose: score the env's candidate actions; generate: free text (pretrained models)")
    p.add_argument("--group-size", type=int, default=d.group_size, help="trajectories per task (G)")
    p.add_argument("--tasks-per-iter", type=int, default=d.tasks_per_iter, help="groups per RL iteration")
    p.add_argument("--iterations", type=int, default=d.iterations, help="RL iterations")
    p.add_argument("--estimator", default=d.estimator, choices=["rollout", "likelihood"],
                   help="Mosaic: how marginal contributions are estimated")
    p.add_argument("--continuations", type=int, default=d.continuations, help="Mosaic rollout estimator: M")
    p.add_argument("--lambda-use", type=float, default=d.pg.lambda_use, help="Mosaic: session-usage weight")
    p.add_argument("--beta", type=float, default=d.pg.beta, help="Mosaic: marginal-contribution weight")
    p.add_argument("--dr-grpo", action="store_true", help="no division by the group's reward std (Dr. GRPO)")
    p.add_argument("--lr", type=float, default=d.pg.lr, help="RL learning rate")
    p.add_argument("--kl-coef", type=float, default=d.pg.kl_coef, help="KL to the initial model (0: off)")
    p.add_argument("--micro-batch-tokens", type=int, default=d.pg.micro_batch_tokens,
                   help="padded tokens per forward/backward (gradient accumulation: lower it to fit memory)")
    p.add_argument("--bc-episodes", type=int, default=d.bc_episodes, help="oracle demonstrations (0: no warm start)")
    p.add_argument("--bc-epochs", type=int, default=d.bc_epochs, help="warm-start passes over the demonstrations")
    p.add_argument("--bc-compact-at", type=float, default=d.bc_compact_at,
                   help="the demonstrating oracle compacts past this fraction of the window (default: only when "
                        "the env asks)")
    p.add_argument("--eval-episodes", type=int, default=d.eval_episodes, help="held-out runs per test task")
    p.add_argument("--num-envs", type=int, default=d.num_envs, help="envs stepped side by side")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="training dtype")
    p.add_argument("--seed", type=int, default=d.seed, help="seeds everything")
    p.add_argument("--out", default=None, help="run folder (default: runs/<algo>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.set_defaults(run=run)


def config_from_args(args: argparse.Namespace):
    from ..config import PGConfig
    from ..config import TrainConfig

    env_kwargs = {"site_size": args.site_size, "site_seed": args.site_seed, "hops": parse_hops(args.hops),
                  "max_steps": args.max_steps, "candidates": args.mode == "choose"}
    if args.session_max_tokens is not None:
        env_kwargs["session_max_tokens"] = args.session_max_tokens
    try:
        env_kwargs.update(json.loads(args.env_kwargs))
    except json.JSONDecodeError as err:
        raise SystemExit(f"--env-kwargs is not valid JSON ({err}); example: '{{\"show_budget\": false}}'")
    pg = PGConfig(lr=args.lr, kl_coef=args.kl_coef, lambda_use=args.lambda_use, beta=args.beta,
                  normalize_std=not args.dr_grpo, device=args.device, dtype=args.dtype,
                  micro_batch_tokens=args.micro_batch_tokens)
    return TrainConfig(
        algo=args.algo, env_id=args.env, env_kwargs=env_kwargs, model=args.model, mode=args.mode,
        bc_episodes=args.bc_episodes, bc_epochs=args.bc_epochs, bc_compact_at=args.bc_compact_at,
        iterations=args.iterations,
        tasks_per_iter=args.tasks_per_iter, group_size=args.group_size, budgets=args.budgets,
        estimator=args.estimator, continuations=args.continuations, eval_episodes=args.eval_episodes,
        num_envs=args.num_envs, seed=args.seed, out=args.out or f"runs/{args.algo}", resume=args.resume, pg=pg,
    )


def run(args: argparse.Namespace) -> int:
    from ..train import train

    train(config_from_args(args))
    return 0
