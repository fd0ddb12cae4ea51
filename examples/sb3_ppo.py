"""Train sb3-contrib's MaskablePPO on an easy WebQA setting, then compare it with a uniform random masked policy.

Both policies choose among the env's candidate actions through :class:`envs.sb3.CandidateActions`. Each is
evaluated on the first ``--eval-tasks`` tasks of the train and of the test split (the test tasks ask about
entities training never asks about), with ``--samples`` episodes per task at the largest budget T.
Pass@(1,T) for every T comes from the same episodes: an episode counts at T when it answered correctly within
T steps (the *truncate* protocol of :func:`algos.evaluate.pass_at_kt_table`).

Usage:
    python examples/sb3_ppo.py                      # a few minutes on 2 CPU cores
    python examples/sb3_ppo.py --quick --out /tmp/q # seconds: a smoke test
    python examples/sb3_ppo.py --timesteps 100000 --site-size 2000 --out runs/sb3

Writes ``OUT/results.json`` (arguments, Pass@(1,T) per policy and split, training time) and ``OUT/model.zip``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from sb3_contrib import MaskablePPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import set_random_seed
from tqdm import tqdm

from mosaic_gym.commands.common import int_list
from algos.evaluate import pass_at_kt_table
from envs import view
from envs.sb3 import CandidateActions, make_sb3_env

Policy = Callable[[np.ndarray, np.ndarray], int]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train MaskablePPO on mosaic/WebQA-v0 through envs.sb3.CandidateActions and compare its "
        "Pass@(1,T) with a uniform random masked policy.")
    parser.add_argument("--timesteps", type=int, default=30_000, help="training env steps (default: 30000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of training, envs and evaluation (default: 0)")
    parser.add_argument("--out", type=Path, default=Path("runs/sb3_ppo"), help="output folder (default: runs/sb3_ppo)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test in seconds: site size 150, 256 timesteps, 3 tasks x 2 samples per split")
    parser.add_argument("--env-id", default="mosaic/WebQA-v0", help="registered env id (default: mosaic/WebQA-v0)")
    parser.add_argument("--site-size", type=int, default=600, help="builtin site size (default: 600)")
    parser.add_argument("--hops", type=int, default=1, help="task difficulty (default: 1)")
    parser.add_argument("--ts", type=int_list, default="3,4,6,8,12", metavar="T,T,...",
                        help="budgets T to report; training and evaluation run at the largest (default: 3,4,6,8,12)")
    parser.add_argument("--eval-tasks", type=int, default=20, help="tasks evaluated per split (default: 20)")
    parser.add_argument("--samples", type=int, default=8, help="evaluation episodes per task and policy (default: 8)")
    parser.add_argument("--n-envs", type=int, default=4, help="training envs in the DummyVecEnv (default: 4)")
    parser.add_argument("--max-candidates", type=int, default=16, help="discrete actions N (default: 16)")
    args = parser.parse_args(argv)
    if args.quick:
        args.site_size, args.timesteps, args.eval_tasks, args.samples, args.n_envs = 150, 256, 3, 2, 2
    if min(args.ts) < 1 or min(args.timesteps, args.eval_tasks, args.samples, args.n_envs) < 1:
        parser.error("--ts, --timesteps, --eval-tasks, --samples and --n-envs must be positive")
    return args


def env_kwargs(args: argparse.Namespace, split: str) -> dict[str, Any]:
    return {"env_id": args.env_id, "site_size": args.site_size, "hops": args.hops, "split": split,
            "max_steps": max(args.ts), "max_candidates": args.max_candidates}


def train(args: argparse.Namespace) -> MaskablePPO:
    vec = make_vec_env(make_sb3_env, n_envs=args.n_envs, seed=args.seed, env_kwargs=env_kwargs(args, "train"))
    # One update every 512 env steps (fewer in --quick): small batches suit a sparse 0/1 reward.
    n_steps = max(16, min(128, args.timesteps // args.n_envs))
    model = MaskablePPO("MlpPolicy", vec, n_steps=n_steps, batch_size=min(128, n_steps * args.n_envs),
                        n_epochs=4, gamma=0.99, ent_coef=0.01, policy_kwargs={"net_arch": [64, 64]},
                        seed=args.seed, device="cpu", verbose=0)
    model.learn(total_timesteps=args.timesteps, progress_bar=sys.stderr.isatty())
    vec.close()
    return model


def correct_steps(env: CandidateActions, policy: Policy, num_tasks: int, samples: int, seed: int,
                  desc: str) -> list[list[int | None]]:
    """For each of the env's first ``num_tasks`` tasks, ``samples`` episodes: the steps used when it answered
    correctly, or None."""
    out = []
    tasks = view(env).tasks[:num_tasks]
    with tqdm(total=len(tasks) * samples, desc=desc, disable=None) as bar:
        for task_index, task in enumerate(tasks):
            runs: list[int | None] = []
            for sample in range(samples):
                obs, info = env.reset(seed=seed + task_index * samples + sample, options={"task_id": task.id})
                while True:
                    obs, reward, terminated, truncated, info = env.step(policy(obs, env.action_masks()))
                    if terminated or truncated:
                        break
                runs.append(info["steps_used"] if reward > 0 else None)
                bar.update()
            out.append(runs)
    return out


def random_policy(seed: int) -> Policy:
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        valid = np.flatnonzero(mask)
        # With no candidate every index is an error step; index 0 is as good as any.
        return int(rng.choice(valid)) if valid.size else 0

    return act


def ppo_policy(model: MaskablePPO) -> Policy:
    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        action, _ = model.predict(obs, action_masks=mask, deterministic=False)
        return int(action)

    return act


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    set_random_seed(args.seed)
    start = time.perf_counter()
    model = train(args)
    train_seconds = time.perf_counter() - start
    model.save(args.out / "model.zip")

    ks, ts = [1], sorted(set(args.ts))
    tables: dict[str, dict[str, list[float]]] = {}
    for split in ("train", "test"):
        env = make_sb3_env(**env_kwargs(args, split))
        for name, policy in (("maskable_ppo", ppo_policy(model)), ("random", random_policy(args.seed))):
            set_random_seed(args.seed)
            steps = correct_steps(env, policy, args.eval_tasks, args.samples, args.seed, f"{name} on {split}")
            tables.setdefault(name, {})[split] = pass_at_kt_table(steps, ks, ts)[0].tolist()
            tables[name][f"{split}_tasks"] = len(steps)
        env.close()

    for split in ("train", "test"):
        print(f"\nPass@(1,T) on {tables['random'][f'{split}_tasks']} {split} tasks (hops={args.hops}, "
              f"site_size={args.site_size}, {args.samples} samples per task, {args.timesteps} training steps)")
        print("| policy \\ T | " + " | ".join(map(str, ts)) + " |\n|---|" + "---|" * len(ts))
        for name, table in tables.items():
            print(f"| {name} | " + " | ".join(f"{value:.3f}" for value in table[split]) + " |")
    results = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               "ks": ks, "ts": ts, "pass_at_1": tables, "train_seconds": round(train_seconds, 1)}
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nwrote {args.out / 'results.json'} and {args.out / 'model.zip'}")
    return results


if __name__ == "__main__":
    main()
