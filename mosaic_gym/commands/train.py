"""``mosaic train``: warm start, then broadcast or Mosaic policy gradient; held-out success before and after.

Every setting of :class:`algos.learn.config.TrainConfig` (and of its learner, :class:`~algos.learn.config.PGConfig`)
is a flag named after it (``bc_lr`` -> ``--bc-lr``, ``pg.lr`` -> ``--lr``), with the help and default of its
field; the env's kwargs are the env flags (``--site-size``, ``--hops``, ...) and ``--env-kwargs``. ``--config FILE``
reads settings from a TOML, YAML or JSON file (a run's ``config.json`` too) whose keys are the setting names;
flags given beside it win. The run writes its settings to ``OUT/config.json``.

``--resume`` continues the run in ``--out`` with the settings in its ``config.json``, not the command line's
defaults: a flag given explicitly (or a setting of ``--config``) must agree with them (``--iterations`` may change,
see :data:`algos.learn.config.RESUMABLE`); one that contradicts them is an error naming the flag and both values.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from .common import (ENV_FLAGS, Flag, Given, HelpFormatter, add_flags, at_least, budgets, fraction, help_of,
                     int_list, json_value, non_negative, optional, parse_hops, positive, quiet_progress,
                     read_env_kwargs, share, shared_flags, temperature)
from .settings_file import read_settings

# The shared flags that are settings of the run, and what they set (dotted TrainConfig names).
SHARED_SETTINGS = {
    "env": "env_id", "model": "model", "mode": "mode", "temperature": "temperature",
    "max_new_tokens": "max_new_tokens", "prompt_examples": "prompt_examples", "length_normalize": "length_normalize",
    "device": "pg.device", "seed": "seed", "eval_episodes": "eval_episodes", "eval_tasks": "eval_tasks",
    "num_envs": "num_envs", "ray": "ray", "out": "out",
    "site": "env_kwargs.site", "site_seed": "env_kwargs.site_seed", "site_size": "env_kwargs.site_size",
    "hops": "env_kwargs.hops", "max_steps": "env_kwargs.max_steps",
    "session_max_tokens": "env_kwargs.session_max_tokens", "summary_choices": "env_kwargs.summary_choices",
    "backend": "env_kwargs.backend",
}
# How the train-only settings' text is read, beyond what their type says (int, float, str, bool).
PARSERS = {
    "eval_temperature": optional(temperature), "lora_rank": at_least(0, "give --lora-rank 0 (train every weight) "
                                                                     "or more"),
    "bc_compact_at": optional(fraction), "bc_max_steps": optional(at_least(1, "give --bc-max-steps 1 or more")),
    "bc_styles": optional(json_value), "iterations": at_least(0, "give 0 or more RL iterations"),
    "log_groups": at_least(0, "give how many groups per iteration to log, 0 (none) or more"),
    "dynamic_sampling": at_least(0, "give --dynamic-sampling 0 (off) or more"),
    "dynamic_max_draws": at_least(1, "give --dynamic-max-draws 1 or more"),
    "probe_states": at_least(1, "give --probe-states 1 or more"), "budgets": optional(budgets),
    "continuations": at_least(1, "the rollout estimator needs at least 1 continuation per session boundary; give "
                                 "--continuations 1 or more (default 2)"),
    "eval_budgets": optional(int_list), "warm_start_from": optional(str),
    "pg.clip_eps": positive, "pg.target_kl": optional(positive), "pg.entropy_coef": non_negative,
    "pg.max_grad_norm": positive, "pg.weight_decay": non_negative, "pg.adv_clip": positive,
    "pg.epochs": at_least(1, "give --epochs 1 or more"), "pg.minibatches": at_least(1, "give --minibatches 1 or more"),
    "pg.measure_fraction": share,
}
CHOICES = {"algo": None, "probe": ("auto", "summary", "none"), "estimator": ("rollout", "likelihood"),
           "root_start": ("rollout", "group_rollout"), "pg.dtype": ("float32", "bfloat16")}
METAVARS = {"bc_styles": "JSON", "eval_budgets": "T,T,...", "warm_start_from": "RUN", "budgets": "SPEC"}
DERIVED = {"pg.advantage": "--algo", "env_kwargs": "--env-kwargs and the env flags",
           "env_kwargs.candidates": "--mode (choose: on)"}
"""Settings no flag of their own sets, and the flags that set them."""
NOT_FLAGS = ("resume",)  # a flag, but no setting: how the run starts


def train_flags() -> list[tuple[Flag, str]]:
    """Every flag of ``mosaic train`` that sets a setting, with the setting (dotted) it sets: one per field of
    TrainConfig and PGConfig (but :data:`DERIVED`), named after it, with its help and default."""
    from algos.credit.advantages import ALGORITHMS
    from algos.learn.config import PGConfig, TrainConfig

    shared = shared_flags()
    by_setting = {setting: key for key, setting in SHARED_SETTINGS.items()}
    d = TrainConfig()
    choices = {**CHOICES, "algo": ALGORITHMS}
    out: list[tuple[Flag, str]] = []
    fields = [(f, f.name, getattr(d, f.name)) for f in dataclasses.fields(TrainConfig)]
    fields += [(f, f"pg.{f.name}", getattr(d.pg, f.name)) for f in dataclasses.fields(PGConfig)]
    for field, setting, default in fields:
        if setting in by_setting:
            out.append((shared[by_setting[setting]], setting))
            continue
        if setting in DERIVED or setting in ("pg", *NOT_FLAGS):
            continue
        kind = str(field.type).split("|")[0].strip()
        switch = kind == "bool"
        parse = PARSERS.get(setting, None if switch or kind == "str" else {"int": int, "float": float}.get(kind))
        if setting == "probe" and default is None:
            default = "none"
        out.append((Flag("--" + setting.removeprefix("pg.").replace("_", "-"), field.metadata["help"], default,
                         type=parse, choices=choices.get(setting), switch=switch, metavar=METAVARS.get(setting),
                         ), setting))
    for key in ENV_FLAGS:
        if SHARED_SETTINGS.get(key, "").startswith("env_kwargs."):
            out.append((shared[key], SHARED_SETTINGS[key]))
    out.append((shared["env_kwargs"], "env_kwargs"))
    return out


def flag_settings() -> dict[str, str]:
    """A flag's dest -> the setting it sets: what ``--resume`` checks a flag given against, and what a misspelt
    key of a ``--config`` file may have meant."""
    return {flag.key: setting for flag, setting in train_flags()}


def cli_defaults() -> dict[str, Any]:
    """The settings of ``mosaic train`` with no arguments, as JSON data: TrainConfig's defaults, the env's
    site_seed 0 written out, and no ``out`` (the default folder is runs/ALGO)."""
    from algos.learn.config import TrainConfig, config_to_json

    data = config_to_json(TrainConfig())
    env = data["env_kwargs"]
    data["env_kwargs"] = {"site_size": env.pop("site_size", None), "site_seed": 0, **env}
    if data["env_kwargs"]["site_size"] is None:
        del data["env_kwargs"]["site_size"]
    return data


EXAMPLES = """examples:
  mosaic train --algo broadcast --iterations 20
  mosaic train --config arm.toml --seed 1      # arm.toml holds settings by name, e.g.
                                               #   algo = "broadcast"
                                               #   [pg]
                                               #   lr = 5e-4
  mosaic train --config runs/mosaic/config.json --algo broadcast --out runs/broadcast   # another arm
  mosaic train --resume --out runs/mosaic --iterations 20
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train an LLM policy (warm start + RL with broadcast or Mosaic credit)",
        description=(
            "Train an LLM policy across sessions. With no arguments: the embedded CPU demo, a tiny model on easy "
            "builtin tasks (one-hop questions, candidate actions) in a 600-token window, so each episode takes two "
            "sessions (read, compact, answer from the summary); at the compaction the policy chooses the complete "
            "summary or a lossy one, and at 5 steps only the complete one leaves the steps to answer. Oracle warm "
            "start (taking either summary), then 10 iterations of PPO with Mosaic credit; it prints held-out "
            "success before and after RL (sampled and greedy) and the probe P(complete summary).\n\n"
            "Every setting (algos.learn.config.TrainConfig, and its learner's, PGConfig) is a flag named after it; "
            "--config FILE reads them from a TOML, YAML or JSON file whose keys are the setting names (a run's "
            "config.json too), and flags given beside it win. A flag's 'none' sets None."
        ),
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--config", metavar="FILE", default=None, action=Given,
                   help="settings from a .toml, .yaml/.yml or .json file (keys: the setting names, pg and "
                        "env_kwargs as tables); flags given beside it win")
    env = cli_defaults()["env_kwargs"]
    notes = {key: f"(default: {env[key]}, the demo's env_kwargs; none: {flag.unset})"
             for key, flag in shared_flags().items() if flag.unset and key in env}
    notes["summary_choices"] = "(default: on, the demo's env_kwargs)"
    notes["out"] = f"(default: runs/ALGO): {help_of('out')}"
    groups = {"env_kwargs": p.add_argument_group("environment (env_kwargs)"),
              "pg": p.add_argument_group("learner (PGConfig)"), "": p.add_argument_group("settings (TrainConfig)")}
    for flag, setting in train_flags():
        room = setting.split(".")[0] if "." in setting or setting == "env_id" else ""
        room = "env_kwargs" if room == "env_id" else room
        flag.add(groups[room], notes.get(flag.key, ""))
    g = p.add_argument_group("the run (not settings)")
    g.add_argument("--resume", nargs=0, const=True, default=False, action=Given,
                   help="continue the run in --out from its checkpoint, with the settings in its config.json "
                        "(flags given must agree with them; --iterations may change)")
    # older spellings: --dr-grpo of --no-normalize-std, --rl-temperature of --temperature
    g.add_argument("--rl-temperature", dest="temperature", type=temperature, default=argparse.SUPPRESS, action=Given,
                   help=argparse.SUPPRESS)
    g.add_argument("--dr-grpo", dest="normalize_std", nargs=0, const=False, default=argparse.SUPPRESS, action=Given,
                   help=argparse.SUPPRESS)
    g.add_argument("--tensorboard", nargs=0, const=True, default=False, action=Given,
                   help="also write the metrics as TensorBoard events in OUT/tensorboard (pip install "
                        "'mosaic-gym[tensorboard]')")
    g.add_argument("--wandb", nargs="?", const="mosaic-gym", default=None, metavar="PROJECT", action=Given,
                   help="also log the metrics to this W&B project, when wandb is installed (default project: "
                        "mosaic-gym)")
    add_flags(g, ("no_progress",))
    p.set_defaults(run=run, given=(), given_as={})


def config_from_args(args: argparse.Namespace):
    """The run's settings: :func:`cli_defaults`, then ``--config FILE``'s, then each flag given.

    A file's ``env_kwargs`` replaces the default one whole (as in a run's ``config.json``; its ``candidates``,
    when absent, follows ``mode``); its ``pg.*`` settings replace the learner's one by one.
    """
    from algos.learn.config import ConfigError, TrainConfig

    data = cli_defaults()
    if args.config:
        settings = read_settings(args.config, flag_settings())
        if settings.get("pg.advantage", settings.get("algo", data["algo"])) != settings.get("algo", data["algo"]):
            raise ConfigError(f"--config {args.config}: pg.advantage = {settings['pg.advantage']!r} but algo = "
                              f"{settings.get('algo', data['algo'])!r}: the learner assigns the algo's credit; set "
                              f"algo alone")
        for name, value in settings.items():
            _set(data, name, copy.deepcopy(value))
        if "env_kwargs" in settings:
            env = data["env_kwargs"]
            if isinstance(env, dict) and "candidates" not in env:
                env["candidates"] = data["mode"] == "choose"
            if isinstance(env, dict) and env.get("site") == "builtin":
                del env["site"]  # (as --site builtin: the default, left out)
            elif isinstance(env, dict) and isinstance(env.get("site"), str) and env["site"].strip():
                env["site"] = os.path.abspath(env["site"])  # (relative to the working folder, as --site's)
    given = set(getattr(args, "given", ()))
    for flag, setting in train_flags():
        if flag.key in given and flag.key != "env_kwargs":
            _apply(data, setting, getattr(args, flag.key))
    if "env_kwargs" in given:
        data["env_kwargs"].update(read_env_kwargs(args.env_kwargs))
    out = data.pop("out", None) or f"runs/{data['algo']}"
    return TrainConfig(**data, out=out, resume=args.resume)  # (pg.advantage: set to the algo)


def _set(data: dict[str, Any], name: str, value: Any) -> None:
    if name.startswith("pg."):
        data["pg"][name[3:]] = value
    else:
        data[name] = value


def _apply(data: dict[str, Any], setting: str, value: Any) -> None:
    """Set ``setting`` (dotted) in the JSON data ``data`` to a flag's ``value``, as the flag means it."""
    if setting == "mode":
        data["env_kwargs"]["candidates"] = value == "choose"
    if setting == "probe" and value == "none":
        value = None
    if not setting.startswith("env_kwargs."):
        _set(data, setting, value)
        return
    env, key = data["env_kwargs"], setting.split(".", 1)[1]
    if key == "hops" and value is not None:
        value = parse_hops(value)
    if key == "site":
        # Absolute: a resumed run, started from another folder, still finds its corpus.
        value = None if value == "builtin" else os.path.abspath(value) if value.strip() else value
    if value is None or (key == "summary_choices" and value is False):
        env.pop(key, None)  # (absent: the env's own default)
    else:
        env[key] = value


def _given_settings(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(setting, how it was given)`` for each setting a flag given or the ``--config`` file sets."""
    out = []
    by_dest = flag_settings()
    if args.config:
        settings = read_settings(args.config, by_dest)
        out += [(name, f"--config {args.config}'s {name}") for name in settings if name != "env_kwargs"]
        out += [(f"env_kwargs.{k}", f"--config {args.config}'s env_kwargs.{k}")
                for k in (settings.get("env_kwargs") or {})]
    for dest in args.given:
        if dest == "env_kwargs":
            out += [(f"env_kwargs.{k}", _flag(dest, args)) for k in read_env_kwargs(args.env_kwargs)]
        elif dest in by_dest:
            out += [(name, _flag(dest, args)) for name in (by_dest[dest], *(
                ("env_kwargs.candidates",) if dest == "mode" else ()))]
    return out


def resume_config(args: argparse.Namespace):
    """The config of the run in ``--out`` (its ``config.json``), with the flags given that a resume may change.

    Raises :class:`algos.learn.config.ConfigError` for a flag given explicitly (or a setting of ``--config``)
    that contradicts the run's settings.
    """
    from algos.learn.config import NOT_SETTINGS, RESUMABLE, ConfigError, read_config, setting

    wanted = config_from_args(args)
    path = Path(wanted.out) / "config.json"
    saved = read_config(path)
    given = _given_settings(args)
    for name, how in given:
        if name in RESUMABLE or name in NOT_SETTINGS:
            continue
        if setting(wanted, name) != setting(saved, name):
            raise ConfigError(f"{how} contradicts the run's {name} = {setting(saved, name)!r} in {path} (a resumed "
                              f"run keeps its settings; only --{', --'.join(RESUMABLE)} may change)")
    names = {name for name, _ in given}
    changes = {name: getattr(wanted, name) for name in RESUMABLE if name in names}
    return dataclasses.replace(saved, **changes, resume=True, ray=wanted.ray, warm_start_from=wanted.warm_start_from)


def _flag(dest: str, args: argparse.Namespace) -> str:
    """The flag as given: ``--lr 0.01``, ``--hops '1-3'``, ``--dr-grpo``."""
    value = getattr(args, dest)
    option = getattr(args, "given_as", {}).get(dest) or f"--{dest.replace('_', '-')}"
    shown = "" if isinstance(value, bool) else f" {value!r}" if isinstance(value, str) else f" {value}"
    return f"{option}{shown}"


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
