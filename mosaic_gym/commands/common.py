"""What the subcommands share: env arguments, building the env, and building an agent from a name."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym

import envs  # noqa: F401  (registers the environments)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each option's default shown once: appended by argparse unless the help already says it in words
    (``(default: every task)``) or there is nothing to show (``None``, ``False``); examples kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or "%(default)" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


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
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # nan fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1], e.g. 0.5")
    return value


def add_env_args(p: argparse.ArgumentParser, env_id: str = "mosaic/WebQA-v0", default_hops: str | None = None,
                 site_size: int = 2000) -> None:
    """The env options every subcommand takes."""
    g = p.add_argument_group("environment")
    g.add_argument("--env", default=env_id, choices=sorted(envs.VARIANTS), help="environment id")
    g.add_argument("--site", default="builtin", help="'builtin', or a corpus: a folder of .html files, a folder with "
                   "documents.jsonl, or a .jsonl documents file (see README)")
    g.add_argument("--site-seed", type=int, default=0, help="which builtin site")
    g.add_argument("--site-size", type=int, default=site_size, help="entities of the builtin site")
    g.add_argument("--split", default="test", choices=["train", "test", "all"], help="task split")
    g.add_argument("--hops", type=hops, default=default_hops, help="difficulty: N or LO-HI (default: every task)")
    g.add_argument("--max-steps", type=int, default=None, help="step budget T (default: the env's)")
    g.add_argument("--session-max-tokens", type=int, default=None, help="context window of a session")
    g.add_argument("--backend", default="text", choices=["text", "playwright"], help="browser backend")
    g.add_argument("--env-kwargs", default="{}", help='more env kwargs as JSON, e.g. \'{"show_budget": false}\'')


def env_kwargs(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The ``gym.make`` kwargs the env arguments ask for."""
    kwargs: dict[str, Any] = {"site": args.site, "site_seed": args.site_seed, "site_size": args.site_size,
                              "split": args.split, "backend": args.backend}
    if args.hops:
        kwargs["hops"] = parse_hops(args.hops)
    if args.max_steps is not None:
        kwargs["max_steps"] = args.max_steps
    if args.session_max_tokens is not None:
        kwargs["session_max_tokens"] = args.session_max_tokens
    try:
        more = json.loads(args.env_kwargs)
    except json.JSONDecodeError as err:
        raise SystemExit(f"--env-kwargs is not valid JSON ({err}); example: '{{\"show_budget\": false}}'")
    kwargs.update(more)
    kwargs.update(extra)
    return kwargs


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


def add_scale_args(p: argparse.ArgumentParser, server: bool = True) -> None:
    """``--ray [ADDRESS]`` (env workers on Ray) and, with ``server``, ``--model`` for an ``--agent`` URL."""
    g = p.add_argument_group("scale")
    g.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run the envs on Ray workers: alone, a local cluster (ray.init()); with an ADDRESS (auto, "
                        "HOST:6379, ray://HOST:10001), that cluster's")
    g.add_argument("--envs-per-worker", type=int, default=None,
                   help="with --ray: envs each Ray worker holds (default: one worker per CPU of the cluster)")
    if server:
        g.add_argument("--model", default=None,
                       help="with --agent http://HOST:PORT/v1: the model name the server serves")


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


AGENTS = ("oracle", "random")
#: Sampling defaults of ``mosaic rollout`` / ``mosaic eval`` with a model: 0.7 keeps a pretrained model's calls
#: well formed while Pass@K still sees different samples; a call is short, and generation stops at its end.
MODEL_TEMPERATURE = 0.7
MODEL_MAX_NEW_TOKENS = 64


def add_agent_args(group) -> None:
    """The agent flags ``mosaic rollout`` and ``mosaic eval`` share: the oracle's knobs and a model's sampling."""
    group.add_argument("--compact-at", type=fraction, default=None,
                       help="oracle: compact when the context passes this fraction of the window")
    group.add_argument("--fork", action="store_true", help="oracle: fork one subagent per sub-question")
    group.add_argument("--error-rate", type=float, default=0.0, help="oracle: chance of a wrong action per step")
    group.add_argument("--mode", default="generate", choices=["generate", "choose"],
                       help="LLM: generate actions, or choose among the env's candidates (turns on --candidates)")
    group.add_argument("--temperature", type=float, default=MODEL_TEMPERATURE,
                       help="LLM: sampling temperature (0: greedy)")
    group.add_argument("--max-new-tokens", type=at_least(1, "give --max-new-tokens 1 or more"),
                       default=MODEL_MAX_NEW_TOKENS,
                       help="LLM, generate mode: a step stops at its first complete call, or after this many tokens")
    group.add_argument("--examples", default="auto", choices=["auto", "on", "off"],
                       help="LLM: show a worked exchange before each session (auto: for models with a chat "
                            "template, i.e. pretrained instruct models, in generate mode)")


def build_agent(args: argparse.Namespace, env: gym.Env):
    """``oracle`` / ``random`` / a model spec (``tiny-1m``, ``smollm2``, a folder, a checkpoint) -> an Agent."""
    from agents import OracleAgent, RandomAgent

    name = args.agent
    if name == "oracle":
        return OracleAgent(env, compact_at=args.compact_at, fork=args.fork, error_rate=args.error_rate, seed=args.seed)
    if name == "random":
        return RandomAgent(seed=args.seed)
    from agents.server import ServerAgent, is_server_url

    if is_server_url(name):
        if not args.model:
            raise ValueError(f"--agent {name} is a server: name the model it serves with --model NAME")
        return ServerAgent(name, args.model, temperature=args.temperature, max_tokens=args.max_new_tokens,
                           seed=args.seed)
    from agents.llm import LLMAgent
    from agents.models import PRESETS, did_you_mean, has_own_chat_template, load_model

    if name not in PRESETS and "/" not in name and not Path(name).is_dir():
        raise ValueError(
            f"--agent {name!r} names no agent: use {', '.join(AGENTS + PRESETS)}, a model folder (e.g. "
            f"runs/mosaic/final) or a hub id (owner/name){did_you_mean(name, AGENTS + PRESETS)}"
        )
    from envs.prompts import EXAMPLE_EXCHANGE

    model, tokenizer = load_model(name)  # a missing folder or an unreachable hub: a ModelSpecError (ValueError)
    chat = has_own_chat_template(tokenizer)  # a tiny model's transcript template is no instruct model's
    examples = args.examples == "on" or (args.examples == "auto" and chat and args.mode == "generate")
    return LLMAgent(model, tokenizer, mode=args.mode, temperature=args.temperature, seed=args.seed,
                    max_new_tokens=args.max_new_tokens, examples=EXAMPLE_EXCHANGE if examples else ())


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
