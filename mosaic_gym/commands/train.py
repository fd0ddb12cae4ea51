"""``mosaic train``: warm start, then broadcast or Mosaic policy gradient; held-out success before and after.

``--resume`` continues the run in ``--out`` with the settings in its ``config.json``, not the command line's
defaults: a flag given explicitly must agree with them (``--iterations`` may change, see
:data:`algos.learn.config.RESUMABLE`); one that contradicts them is an error naming the flag and both values.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from .common import HelpFormatter, at_least, budgets, device, fraction, hops, parse_hops, quiet_progress

# The settings (dotted TrainConfig fields) each flag sets: what --resume checks a flag given explicitly against.
SETS = {
    "algo": ("algo",), "env": ("env_id",), "site": ("env_kwargs.site",), "site_size": ("env_kwargs.site_size",),
    "site_seed": ("env_kwargs.site_seed",), "hops": ("env_kwargs.hops",), "max_steps": ("env_kwargs.max_steps",),
    "session_max_tokens": ("env_kwargs.session_max_tokens",), "budgets": ("budgets",), "model": ("model",),
    "mode": ("mode", "env_kwargs.candidates"), "group_size": ("group_size",), "tasks_per_iter": ("tasks_per_iter",),
    "iterations": ("iterations",), "estimator": ("estimator",), "continuations": ("continuations",),
    "root_start": ("root_start",),
    "lambda_use": ("pg.lambda_use",), "beta": ("pg.beta",), "dr_grpo": ("pg.normalize_std",), "lr": ("pg.lr",),
    "kl_coef": ("pg.kl_coef",), "micro_batch_tokens": ("pg.micro_batch_tokens",), "bc_episodes": ("bc_episodes",),
    "bc_epochs": ("bc_epochs",), "bc_compact_at": ("bc_compact_at",), "eval_episodes": ("eval_episodes",),
    "eval_tasks": ("eval_tasks",),
    "num_envs": ("num_envs",), "device": ("pg.device",), "dtype": ("pg.dtype",), "seed": ("seed",),
    "temperature": ("temperature",), "length_normalize": ("length_normalize",),
    "max_new_tokens": ("max_new_tokens",),
    "prompt_examples": ("prompt_examples",), "lora_rank": ("lora_rank",),
    "log_groups": ("log_groups",), "bc_lr": ("bc_lr",), "eval_initial": ("eval_initial",),
    "eval_temperature": ("eval_temperature",), "eval_greedy": ("eval_greedy",), "epochs": ("pg.epochs",),
    "minibatches": ("pg.minibatches",), "clip_eps": ("pg.clip_eps",), "target_kl": ("pg.target_kl",),
    "entropy_coef": ("pg.entropy_coef",), "max_grad_norm": ("pg.max_grad_norm",),
    "dynamic_sampling": ("dynamic_sampling",), "dynamic_max_draws": ("dynamic_max_draws",), "probe": ("probe",),
    "probe_states": ("probe_states",), "summary_choices": ("env_kwargs.summary_choices",),
    "bc_max_steps": ("bc_max_steps",),
}  # (a --no-X flag sets X's dest, so it is checked as X)  # and --env-kwargs: each key of its JSON, env_kwargs.KEY


class _Given(argparse.Action):
    """Stores the flag's value and notes that it was given, so that ``--resume`` can tell it from a default.

    A flag without a value (``nargs=0``) stores its ``const``.
    """

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        namespace.given = (*getattr(namespace, "given", ()), self.dest)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from algos.credit.advantages import ALGORITHMS
    from algos.learn.config import TrainConfig

    d = TrainConfig()
    p = subparsers.add_parser(
        "train",
        help="train an LLM policy (warm start + RL with broadcast or Mosaic credit)",
        description=(
            "Train an LLM policy across sessions. With no arguments: the embedded CPU demo, a tiny model on easy "
            "builtin tasks (one-hop questions, candidate actions) in a 600-token window, so each episode takes two "
            "sessions (read, compact, answer from the summary); at the compaction the policy chooses the complete "
            "summary or a lossy one, and at 5 steps only the complete one leaves the steps to answer. Oracle warm "
            "start (taking either summary), then 10 iterations of PPO with Mosaic credit; it prints held-out "
            "success before and after RL (sampled and greedy) and the probe P(complete summary)."
        ),
        formatter_class=HelpFormatter,
    )
    p.register("action", None, _Given)  # the default action: every flag below notes that it was given
    p.add_argument("--algo", default=d.algo, choices=ALGORITHMS, help="credit assignment")
    p.add_argument("--env", default=d.env_id, help="environment id (mosaic/WebQA-v0, -Compact-, -Fork-, -Single-)")
    p.add_argument("--site", default="builtin",
                   help="'builtin', or a corpus: a folder of .html files, a folder with documents.jsonl, or a "
                        ".jsonl documents file (see README)")
    p.add_argument("--site-size", type=int, default=d.env_kwargs["site_size"], help="entities of the builtin site")
    p.add_argument("--site-seed", type=int, default=0, help="which builtin site")
    p.add_argument("--hops", type=hops, default=str(d.env_kwargs["hops"]), help="task difficulty: N or LO-HI")
    p.add_argument("--max-steps", type=int, default=d.env_kwargs["max_steps"], help="fixed step budget T")
    p.add_argument("--session-max-tokens", type=int, default=d.env_kwargs.get("session_max_tokens"),
                   help="context window of a session: past it the env asks the agent to compact")
    p.add_argument("--budgets", type=budgets, default=None,
                   help="BudgetMix: '8' fixed, '4,8,16' uniform set, 'log:4-32' log-uniform, 'schedule:0=4,20=8'")
    p.add_argument("--env-kwargs", default="{}", help="more env kwargs as JSON")
    p.add_argument("--model", default=d.model,
                   help="tiny-100k | tiny-1m | tiny-3m | tiny-10m | smollm2 | a folder | a hub id")
    p.add_argument("--mode", default=d.mode, choices=["choose", "generate"],
                   help="choose: score the env's candidate actions; generate: free text (pretrained models)")
    p.add_argument("--rl-temperature", "--temperature", dest="temperature", type=_temperature, default=d.temperature,
                   help="sampling temperature of the RL rollouts (choose mode: softmax(score / T); 0: greedy)")
    p.add_argument("--eval-temperature", type=_temperature, default=d.eval_temperature,
                   help="sampling temperature of held-out evaluation (default: the RL temperature)")
    p.add_argument("--eval-greedy", nargs=0, const=True, default=d.eval_greedy,
                   help="also evaluate greedily (temperature 0, one run per test task)")
    p.add_argument("--no-eval-greedy", dest="eval_greedy", nargs=0, const=False, help="evaluate sampled runs only")
    p.add_argument("--length-normalize", nargs=0, const=True, default=d.length_normalize,
                   help="choose mode: score a candidate by its mean token log-prob, not the sum")
    p.add_argument("--no-length-normalize", dest="length_normalize", nargs=0, const=False,
                   help="choose mode: score a candidate by its summed token log-prob")
    p.add_argument("--max-new-tokens", type=at_least(1, "give --max-new-tokens 1 or more"), default=d.max_new_tokens,
                   help="generate mode: a step's tokens stop at its first complete call, or here")
    p.add_argument("--prompt-examples", nargs=0, const=True, default=d.prompt_examples,
                   help="show the model a worked exchange before each session (pretrained instruct models)")
    p.add_argument("--lora-rank", type=at_least(0, "give --lora-rank 0 (train every weight) or more"),
                   default=d.lora_rank,
                   help="train LoRA adapters of this rank (needs peft) instead of every weight (0: full)")
    p.add_argument("--group-size", type=int, default=d.group_size, help="trajectories per task (G)")
    p.add_argument("--tasks-per-iter", type=int, default=d.tasks_per_iter, help="groups per RL iteration")
    p.add_argument("--iterations", type=int, default=d.iterations, help="RL iterations")
    p.add_argument("--estimator", default=d.estimator, choices=["rollout", "likelihood"],
                   help="Mosaic: how marginal contributions are estimated")
    p.add_argument("--continuations", type=_continuations, default=d.continuations,
                   help="Mosaic rollout estimator: M")
    p.add_argument("--root-start", default=d.root_start, choices=["rollout", "group_rollout"],
                   help="Mosaic rollout estimator: V(reset) from M continuations per trajectory, or M per group "
                        "(shared; 1/G of the root's continuations)")
    p.add_argument("--lambda-use", type=float, default=d.pg.lambda_use, help="Mosaic: session-usage weight")
    p.add_argument("--beta", type=float, default=d.pg.beta, help="Mosaic: marginal-contribution weight")
    p.add_argument("--dr-grpo", nargs=0, const=True, default=False,
                   help="no division by the group's reward std (Dr. GRPO)")
    p.add_argument("--lr", type=float, default=d.pg.lr, help="RL learning rate")
    p.add_argument("--kl-coef", type=float, default=d.pg.kl_coef, help="KL to the initial model (0: off)")
    p.add_argument("--epochs", type=at_least(1, "give --epochs 1 or more"), default=d.pg.epochs,
                   help="PPO passes over each iteration's batch")
    p.add_argument("--minibatches", type=at_least(1, "give --minibatches 1 or more"), default=d.pg.minibatches,
                   help="optimizer steps per epoch (the batch split in this many parts)")
    p.add_argument("--clip-eps", type=_positive, default=d.pg.clip_eps, help="PPO clip range of the ratio")
    p.add_argument("--target-kl", type=_positive, default=d.pg.target_kl,
                   help="stop an update's steps once the KL after a step passes 1.5x this (default: no stop)")
    p.add_argument("--entropy-coef", type=_non_negative, default=d.pg.entropy_coef,
                   help="weight of the entropy bonus (per choice, or per token in generate mode)")
    p.add_argument("--max-grad-norm", type=_positive, default=d.pg.max_grad_norm, help="gradient clipping norm")
    p.add_argument("--dynamic-sampling", type=at_least(0, "give --dynamic-sampling 0 (off) or more"),
                   default=d.dynamic_sampling, metavar="N",
                   help="draw groups until N have unequal rewards and train on those (DAPO-style; 0: off)")
    p.add_argument("--dynamic-max-draws", type=at_least(1, "give --dynamic-max-draws 1 or more"),
                   default=d.dynamic_max_draws, help="dynamic sampling: most rounds of --tasks-per-iter groups")
    p.add_argument("--probe", default=d.probe, choices=["auto", "summary", "none"],
                   help="log P(right session decision) at fixed states after every iteration (summary: the "
                        "complete summary at a forced compaction, which needs --summary-choices; auto: that one "
                        "wherever the env offers summaries to choose from)")
    p.add_argument("--probe-states", type=at_least(1, "give --probe-states 1 or more"), default=d.probe_states,
                   help="fixed states the probe measures")
    p.add_argument("--summary-choices", nargs=0, const=True, default=d.env_kwargs.get("summary_choices", False),
                   help="every compaction offers the complete and a lossy summary (env kwarg summary_choices)")
    p.add_argument("--no-summary-choices", dest="summary_choices", nargs=0, const=False,
                   help="one summary per compaction, the env's (the compaction demo before summary choices)")
    p.add_argument("--micro-batch-tokens", type=int, default=d.pg.micro_batch_tokens,
                   help="padded tokens per forward/backward (gradient accumulation: lower it to fit memory)")
    p.add_argument("--bc-episodes", type=int, default=d.bc_episodes, help="oracle demonstrations (0: no warm start)")
    p.add_argument("--bc-epochs", type=int, default=d.bc_epochs, help="warm-start passes over the demonstrations")
    p.add_argument("--bc-lr", type=float, default=d.bc_lr, help="warm-start learning rate")
    p.add_argument("--eval-initial", nargs=0, const=True, default=d.eval_initial,
                   help="also measure held-out success (and parse rate) before the warm start")
    p.add_argument("--bc-max-steps", type=at_least(1, "give --bc-max-steps 1 or more"), default=d.bc_max_steps,
                   help="step budget of the demonstrations (default: the env's)")
    p.add_argument("--bc-compact-at", type=fraction, default=d.bc_compact_at,
                   help="the demonstrating oracle compacts past this fraction of the window (default: only when "
                        "the env asks)")
    p.add_argument("--eval-episodes", type=int, default=d.eval_episodes, help="held-out runs per test task")
    p.add_argument("--eval-tasks", type=at_least(1, "give how many test tasks to evaluate on"), default=d.eval_tasks,
                   help="evaluate on the first N test tasks only, for quick checks (default: every test task)")
    p.add_argument("--num-envs", type=int, default=d.num_envs, help="envs stepped side by side")
    p.add_argument("--device", type=device, default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="training dtype")
    p.add_argument("--seed", type=int, default=d.seed, help="seeds everything")
    p.add_argument("--out", default=None, help="run folder (default: runs/<algo>)")
    p.add_argument("--log-groups", type=_log_groups, default=d.log_groups,
                   help="groups per iteration whose trajectories go to OUT/trajectories/ (mosaic view OUT; 0: none)")
    p.add_argument("--tensorboard", nargs=0, const=True, default=False,
                   help="also write the metrics as TensorBoard events in OUT/tensorboard (pip install "
                        "'mosaic-gym[tensorboard]')")
    p.add_argument("--wandb", nargs="?", const="mosaic-gym", default=None, metavar="PROJECT",
                   help="also log the metrics to this W&B project, when wandb is installed (default project: "
                        "mosaic-gym)")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="step the envs on Ray workers: alone, a local cluster (ray.init()); with an ADDRESS (auto, "
                        "HOST:6379, ray://HOST:10001), that cluster's (the same results as in-process envs)")
    p.add_argument("--warm-start-from", default=None, metavar="RUN",
                   help="start RL from the warm start of RUN, a finished run with --iterations 0 and the same "
                        "settings but --algo, --estimator, --continuations, --root-start, --budgets, --iterations, "
                        "--tasks-per-iter, --group-size, --lambda-use, --beta, --log-groups (the same result as "
                        "computing it again: arms of a comparison share one warm start)")
    p.add_argument("--resume", nargs=0, const=True, default=False,
                   help="continue the run in --out from its checkpoint, with the settings in its config.json "
                        "(flags given must agree with them; --iterations may change)")
    p.add_argument("--no-progress", nargs=0, const=True, default=False, help="hide progress bars")
    p.set_defaults(run=run, given=())


_continuations = at_least(1, "the rollout estimator needs at least 1 continuation per session boundary; give "
                              "--continuations 1 or more (default 2)")
_log_groups = at_least(0, "give how many groups per iteration to log, 0 (none) or more")


def _number(least: float, strict: bool, hint: str):
    """An argparse type: a finite float above ``least`` (``strict``) or at least it; else the ``hint``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number: {hint}") from None
        if not (value > least if strict else value >= least) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text}: {hint}")
        return value
    return parse


_positive = _number(0.0, True, "give a finite number > 0")
_non_negative = _number(0.0, False, "give a finite number >= 0")
_temperature = _number(0.0, False, "give a temperature >= 0 (0: greedy)")


def config_from_args(args: argparse.Namespace):
    from algos.learn.config import PGConfig
    from algos.learn.config import TrainConfig

    env_kwargs = {"site_size": args.site_size, "site_seed": args.site_seed, "hops": parse_hops(args.hops),
                  "max_steps": args.max_steps, "candidates": args.mode == "choose"}
    if args.site != "builtin":
        # Absolute: a resumed run, started from another folder, still finds its corpus.
        env_kwargs["site"] = os.path.abspath(args.site) if args.site.strip() else args.site
    if args.session_max_tokens is not None:
        env_kwargs["session_max_tokens"] = args.session_max_tokens
    if args.summary_choices:
        env_kwargs["summary_choices"] = True
    try:
        env_kwargs.update(json.loads(args.env_kwargs))
    except json.JSONDecodeError as err:
        raise SystemExit(f"--env-kwargs is not valid JSON ({err}); example: '{{\"show_budget\": false}}'")
    pg = PGConfig(lr=args.lr, kl_coef=args.kl_coef, lambda_use=args.lambda_use, beta=args.beta,
                  normalize_std=not args.dr_grpo, device=args.device, dtype=args.dtype,
                  micro_batch_tokens=args.micro_batch_tokens, epochs=args.epochs, minibatches=args.minibatches,
                  clip_eps=args.clip_eps, target_kl=args.target_kl, entropy_coef=args.entropy_coef,
                  max_grad_norm=args.max_grad_norm)
    return TrainConfig(
        algo=args.algo, env_id=args.env, env_kwargs=env_kwargs, model=args.model, mode=args.mode,
        bc_episodes=args.bc_episodes, bc_epochs=args.bc_epochs, bc_compact_at=args.bc_compact_at, bc_lr=args.bc_lr,
        eval_initial=args.eval_initial,
        iterations=args.iterations,
        tasks_per_iter=args.tasks_per_iter, group_size=args.group_size, budgets=args.budgets,
        estimator=args.estimator, continuations=args.continuations, root_start=args.root_start,
        eval_episodes=args.eval_episodes,
        eval_tasks=args.eval_tasks, num_envs=args.num_envs, seed=args.seed, out=args.out or f"runs/{args.algo}",
        resume=args.resume, pg=pg,
        temperature=args.temperature, length_normalize=args.length_normalize, max_new_tokens=args.max_new_tokens,
        eval_temperature=args.eval_temperature, eval_greedy=args.eval_greedy, bc_max_steps=args.bc_max_steps,
        dynamic_sampling=args.dynamic_sampling, dynamic_max_draws=args.dynamic_max_draws, probe=None if args.probe == "none" else args.probe,
        probe_states=args.probe_states,
        prompt_examples=args.prompt_examples,
        lora_rank=args.lora_rank,
        log_groups=args.log_groups,
        ray=args.ray, warm_start_from=args.warm_start_from,
    )


def resume_config(args: argparse.Namespace):
    """The config of the run in ``--out`` (its ``config.json``), with the flags given that a resume may change.

    Raises :class:`algos.learn.config.ConfigError` for a flag given explicitly that contradicts the run's settings.
    """
    import dataclasses

    from algos.learn.config import RESUMABLE, ConfigError, read_config, setting

    wanted = config_from_args(args)
    path = Path(wanted.out) / "config.json"
    saved = read_config(path)
    for dest in args.given:
        for name in _settings_of(dest, args):
            if name in RESUMABLE:
                continue
            if setting(wanted, name) != setting(saved, name):
                raise ConfigError(f"{_flag(dest, args)} contradicts the run's {name} = {setting(saved, name)!r} in "
                                  f"{path} (a resumed run keeps its settings; only --{', --'.join(RESUMABLE)} may "
                                  f"change)")
    changes = {name: getattr(wanted, name) for name in RESUMABLE if name in args.given}
    return dataclasses.replace(saved, **changes, resume=True, ray=wanted.ray, warm_start_from=wanted.warm_start_from)


def _settings_of(dest: str, args: argparse.Namespace) -> tuple[str, ...]:
    if dest == "env_kwargs":
        return tuple(f"env_kwargs.{k}" for k in json.loads(args.env_kwargs))
    return SETS.get(dest, ())


def _flag(dest: str, args: argparse.Namespace) -> str:
    """The flag as given: ``--lr 0.01``, ``--hops '1-3'``, ``--dr-grpo``."""
    value = getattr(args, dest)
    shown = "" if isinstance(value, bool) else f" {value!r}" if isinstance(value, str) else f" {value}"
    return f"--{dest.replace('_', '-')}{shown}"


def run(args: argparse.Namespace) -> int:
    from algos.learn.checkpoint import CheckpointError
    from algos.learn.config import ConfigError
    from algos.learn.train import train
    from envs.pool import PoolError

    try:
        config = resume_config(args) if args.resume else config_from_args(args)
    except (CheckpointError, ConfigError, TypeError, ValueError) as err:  # (TypeError, ValueError: settings that
        # contradict each other, as TrainConfig explains them in one line)
        raise SystemExit(f"mosaic train: {err}") from None
    out = Path(config.out)
    existed = out.exists()
    from algos.learn.config import config_to_json
    from algos.learn.reporting import ReporterWarning, make_reporters

    reporters = []
    try:
        check_setup(config)
        with warnings.catch_warnings(record=True) as skipped:  # asked for, not installed: said in one line each
            warnings.simplefilter("always", ReporterWarning)
            reporters = make_reporters(out, tensorboard=args.tensorboard, wandb_project=args.wandb,
                                       config=config_to_json(config))
        for warning in skipped:
            print(f"mosaic train: {warning.message}", file=sys.stderr)
        with quiet_progress(args.no_progress):
            train(config, reporters=reporters)
    except (CheckpointError, ConfigError, PoolError) as err:  # PoolError: Ray env workers that kept dying or hanging
        raise SystemExit(f"mosaic train: {err}") from None
    except SetupError as err:
        if not existed:
            _remove_if_empty(out)
        raise SystemExit(f"mosaic train: {err}") from None
    finally:
        for reporter in reporters:
            reporter.close()
    return 0


class SetupError(ValueError):
    """A setting that cannot run: a bad env kwarg or value, a model spec that names no model."""


def check_setup(config) -> None:
    """Build the env and check the model spec before anything is written, so that a typo is one line and
    leaves no run folder behind (the site built here is cached: training reuses it)."""
    import gymnasium as gym

    from agents.models import check_model_spec

    try:
        gym.make(config.env_id, **{**config.env_kwargs, "split": "train"}).close()
        check_model_spec(config.model)
    except (TypeError, ValueError) as err:  # the env's and the model loader's own one-line explanations
        raise SetupError(str(err)) from None


def _remove_if_empty(out: Path) -> None:
    """Remove a run folder this run created if it holds nothing but what the start wrote (its config)."""
    if out.is_dir() and {p.name for p in out.iterdir()} <= {"config.json"}:
        for file in out.iterdir():
            file.unlink()
        out.rmdir()
