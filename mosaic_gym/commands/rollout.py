"""``mosaic rollout``: run one agent for a few episodes and print what happened, step by step."""

from __future__ import annotations

import argparse
import json
import sys

from envs.pool import PoolEnv

from .common import (Given, HelpFormatter, add_agent_args, add_config_flag, add_env_args, add_flags, add_scale_args,
                     apply_config, at_least, build_agent, make_env, make_pool, wants_candidates)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "rollout",
        help="run an agent (oracle, random, LLM) for a few episodes and print each step",
        description="Run an agent in an env and print every step: the session, the action, what came back.",
        formatter_class=HelpFormatter,
    )
    add_config_flag(p)
    add_env_args(p)
    g = p.add_argument_group("agent")
    add_agent_args(g)
    add_flags(g, ("seed",), {"seed": "(the first episode's; then seed+1, ...)"})
    r = p.add_argument_group("the rollout")
    r.add_argument("--episodes", type=at_least(1, "give --episodes 1 or more"), default=1, action=Given,
                   help="how many episodes")
    r.add_argument("--full", nargs=0, const=True, default=False, action=Given,
                   help="print whole observations, not their last lines")
    add_flags(r, ("out",), {"out": "(default: none): also log every trajectory to DIR/rollout.traj.jsonl.gz (see "
                                   "it with mosaic view DIR)"})
    add_scale_args(p)
    p.set_defaults(run=run, given=(), given_as={})


def run(args: argparse.Namespace) -> int:
    try:
        apply_config(args)
        candidates = {"candidates": True} if wants_candidates(args) else {}
        env = make_env(args, **candidates)
    except (TypeError, ValueError) as err:  # a bad env kwarg or value, explained by the env; a bad --config
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
    stepper = PoolEnv(make_pool(args, 1, **candidates)) if args.ray else env  # with --ray: on a Ray worker
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
