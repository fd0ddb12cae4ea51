"""Benchmark hostile actions: how long one ``env.step`` takes on an action built to break or stall the parser,
beside a normal ``search("x")`` step measured in the same process, and how many steps raise.

The promise under test (README, Action): ``env.step`` never raises, a bad action comes back as
``info["action_error"]``, and no step on an action of any of these classes takes over ``BOUND_MS``:

- ``non_ascii_digits``: Unicode digits and numbers (categories Nd and No, e.g. ``²``, ``①``, ``١``), which
  ``str.isdigit`` accepts and ``int`` may not;
- ``huge_numerals``: numbers past Python's 4,300-digit conversion limit, in every argument position, in the
  call syntax (decimal, hex, binary, signed, float, keyword, quoted) and in ``<tool_call>`` JSON;
- ``huge_json`` and ``deep_json``: megabyte-sized and deeply nested ``<tool_call>`` bodies;
- ``deep_nesting``: nested calls, parentheses, brackets, unary operators and open strings;
- ``non_str``: actions that are not text at all (bytes, None, a huge int, containers, objects whose
  ``__str__``/``__repr__`` raise or whose ``__class__`` lies);
- ``megabyte``: megabyte strings with or without a call in them.

Each timed action is stepped from a fresh ``reset(seed=0)`` (untimed), and again within one running episode
(reset whenever it ends), which also times the states a hostile action leads to (a full context that must
compact). Every class is drawn ``--per-class`` times per env id, from a fixed seed: the runs are repeatable.

``--fuzz N`` adds a count of the exceptions ``env.step`` raised over ``N`` fuzzed actions from the same
classes, spread over the four env ids, reported per 100,000 actions, grouped by exception type and the line
that raised it, each with a sample message and action.
This part needs nothing but the env, so it also measures a tree from before a fix.

Prints one JSON object (and writes it to ``--out``).

The command exits 1 when a step broke the promise (raised, or took over ``BOUND_MS``).

Usage:
    python -m mosaic_gym.bench.bench_actions                  # worst and median step per class, beside search("x")
    python -m mosaic_gym.bench.bench_actions --fuzz 100000    # also: exceptions per 100k fuzzed actions
    python -m mosaic_gym.bench.bench_actions --quick --out actions.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import traceback
import unicodedata
from pathlib import Path
from typing import Any, Callable


import gymnasium as gym

import envs  # noqa: F401  (registers the environments)
from mosaic_gym.bench.common import figure, machine
from mosaic_gym.bench.registry import Benchmark

ENV_IDS = ("mosaic/WebQA-v0", "mosaic/WebQA-Compact-v0", "mosaic/WebQA-Fork-v0", "mosaic/WebQA-Single-v0")
TOOLS = {"search": "query", "open": "target", "scroll": "direction", "find": "text", "compact": "summary",
         "fork": "task", "finish": "result", "answer": "text"}
PACKAGES = ("gymnasium", "numpy")
BOUND_MS = 50.0
SITE_SIZE = 120
MEGABYTE = 2**20
#: Per settings: hostile actions drawn per class and env id, and ``search("x")`` steps timed as the baseline.
SETTINGS = {"full": {"per_class": 25, "baseline_steps": 2000}, "quick": {"per_class": 4, "baseline_steps": 200},
            "smoke": {"per_class": 1, "baseline_steps": 20}}

#: Every non-ASCII character of Unicode categories Nd (decimal digits) and No (other numbers).
UNICODE_NUMBERS = "".join(c for c in map(chr, range(0x80, 0x110000))
                          if unicodedata.category(c) in ("Nd", "No"))


def numeral(rng: random.Random) -> str:
    """A number literal of 1,001 to 100,000 digits: decimal, hex, binary, signed, float or exponent."""
    digits = rng.choice((1001, 4300, 4301, 5000, 20_000, 100_000))
    form = rng.randrange(7)
    if form == 0:
        return "0x" + "f" * max(1, digits * 10 // 12)
    if form == 1:
        return "0b" + "1" * (digits * 10 // 3)
    if form == 2:
        return "-" + "9" * digits
    if form == 3:
        return "1" * digits + ".5"
    if form == 4:
        return "1e" + "9" * min(digits, 5000)
    return rng.choice("123456789") + "0" * (digits - 1)


def tool_call(name: str, arguments: str) -> str:
    """A ``<tool_call>`` block whose ``arguments`` is the raw JSON text given (not checked, not escaped)."""
    return '<tool_call>{"name": "' + name + '", "arguments": ' + arguments + "}</tool_call>"


def non_ascii_digits(rng: random.Random) -> object:
    name = rng.choice(list(TOOLS))
    digits = "".join(rng.choice(UNICODE_NUMBERS) for _ in range(rng.randint(1, 6)))
    if rng.random() < 0.3:
        digits = rng.choice(("1", " ", "")) + digits + rng.choice(("2", " ", ""))
    if rng.random() < 0.5:
        return f'{name}("{digits}")'
    return tool_call(name, '{"' + TOOLS[name] + '": "' + digits + '"}')


def huge_numerals(rng: random.Random) -> object:
    name = rng.choice(list(TOOLS))
    number = numeral(rng)
    json_number = number if number[:2] not in ("0x", "0b") else "9" * len(number)
    forms = (
        f"{name}({number})",
        f'{name}("{number}")',
        f"{name}({TOOLS[name]}={number})",
        f"{name}(({number}))",
        tool_call(name, '{"' + TOOLS[name] + '": ' + json_number + "}"),
        tool_call(name, '{"' + TOOLS[name] + '": "' + json_number + '"}'),
        tool_call(name, '"{\\"' + TOOLS[name] + '\\": ' + json_number + '}"'),
        '<tool_call>{"name": ' + json_number + ', "arguments": {}}</tool_call>',
        tool_call(name, '{"' + json_number + '": 1}'),
    )
    return rng.choice(forms)


def huge_json(rng: random.Random) -> object:
    name = rng.choice(list(TOOLS))
    size = rng.choice((30_000, 300_000, MEGABYTE))
    forms = (
        tool_call(name, '{"' + TOOLS[name] + '": "' + "a" * size + '"}'),
        tool_call(name, '{"' + TOOLS[name] + '": "' + "\\u00e9" * (size // 6) + '"}'),
        tool_call(name, '{"' + TOOLS[name] + '": [' + "1," * (size // 2) + "1]}"),
        tool_call(name, "{" + ",".join(f'"k{i}": {i}' for i in range(size // 10)) + "}"),
        "<tool_call>" + "[" + "0," * (size // 2) + "0]" + "</tool_call>",
        "<tool_call>" + '"' + "x" * size,
    )
    return rng.choice(forms)


def deep_json(rng: random.Random) -> object:
    name = rng.choice(list(TOOLS))
    depth = rng.choice((1000, 10_000, 100_000, MEGABYTE // 2))
    forms = (
        "<tool_call>" + "[" * depth + "]" * depth + "</tool_call>",
        "<tool_call>" + "[" * depth,
        "<tool_call>" + '{"a":' * depth + "1" + "}" * depth + "</tool_call>",
        tool_call(name, '{"' + TOOLS[name] + '": ' + "[" * depth + "]" * depth + "}"),
        tool_call(name, '"' + "[" * depth + "]" * depth + '"'),
    )
    return rng.choice(forms)


def deep_nesting(rng: random.Random) -> object:
    name = rng.choice(list(TOOLS))
    n = rng.choice((100, 1000, 30_000, 300_000, MEGABYTE))
    forms = (
        f"{name}(" * 16 + "(" * n,
        f"{name}(" * (n // len(name)),
        f"{name}(" + "(" * n + ")" * n + ")",
        f"{name}(" + "[" * n + "]" * n + ")",
        f"{name}(" + "()" * n + ")",
        f"{name}(" * 16 + "()" * n,
        f"{name}(" + "-" * n + "1)",
        f"{name}(" + "not " * (n // 4) + "1)",
        f"{name}(" + "lambda:" * (n // 7) + "1)",
        f"{name}(" + "1+" * (n // 2) + "1)",
        f"{name}(" + "x." * (n // 2) + "x)",
        f'{name}("' * (n // 8),
        f"{name}(" + "'" * n + ")",
        f"{name}(" + "\\" * n + ")",
        "x(" * (n // 2),
        f"{name}(" + '"a" ' * (n // 4) + ")",
    )
    return rng.choice(forms)


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no __str__")

    def __repr__(self) -> str:
        raise RuntimeError("no __repr__")


class _Liar:
    """Claims to be a ``str``: ``isinstance(x, str)`` is true, but it is not one."""

    @property  # type: ignore[misc]
    def __class__(self):
        return str


class _RaisingClass:
    @property  # type: ignore[misc]
    def __class__(self):
        raise RuntimeError("no __class__")


def non_str(rng: random.Random) -> object:
    import numpy as np

    forms: tuple[Callable[[], object], ...] = (
        lambda: None,
        lambda: b'search("x")',
        lambda: bytearray(b"open(1)"),
        lambda: 10 ** rng.choice((5000, 50_000)),
        lambda: -(10**5000),
        lambda: rng.random(),
        lambda: float("nan"),
        lambda: ['search("x")'],
        lambda: {"name": "search", "arguments": {"query": "x"}},
        lambda: ('search("x")',),
        lambda: {1, 2},
        lambda: [0] * rng.choice((10, 10**6)),
        lambda: object(),
        lambda: _Unprintable(),
        lambda: [_Unprintable()],
        lambda: _Liar(),
        lambda: _RaisingClass(),
        lambda: np.int64(3),
        lambda: np.arange(10),
        lambda: str,
        lambda: len,
        lambda: (i for i in range(3)),
        lambda: True,
        lambda: 3 + 4j,
    )
    return rng.choice(forms)()


def megabyte(rng: random.Random) -> object:
    size = rng.choice((MEGABYTE, 4 * MEGABYTE))
    piece = rng.choice(("a", "search(", '"', "\\", "<think>", "<tool_call>", "(", "x ", "é", "\n", ")"))
    filler = piece * (size // len(piece))
    forms = (
        filler,
        filler + 'search("x")',
        'search("x")' + filler,
        'search("' + filler + '")',
        "<think>" + filler + '</think>search("x")',
        "<tool_call>" + filler,
        'compact("' + filler + '")',
    )
    return rng.choice(forms)


CLASSES: dict[str, Callable[[random.Random], object]] = {
    "non_ascii_digits": non_ascii_digits,
    "huge_numerals": huge_numerals,
    "huge_json": huge_json,
    "deep_json": deep_json,
    "deep_nesting": deep_nesting,
    "non_str": non_str,
    "megabyte": megabyte,
}

#: The issue's reproducers, timed and fuzzed beside the drawn actions.
REPRODUCERS = ('open("²")', 'open("①")', 'open("' + "1" * 4301 + '")', "open(0x" + "f" * 3600 + ")",
               '<tool_call>{"name":"search","arguments":{"query":' + "1" * 4400 + "}}</tool_call>",
               10**5000, "search(" * 16 + "(" * 2**20)


def make_envs() -> dict[str, gym.Env]:
    return {env_id: gym.make(env_id, site_size=SITE_SIZE, candidates=True) for env_id in ENV_IDS}


def timed_step(env: gym.Env, action: object) -> tuple[float, BaseException | None]:
    """Seconds one step took, and the exception it raised (``None`` when it returned)."""
    start = time.perf_counter()
    try:
        result = env.step(action)
    except Exception as err:  # noqa: BLE001  (counting them is the point)
        return time.perf_counter() - start, err
    seconds = time.perf_counter() - start
    if result[2] or result[3]:
        env.reset(seed=0)
    return seconds, None


def baseline(env: gym.Env, steps: int) -> float:
    """Median seconds of a ``search("x")`` step, each from a fresh reset like the timed hostile steps."""
    times = []
    for _ in range(steps):
        env.reset(seed=0)
        times.append(timed_step(env, 'search("x")')[0])
    return statistics.median(times)


def time_classes(environments: dict[str, gym.Env], per_class: int, seed: int) -> dict[str, Any]:
    """Worst and median step per class over every env id, fresh and within a running episode."""
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for name, draw in {**CLASSES, "reproducers": None}.items():
        times: list[float] = []
        errors, worst_action = 0, ""
        for env in environments.values():
            actions = list(REPRODUCERS) if draw is None else [draw(rng) for _ in range(per_class)]
            env.reset(seed=0)
            for fresh in (True, False):
                for action in actions:
                    if fresh:
                        env.reset(seed=0)
                    seconds, err = timed_step(env, action)
                    errors += err is not None
                    if err is not None:
                        env.reset(seed=0)
                    if not times or seconds > max(times):
                        worst_action = describe(action)
                    times.append(seconds)
        out[name] = {"steps": len(times), "exceptions": errors, "worst_ms": round(1e3 * max(times), 3),
                     "median_ms": round(1e3 * statistics.median(times), 3), "worst_action": worst_action}
    return out


def describe(action: object) -> str:
    """A short, safe description of an action (its type, length and first characters)."""
    if type(action) is not str:
        return f"<{type(action).__name__}>"
    head = action[:40].encode("unicode_escape").decode("ascii")
    return f"{len(action)} chars: {head}{'...' if len(action) > 40 else ''}"


def raised_at(err: BaseException) -> str:
    """``file:line`` of the innermost frame that raised ``err``."""
    frame = traceback.extract_tb(err.__traceback__)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno}"


def fuzz(environments: dict[str, gym.Env], count: int, seed: int) -> dict[str, Any]:
    """Exceptions ``env.step`` raised over ``count`` actions drawn round-robin from the classes and env ids."""
    rng = random.Random(seed)
    draws = list(CLASSES.values())
    envs_ = list(environments.values())
    for env in envs_:
        env.reset(seed=0)
    by_type: dict[str, dict[str, Any]] = {}
    start = time.perf_counter()
    for i in range(count):
        env = envs_[i % len(envs_)]
        action = REPRODUCERS[i // len(envs_) % len(REPRODUCERS)] if i % 50 == 0 else draws[i % 7](rng)
        _, err = timed_step(env, action)
        if err is not None:
            row = by_type.setdefault(f"{type(err).__name__} at {raised_at(err)}",
                                     {"count": 0, "sample": "", "action": describe(action)})
            row["count"] += 1
            row["sample"] = row["sample"] or str(err)[:160]
            env.reset(seed=0)
    exceptions = sum(row["count"] for row in by_type.values())
    return {"actions": count, "exceptions": exceptions, "per_100k": round(exceptions * 100_000 / count, 1),
            "by_type": by_type, "seconds": round(time.perf_counter() - start, 1)}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark as one JSON-ready dict, as ``args`` (its command line's) set it."""
    per_class, fuzz_count, seed = args.per_class, args.fuzz, args.seed
    environments = make_envs()
    if args.fuzz_only:
        return {"machine": machine(PACKAGES), "fuzz": fuzz(environments, fuzz_count, seed)}
    normal = baseline(environments[ENV_IDS[0]], SETTINGS[args.settings]["baseline_steps"])
    classes = time_classes(environments, per_class, seed)
    worst = max(row["worst_ms"] for row in classes.values())
    median = statistics.median(row["median_ms"] for row in classes.values())
    result: dict[str, Any] = {
        "machine": machine(PACKAGES),
        "config": {"site_size": SITE_SIZE, "per_class": per_class, "seed": seed, "env_ids": list(ENV_IDS)},
        "bound_ms": BOUND_MS,
        "baseline_search_ms": round(1e3 * normal, 4),
        "worst_ms": worst,
        "median_ms": median,
        "worst_ratio": round(worst / (1e3 * normal), 1),
        "median_ratio": round(median / (1e3 * normal), 1),
        "within_bound": worst <= BOUND_MS,
        "exceptions": sum(row["exceptions"] for row in classes.values()),
        "classes": classes,
    }
    if fuzz_count:
        result["fuzz"] = fuzz(environments, fuzz_count, seed)
    return result


def options(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Classes: " + ", ".join(CLASSES) + f". Bound: {BOUND_MS:g} ms a step."
    parser.add_argument("--per-class", type=int, help=f"actions drawn per class and env id (default "
                                                      f"{SETTINGS['full']['per_class']})")
    parser.add_argument("--fuzz", type=int, default=0, metavar="N",
                        help="also count the exceptions over N fuzzed actions (reported per 100k)")
    parser.add_argument("--fuzz-only", action="store_true",
                        help="only the --fuzz count, no timing (a tree whose slow steps take seconds)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the drawn actions (default 0)")


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows: the slowest and the median hostile step beside a ``search("x")`` step, and the steps
    that raised (none after ``--fuzz-only``, which times nothing)."""
    if "classes" not in result:
        return []
    search = ("search(\"x\") step, median", result["baseline_search_ms"])
    return [figure(f"slowest hostile-action step (bound {BOUND_MS:g} ms)", result["worst_ms"], "ms", *search),
            figure("median hostile-action step, median over classes", result["median_ms"], "ms", *search),
            figure("hostile-action steps that raised", result["exceptions"], "steps")]


def failed(result: dict[str, Any]) -> bool:
    """A step took over the bound, or one raised (timed or fuzzed)."""
    return bool(not result.get("within_bound", True) or result.get("exceptions")
                or result.get("fuzz", {}).get("exceptions"))


BENCHMARK = Benchmark(
    "actions", "hostile actions: the slowest env step on an action built to break or stall the parser, beside a "
    "search(\"x\") step, and the steps that raise", measure, figures,
    quick=f"{SETTINGS['quick']['per_class']} actions per class and env id",
    smoke=f"{SETTINGS['smoke']['per_class']} action per class and env id",
    defaults={settings: {"per_class": config["per_class"]} for settings, config in SETTINGS.items()},
    options=options, suites=(), failed=failed)


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
