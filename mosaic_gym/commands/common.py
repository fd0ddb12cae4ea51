"""What the subcommands share: the flags defined once (:class:`Flag`; those of ``mosaic train``'s settings take
their help and default from :class:`algos.learn.config.TrainConfig`), building the env, and an agent from a name.

A flag that two commands take has one name, one help and one default everywhere (``tests/test_cli.py`` checks
it). The env flags default to *unset*: ``mosaic eval`` and ``mosaic rollout`` then use the env's own value, and
``mosaic train`` its config's (the demo's ``env_kwargs``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym

import envs  # noqa: F401  (registers the environments)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each option's default shown once: appended by argparse unless the help already says it in words
    (``(default: every task)``) or there is nothing to show (``None``, ``False``); examples kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or "%(default)" in text or action.default is None or action.default is False \
                or action.default == argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


class Given(argparse.Action):
    """Stores the flag's value and notes that it was given (``args.given``: the dests; ``args.given_as``: dest ->
    the option string used), so that ``--resume`` and ``--config`` can tell a flag given from a default.

    A flag without a value (``nargs=0``) stores its ``const``.
    """

    def __call__(self, parser, namespace, values, option_string=None):
        if self.nargs == 0:
            values = self.const
        setattr(namespace, self.dest, values)
        namespace.given = (*getattr(namespace, "given", ()), self.dest)
        namespace.given_as = {**getattr(namespace, "given_as", {}), self.dest: option_string}


class Switch(Given):
    """A ``--X`` / ``--no-X`` pair: True, or False when given as ``--no-X``."""

    def __call__(self, parser, namespace, values, option_string=None):
        self.const = not (option_string or "").startswith("--no-")
        super().__call__(parser, namespace, values, option_string)


@dataclass(frozen=True)
class Flag:
    """One option, defined once: its name, help and default, and how its text is read."""

    name: str  # "--site-size"
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: Sequence[str] | None = None
    metavar: str | None = None
    switch: bool = False  # a --name / --no-name pair
    nargs: str | int | None = None  # "?" with const: --ray [ADDRESS]; 0: a flag without a value
    const: Any = None
    aliases: tuple[str, ...] = ()  # older spellings: still read, not shown in --help
    dest: str | None = None  # default: the name's
    unset: str = ""  # what an env flag left unset means where the env decides: "the env's, 2000"

    @property
    def key(self) -> str:
        return self.dest or self.name[2:].replace("-", "_")

    def add(self, group, note: str = "") -> None:
        """Add the flag to a parser or argument group; ``note`` ends its help (a command's own remark)."""
        text = f"{self.help} {note}".strip()
        if self.switch:
            group.add_argument(self.name, "--no-" + self.name[2:], dest=self.key, nargs=0, const=True,
                               default=self.default, action=Switch, help=text)
            return
        shape: dict[str, Any] = {"type": self.type, "choices": self.choices, "metavar": self.metavar}
        if self.nargs is not None:
            shape.update(nargs=self.nargs, const=self.const)
        group.add_argument(self.name, dest=self.key, default=self.default, action=Given, help=text, **shape)
        for alias in self.aliases:
            group.add_argument(alias, dest=self.key, default=argparse.SUPPRESS, action=Given, help=argparse.SUPPRESS,
                               **shape)


def add_flags(group, names: Sequence[str], notes: dict[str, str] | None = None) -> None:
    """Add the shared flags ``names`` (keys of :func:`shared_flags`) to ``group``, each with its note."""
    flags = shared_flags()
    for name in names:
        flags[name].add(group, (notes or {}).get(name, ""))


def optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``none`` (any case) -> None, anything else as ``parse`` reads it.

    Example:
        >>> optional(int)("none"), optional(int)("3")
        (None, 3)
    """
    def read(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)

    read.__name__ = getattr(parse, "__name__", "value")
    return read


def number(least: float, strict: bool, hint: str) -> Callable[[str], float]:
    """An argparse type: a finite float above ``least`` (``strict``) or at least it; else the ``hint``.

    Example:
        >>> number(0.0, True, "give a number > 0")("0.5")
        0.5
    """
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number: {hint}") from None
        if not (value > least if strict else value >= least) or math.isinf(value):
            raise argparse.ArgumentTypeError(f"{text}: {hint}")
        return value
    return parse


positive = number(0.0, True, "give a finite number > 0")
non_negative = number(0.0, False, "give a finite number >= 0")
temperature = number(0.0, False, "give a temperature >= 0 (0: greedy)")


def json_value(text: str) -> Any:
    """An argparse type: JSON text, read.

    Example:
        >>> json_value('[{"fork": false}]')
        [{'fork': False}]
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({err})") from None


def int_list(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; argparse reports anything else.

    Example:
        >>> int_list("4, 8,16")
        [4, 8, 16]
    """
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 1,2,4") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,2,4")
    return values


def fraction(text: str) -> float:
    """A number in (0, 1], for options that are a fraction of something (``--compact-at 0.5``).

    Example:
        >>> fraction("0.5")
        0.5
    """
    return _in_unit_interval(text, zero=False)


def share(text: str) -> float:
    """A number in [0, 1], for options that are a share of something and may be none of it
    (``--measure-fraction 0``).

    Example:
        >>> share("0")
        0.0
    """
    return _in_unit_interval(text, zero=True)


def _in_unit_interval(text: str, zero: bool) -> float:
    """``text`` as a number in (0, 1] (or [0, 1] with ``zero``), else argparse's one-line error."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 <= value if zero else 0 < value) or not value <= 1:  # nan fails too
        kind, example = ("share in [0, 1]", "0.25") if zero else ("fraction in (0, 1]", "0.5")
        raise argparse.ArgumentTypeError(f"{text!r} is not a {kind}, e.g. {example}")
    return value


def help_of(setting: str) -> str:
    """The one line of help of a setting of :class:`~algos.learn.config.TrainConfig` (``"pg.lr"`` for the
    learner's)."""
    import dataclasses

    from algos.learn.config import PGConfig, TrainConfig

    cls, name = (PGConfig, setting[3:]) if setting.startswith("pg.") else (TrainConfig, setting)
    return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)


MODES = ("choose", "generate")
AGENTS = ("oracle", "random", "llm")

_SHARED: dict[str, Flag] = {}


def shared_flags() -> dict[str, Flag]:
    """The flags more than one command takes, by key: each with one name, help and default. Those that are
    settings of ``mosaic train`` take their help and default from :class:`~algos.learn.config.TrainConfig`."""
    if _SHARED:
        return _SHARED
    from algos.learn.config import TrainConfig

    d = TrainConfig()
    flags = [
        # the environment
        Flag("--env", help_of("env_id"), d.env_id, choices=sorted(envs.VARIANTS), aliases=("--env-id",)),
        Flag("--site", "'builtin', or a corpus: a folder of .html files, a folder with documents.jsonl, or a "
             ".jsonl documents file (see README)", "builtin"),
        Flag("--site-seed", "which builtin site", 0, type=int, metavar="N"),
        Flag("--site-size", "entities of the builtin site", type=int, metavar="N", unset="the env's, 2000"),
        Flag("--hops", "task difficulty: N or LO-HI", type=hops, unset="every task"),
        Flag("--max-steps", "step budget T", type=int, unset="the env's, 64"),
        Flag("--session-max-tokens", "context window of a session: past it the env asks the agent to compact",
             type=int, unset="the env's, 4096"),
        Flag("--summary-choices", "every compaction offers the complete and a lossy summary to choose from (env "
             "kwarg summary_choices)", switch=True, unset="the env's, off"),
        Flag("--backend", "browser backend", choices=("text", "playwright"), unset="the env's, text"),
        Flag("--env-kwargs", 'more env kwargs as JSON, e.g. \'{"show_budget": false}\'', "{}"),
        # the policy
        Flag("--model", help_of("model") + " (mosaic eval/rollout: the LLM agent's; with --agent URL, the "
             "name the server serves)", d.model),
        Flag("--mode", help_of("mode"), d.mode, choices=MODES),
        Flag("--temperature", help_of("temperature"), d.temperature, type=temperature),
        Flag("--max-new-tokens", help_of("max_new_tokens"), d.max_new_tokens,
             type=at_least(1, "give --max-new-tokens 1 or more")),
        Flag("--prompt-examples", help_of("prompt_examples"), d.prompt_examples, switch=True),
        Flag("--length-normalize", help_of("length_normalize"), d.length_normalize, switch=True),
        Flag("--device", help_of("pg.device"), d.pg.device, type=device),
        Flag("--seed", help_of("seed"), d.seed, type=int),
        # evaluation and scale
        Flag("--eval-episodes", help_of("eval_episodes"), d.eval_episodes,
             type=at_least(1, "give --eval-episodes 1 or more")),
        Flag("--eval-tasks", help_of("eval_tasks"), d.eval_tasks,
             type=optional(at_least(1, "give how many test tasks to evaluate on"))),
        Flag("--num-envs", help_of("num_envs"), d.num_envs, type=at_least(1, "give --num-envs 1 or more")),
        Flag("--ray", help_of("ray") + "; alone: local", d.ray, nargs="?", const="local", metavar="ADDRESS"),
        Flag("--envs-per-worker", "with --ray: envs each Ray worker holds (default: one worker per CPU of the "
             "cluster)", type=int),
        # the run
        Flag("--out", "where the command writes", metavar="DIR"),
        Flag("--no-progress", "hide progress bars (the command's, the model loader's, indexing a corpus)", False,
             nargs=0, const=True),
    ]
    _SHARED.update({flag.key: flag for flag in flags})
    return _SHARED


ENV_FLAGS = ("env", "site", "site_seed", "site_size", "hops", "max_steps", "session_max_tokens", "summary_choices",
             "backend", "env_kwargs")
"""The env flags of every command that makes an env (``mosaic eval`` and ``mosaic rollout`` add ``--split``)."""


def add_env_args(p: argparse.ArgumentParser) -> None:
    """The env flags of ``mosaic eval`` and ``mosaic rollout``: :data:`ENV_FLAGS` and ``--split``."""
    g = p.add_argument_group("environment")
    notes = {key: f"(default: {flag.unset})" for key, flag in shared_flags().items() if flag.unset}
    add_flags(g, ENV_FLAGS[:2])
    g.add_argument("--split", default="test", choices=["train", "test", "all"], action=Given,
                   help="the tasks: the test split (held out from training), the train split, or all")
    add_flags(g, ENV_FLAGS[2:], notes)


def env_kwargs(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The ``gym.make`` kwargs the env arguments ask for: the ``--config`` file's ``env_kwargs``, then the env
    flags (without a file every one, else those given; a flag left unset: the env's own default)."""
    file_env = getattr(args, "config_env", None)
    given = set(getattr(args, "given", ())) if file_env is not None else None
    kwargs: dict[str, Any] = dict(file_env or {})
    for key in ENV_FLAGS:
        if key in ("env", "env_kwargs"):  # (the id, and the JSON read below)
            continue
        value = getattr(args, key)
        if value is not None and (given is None or key in given):
            kwargs[key] = parse_hops(value) if key == "hops" else value
    kwargs["split"] = args.split
    kwargs.update(read_env_kwargs(args.env_kwargs))
    kwargs.update(extra)
    return kwargs


def read_env_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs`` read: a JSON object, or a one-line exit naming the flag."""
    try:
        more = json.loads(text)
    except json.JSONDecodeError as err:
        raise SystemExit(f"--env-kwargs is not valid JSON ({err}); example: '{{\"show_budget\": false}}'")
    if not isinstance(more, dict):
        raise SystemExit(f"--env-kwargs {text!r} is not a JSON object; example: '{{\"show_budget\": false}}'")
    return more


def add_config_flag(p: argparse.ArgumentParser) -> None:
    """``--config FILE`` for ``mosaic eval`` and ``mosaic rollout``: a run's settings (see :func:`apply_config`)."""
    p.add_argument("--config", metavar="FILE", default=None, action=Given,
                   help="the env and the policy's settings of a run: its config.json, or a .toml/.yaml file of "
                        "mosaic train settings (env_id, env_kwargs, mode, temperature, ...; flags given win; the "
                        "file's model acts with --agent llm)")


#: The settings of a --config file that mosaic eval and rollout take, and the flag each fills.
CONFIG_FLAGS = {"env_id": "env", "mode": "mode", "temperature": "temperature", "max_new_tokens": "max_new_tokens",
                "prompt_examples": "prompt_examples", "length_normalize": "length_normalize", "seed": "seed",
                "pg.device": "device", "model": "model", "eval_episodes": "eval_episodes", "eval_tasks": "eval_tasks",
                "num_envs": "num_envs"}


def apply_config(args: argparse.Namespace) -> None:
    """Fill the flags not given from the ``--config`` file's settings (:data:`CONFIG_FLAGS`; held-out
    evaluation's temperature where the run set one) and keep its ``env_kwargs`` for :func:`env_kwargs`. A
    ``ValueError`` (ConfigError) of one line for a file that is not settings."""
    if not getattr(args, "config", None):
        return
    from .settings_file import read_settings

    settings = read_settings(args.config)
    if settings.get("eval_temperature") is not None:
        settings["temperature"] = settings["eval_temperature"]
    given = set(args.given)
    for name, dest in CONFIG_FLAGS.items():
        if name in settings and dest not in given and hasattr(args, dest):
            setattr(args, dest, settings[name])
    env = dict(settings.get("env_kwargs") or {})
    if "hops" in env and isinstance(env["hops"], list):
        env["hops"] = tuple(env["hops"])
    env.pop("split", None)
    args.config_env = env


def make_env(args: argparse.Namespace, **extra: Any) -> gym.Env:
    return gym.make(args.env, **env_kwargs(args, **extra))


def parse_hops(text: str) -> int | tuple[int, int]:
    """``"2"`` -> 2, ``"1-3"`` -> (1, 3); ``ValueError`` for anything else."""
    if "-" in text:
        lo, hi = text.split("-", 1)
        return int(lo), int(hi)
    return int(text)


def hops(text: str) -> str:
    """``text`` when :func:`parse_hops` reads it (the option keeps its text, so that it reads the same in
    ``--help`` and in a run's settings); an argparse error otherwise.

    Example:
        >>> hops("1-3")
        '1-3'
    """
    try:
        parse_hops(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use a number (2) or a range (1-3)") from None
    return text


def add_scale_args(p: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]`` (env workers on Ray) and ``--envs-per-worker``."""
    add_flags(p.add_argument_group("scale"), ("ray", "envs_per_worker"))


def make_pool(args: argparse.Namespace, num_envs: int, **extra: Any):
    """The env pool the arguments ask for: local, or on Ray with ``--ray``."""
    from envs.pool import make_pool as pool_of

    return pool_of(args.env, env_kwargs(args, **extra), num_envs, ray=args.ray, envs_per_worker=args.envs_per_worker)


def at_least(least: int, hint: str):
    """An argparse type: an integer of at least ``least``, refused here with ``hint`` (a one-line usage error,
    not a traceback from the settings' own check or a NaN deep in the credit).

    Example:
        >>> at_least(1, "give 1 or more")("4")
        4
        >>> at_least(0, "give 0 or more")("-1")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: '-1': give 0 or more
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"{text!r}: {hint}")
        return value

    return parse


def add_agent_args(group) -> None:
    """The agent flags ``mosaic rollout`` and ``mosaic eval`` share: who acts, the oracle's knobs, and the
    policy's (the same flags, names and defaults as ``mosaic train``'s)."""
    group.add_argument("--agent", default=None, action=Given,
                       help="oracle | random | llm (the --model, loaded here) | an inference server's URL "
                            "(http://HOST:PORT/v1, serving --model) (default: oracle; with --model given, llm)")
    group.add_argument("--compact-at", type=fraction, default=None, action=Given,
                       help="oracle: compact when the context passes this fraction of the window")
    group.add_argument("--fork", nargs=0, const=True, default=False, action=Given,
                       help="oracle: fork one subagent per sub-question")
    group.add_argument("--error-rate", type=float, default=0.0, action=Given,
                       help="oracle: chance of a wrong action per step")
    add_flags(group, ("model", "mode", "temperature", "max_new_tokens", "prompt_examples", "length_normalize",
                      "device"))
    # the older spelling: --examples auto (for models with a chat template, in generate mode) | on | off
    group.add_argument("--examples", dest="prompt_examples", type=_examples, action=Given, default=argparse.SUPPRESS,
                       help=argparse.SUPPRESS)


def _examples(text: str) -> bool | str:
    """``--examples auto|on|off`` (the older spelling of ``--prompt-examples``): True, False or ``"auto"``."""
    if text not in ("auto", "on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r}: use auto, on or off (or --prompt-examples / "
                                         f"--no-prompt-examples)")
    return {"on": True, "off": False}.get(text, text)


def agent_name(args: argparse.Namespace) -> str:
    """Who acts: ``--agent`` as given (``llm``: the ``--model``); without it, ``llm`` when ``--model`` was given,
    else ``oracle``. A ``--model`` beside ``--agent oracle|random`` is a ``ValueError``."""
    given = getattr(args, "given", ())
    name = args.agent if args.agent is not None else "llm" if "model" in given else "oracle"
    if name in ("oracle", "random") and "model" in given:
        raise ValueError(f"--model names the LLM that acts; --agent {name} uses none (drop one of them)")
    return name


def wants_candidates(args: argparse.Namespace) -> bool:
    """Whether the env offers candidate actions: ``--candidates``, or a local LLM in choose mode."""
    from agents.server import is_server_url

    name = agent_name(args)
    llm = name not in ("oracle", "random") and not is_server_url(name)
    return bool(getattr(args, "candidates", False)) or (llm and args.mode == "choose")


def build_agent(args: argparse.Namespace, env: gym.Env):
    """``oracle`` / ``random`` / ``llm`` (the ``--model``) / a model spec (``tiny-1m``, ``smollm2``, a folder, a
    checkpoint: the older spelling of ``--model``) / a server URL -> an Agent."""
    from agents import OracleAgent, RandomAgent

    name = agent_name(args)
    given = getattr(args, "given", ())
    if name == "oracle":
        return OracleAgent(env, compact_at=args.compact_at, fork=args.fork, error_rate=args.error_rate, seed=args.seed)
    if name == "random":
        return RandomAgent(seed=args.seed)
    from agents.server import ServerAgent, is_server_url

    if is_server_url(name):
        if "model" not in given:
            raise ValueError(f"--agent {name} is a server: name the model it serves with --model NAME")
        return ServerAgent(name, args.model, temperature=args.temperature, max_tokens=args.max_new_tokens,
                           seed=args.seed)
    from agents.llm import LLMAgent
    from agents.models import PRESETS, did_you_mean, has_own_chat_template, load_model

    if name == "llm":
        name = args.model
    elif "model" in given and args.model != name:
        raise ValueError(f"--agent {name} and --model {args.model} name two models: give one, --model")
    if name not in PRESETS and "/" not in name and not Path(name).is_dir():
        raise ValueError(
            f"--agent {name!r} names no agent: use {', '.join(AGENTS[:2] + PRESETS)}, a model folder (e.g. "
            f"runs/mosaic/final) or a hub id (owner/name){did_you_mean(name, AGENTS + PRESETS)}"
        )
    from envs.prompts import EXAMPLE_EXCHANGE

    model, tokenizer = load_model(name)  # a missing folder or an unreachable hub: a ModelSpecError (ValueError)
    model.to(args.device)
    examples = args.prompt_examples
    if examples == "auto":  # (--examples auto, the older spelling: instruct models, in generate mode)
        examples = has_own_chat_template(tokenizer) and args.mode == "generate"
    return LLMAgent(model, tokenizer, mode=args.mode, temperature=args.temperature, seed=args.seed,
                    max_new_tokens=args.max_new_tokens, length_normalize=args.length_normalize, device=args.device,
                    examples=EXAMPLE_EXCHANGE if examples else ())


def device(text: str) -> str:
    """``text`` when torch can use that device here; otherwise an argparse error that says why.

    Example:
        >>> device("cpu")
        'cpu'
    """
    import torch

    try:
        parsed = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: use cpu, cuda, cuda:1, mps, ...") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        why = "is a CPU-only build" if torch.version.cuda is None else "sees no CUDA GPU"
        raise argparse.ArgumentTypeError(f"this torch ({torch.__version__}) {why}; use --device cpu")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"there are {torch.cuda.device_count()} CUDA devices, numbered from 0")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError("MPS is not available here; use --device cpu")
    return text


def budgets(text: str) -> str:
    """``text`` when it is a BudgetMix spec (see :func:`algos.learn.budgets.parse_budgets`); an argparse error
    naming the accepted forms otherwise.

    Example:
        >>> budgets("4,8,16")
        '4,8,16'
    """
    from algos.learn.budgets import parse_budgets

    try:
        parse_budgets(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


@contextlib.contextmanager
def quiet_progress(quiet: bool):
    """While the command runs with ``--no-progress``: no progress bars, the library's included (``TQDM_DISABLE``,
    which env workers and study runs started meanwhile inherit, and Transformers' bars); both as they were after,
    so a command called in-process (a test, a notebook) leaves no setting behind."""
    if not quiet:
        yield
        return
    from transformers.utils import logging as transformers_logging

    before, bars = os.environ.get("TQDM_DISABLE"), transformers_logging.is_progress_bar_enabled()
    os.environ["TQDM_DISABLE"] = "1"
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = before
        if bars:
            transformers_logging.enable_progress_bar()
