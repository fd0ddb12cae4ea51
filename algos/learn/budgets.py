"""BudgetMix: samplers of the step budget T, drawn once per group so the group baseline compares like with like.

Every sampler has ``sample(rng, iteration=0) -> int``; pass the result as ``reset(options={"max_steps": T})``
to every trajectory of the group. :func:`parse_budgets` turns a command-line spec into a sampler.

Example:
    >>> import numpy as np
    >>> sampler = parse_budgets("schedule:0=8,100=16-64")
    >>> sampler.sample(np.random.default_rng(0), iteration=0)
    8
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "BudgetSampler",
    "FixedBudget",
    "LogUniformBudget",
    "ScheduleBudget",
    "UniformBudget",
    "parse_budgets",
]


@runtime_checkable
class BudgetSampler(Protocol):
    """Anything that draws one step budget per group."""

    def sample(self, rng: np.random.Generator, iteration: int = 0) -> int:
        """Draws the budget T for one group at training ``iteration``."""
        ...


def _positive_int(value: object, name: str) -> int:
    # bool is an int subclass, but True as a budget is surely a mistake.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class FixedBudget:
    """Always the same budget.

    Example:
        >>> FixedBudget(16).sample(np.random.default_rng(0))
        16
    """

    steps: int

    def __post_init__(self) -> None:
        _positive_int(self.steps, "steps")

    def sample(self, rng: np.random.Generator, iteration: int = 0) -> int:
        """Returns ``steps``; ``rng`` and ``iteration`` are unused."""
        return int(self.steps)


@dataclass(frozen=True)
class UniformBudget:
    """Uniform over a set of distinct budgets.

    Example:
        >>> UniformBudget((8, 16, 32)).sample(np.random.default_rng(0)) in (8, 16, 32)
        True
    """

    choices: tuple[int, ...]

    def __init__(self, choices: Sequence[int]) -> None:
        values = tuple(_positive_int(value, "every budget in choices") for value in choices)
        if not values:
            raise ValueError("choices must hold at least one budget, got none")
        if len(set(values)) != len(values):
            raise ValueError(f"choices must be distinct budgets, got {list(values)}")
        object.__setattr__(self, "choices", values)

    def sample(self, rng: np.random.Generator, iteration: int = 0) -> int:
        """Draws one of ``choices`` with equal probability; ``iteration`` is unused."""
        return self.choices[int(rng.integers(len(self.choices)))]


@dataclass(frozen=True)
class LogUniformBudget:
    """Log-uniform integers in ``[low, high]``: ``P(T = t) = log((t + 1) / t) / log((high + 1) / low)``.

    Drawn as ``floor(exp(u))`` with ``u`` uniform on ``[log low, log(high + 1))``, so every doubling of the
    budget is about as likely as any other.

    Example:
        >>> 4 <= LogUniformBudget(4, 64).sample(np.random.default_rng(0)) <= 64
        True
    """

    low: int
    high: int

    def __post_init__(self) -> None:
        _positive_int(self.low, "low")
        _positive_int(self.high, "high")
        if self.low > self.high:
            raise ValueError(f"low must not exceed high, got low={self.low}, high={self.high}")

    def sample(self, rng: np.random.Generator, iteration: int = 0) -> int:
        """Draws one budget; ``iteration`` is unused."""
        u = rng.uniform(math.log(self.low), math.log(self.high + 1))
        # exp(log(high + 1)) can round up to high + 1; the bound is inclusive of high only.
        return min(int(math.floor(math.exp(u))), self.high)


@dataclass(frozen=True)
class ScheduleBudget:
    """Piecewise by training iteration: each stage's sampler holds from its start until the next stage.

    Example:
        >>> schedule = ScheduleBudget([(0, 8), (100, FixedBudget(16))])
        >>> [schedule.sample(np.random.default_rng(0), iteration=i) for i in (0, 99, 100)]
        [8, 8, 16]
    """

    stages: tuple[tuple[int, BudgetSampler], ...]

    def __init__(self, stages: Sequence[tuple[int, BudgetSampler | int]]) -> None:
        normalized: list[tuple[int, BudgetSampler]] = []
        for start, sampler in stages:
            if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
                raise ValueError(f"every stage must start at a non-negative integer iteration, got {start!r}")
            if not isinstance(sampler, BudgetSampler):
                sampler = FixedBudget(_positive_int(sampler, f"the budget of the stage at iteration {start}"))
            normalized.append((int(start), sampler))
        starts = [start for start, _ in normalized]
        if not starts or starts[0] != 0:
            raise ValueError(f"the first stage must start at iteration 0, got stage starts {starts}")
        if any(later <= earlier for earlier, later in zip(starts, starts[1:])):
            raise ValueError(f"stage starts must increase strictly, got {starts}")
        object.__setattr__(self, "stages", tuple(normalized))

    def sample(self, rng: np.random.Generator, iteration: int = 0) -> int:
        """Draws from the stage that holds at ``iteration``."""
        if iteration < 0:
            raise ValueError(f"iteration must be non-negative, got {iteration}")
        current = next(sampler for start, sampler in reversed(self.stages) if start <= iteration)
        return current.sample(rng, iteration)


SPEC_FORMS = (
    "'16' (fixed), '8,16,32' (uniform over a set), '4-64' or 'log:4-64' (log-uniform integers), "
    "'schedule:0=8,100=16' (by training iteration; each stage takes any non-schedule form, e.g. "
    "'schedule:0=8,50=8,16,200=16-64')"
)

_INT = r"\s*\d+\s*"
_FIXED = re.compile(rf"^{_INT}$")
_UNIFORM = re.compile(rf"^{_INT}(,{_INT})+$")
_LOG_UNIFORM = re.compile(rf"^(?:\s*log\s*:)?({_INT})-({_INT})$")
# A stage starts at "<iteration>=", so commas inside a stage's uniform set stay with that stage.
_STAGE_BOUNDARY = re.compile(r",(?=\s*\d+\s*=)")


def _parse_plain(spec: str) -> BudgetSampler:
    if _FIXED.match(spec):
        return FixedBudget(int(spec))
    if _UNIFORM.match(spec):
        return UniformBudget([int(part) for part in spec.split(",")])
    log_uniform = _LOG_UNIFORM.match(spec)
    if log_uniform:
        return LogUniformBudget(int(log_uniform.group(1)), int(log_uniform.group(2)))
    raise ValueError(f"{spec!r} matches none of the forms")


def parse_budgets(spec: str) -> BudgetSampler:
    """Turns a command-line budget spec into a sampler.

    Accepted forms: ``"16"`` (fixed), ``"8,16,32"`` (uniform over a set), ``"4-64"`` or ``"log:4-64"``
    (log-uniform integers), ``"schedule:0=8,100=16"`` (by iteration; a stage may use any other form).

    Args:
        spec: the spec, as typed on the command line.

    Returns:
        The sampler.

    Raises:
        ValueError: for a malformed spec or invalid numbers, naming the accepted forms.

    Example:
        >>> parse_budgets("log:4-64")
        LogUniformBudget(low=4, high=64)
    """
    try:
        text = spec.strip()
        if not text.startswith("schedule:"):
            return _parse_plain(text)
        stages = []
        for stage in _STAGE_BOUNDARY.split(text.removeprefix("schedule:")):
            start, separator, budget = stage.partition("=")
            if not separator or not _FIXED.match(start):
                raise ValueError(f"schedule stage {stage!r} is not '<iteration>=<budget>'")
            stages.append((int(start), _parse_plain(budget.strip())))
        return ScheduleBudget(stages)
    except ValueError as err:
        raise ValueError(f"invalid budget spec {spec!r}: {err}; accepted forms: {SPEC_FORMS}") from None
