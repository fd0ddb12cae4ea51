"""``mosaic rollout``: run one agent for a few episodes and print what happened, step by step."""

from __future__ import annotations

import argparse
import json
import sys

from envs.pool import PoolEnv

from .common import HelpFormatter, add_agent_args, add_env_args, add_scale_args, build_agent, make_env, make_pool


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "rollout",
        help="run an agent (oracle, random, LLM) for a few episodes and print each step",
        description="Run an agent in an env and print every step: the session, the action, what came back.",
        formatter_class=HelpFormatter,
    )
    add_env_args(p)
    p.add_argument("--agent", default="oracle",
                   help="oracle | random | a model (tiny-1m, smollm2, a folder) | a server URL (with --model)")
    add_agent_args(p)
    p.add_argument("--episodes", type=int, default=1, help="how many episodes")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode (then seed+1, ...)")
    p.add_argument("--full", action="store_true", help="print whole observations, not their last lines")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="also log every trajectory to DIR/rollout.traj.jsonl.gz (see it with mosaic view DIR)")
    add_scale_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        env = make_env(args, **({"candidates": True} if args.mode == "choose" else {}))
    except (TypeError, ValueError) as err:  # a bad env kwarg or value, explained by the env
        print(f"mosaic rollout: {err}", file=sys.stderr)
        return 2
    try:
        agent = build_agent(args, env)
    except (ValueError, RuntimeError) as err:  # an agent name that names nothing, a model that cannot load, a server
        # that does not answer or serves another model
        env.close()
        print(f"mosaic rollout: {err}", file=sys.stderr)
        return 2
    from agents.server import ServerError
    from algos import logs
    from envs.pool import PoolError

    log = logs.TrajectoryLog(f"{args.out}/rollout{logs.SUFFIX}") if args.out else None
    stepper = PoolEnv(make_pool(args, 1, **({"candidates": True} if args.mode == "choose" else {}))) if args.ray else env  # with --ray the env steps on a Ray worker
    try:
        wins = _episodes(args, agent, stepper, log)
    except (ServerError, PoolError) as err:  # an inference server that stopped answering or answered nonsense; Ray
        # env workers that kept dying or hanging past their replacements
        print(f"mosaic rollout: {err}", file=sys.stderr)
        return 2
    finally:
        env.close()
        if log is not None:
            log.close()
        if stepper is not env:
            stepper.close()
    print(f"\nsolved {wins} of {args.episodes}")
    if log is not None:
        print(f"logged {log.count} trajectories to {log.path} (mosaic view {args.out})")
    return 0


def _episodes(args: argparse.Namespace, agent, stepper, log) -> int:
    """Run and print ``args.episodes`` episodes; how many were solved."""
    from algos import logs

    wins = 0
    for episode in range(args.episodes):
        obs, info = stepper.reset(seed=args.seed + episode)
        agent.reset()
        question, steps = info["session_task"], []
        print(f"=== episode {episode}: task {info['task_id']} (budget {info['max_steps']} steps)")
        print(info["messages"][1]["content"])
        done = False
        while not done:
            action = agent.act(obs, info)
            acting = info["session_id"]
            obs, reward, terminated, truncated, info = stepper.step(action)
            done = terminated or truncated
            steps.append(logs.step_record(action, info))
            shown = info["messages"][-1]["content"] if info["messages"] else ""
            if not args.full:
                shown = "\n".join(shown.splitlines()[:6])
            print(f"\n--- step {info['steps_used']} | session {acting} -> {info['session_id']} "
                  f"({info['session_kind']}, depth {info['depth']}, {info['context_tokens']} tokens)")
            print(f">>> {action}")
            print(shown)
        trajectory = info["trajectory"]
        wins += int(trajectory["success"])
        reason = info.get("truncation_reason") or info.get("termination_reason") or "answered"
        print(f"\n=== {'SOLVED' if trajectory['success'] else 'not solved'} ({reason}): answer "
              f"{trajectory['answer']!r}, gold {trajectory['gold_answer']!r}, {trajectory['steps_used']} steps, "
              f"{len(trajectory['sessions'])} sessions")
        print(json.dumps([{k: s[k] for k in ("id", "parent", "kind", "steps")} for s in trajectory["sessions"]]))
        if log is not None:
            log.write(logs.trajectory_record(trajectory, steps, question=question, reward=reward, source="rollout",
                                             meta={"episode": episode, "seed": args.seed + episode,
                                                   "agent": args.agent}))
    return wins
