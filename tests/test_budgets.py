"""BudgetMix samplers: their distributions, determinism given the generator, and the command-line specs."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from algos.learn.budgets import (
    BudgetSampler,
    FixedBudget,
    LogUniformBudget,
    ScheduleBudget,
    UniformBudget,
    parse_budgets,
)

# Upper 0.1% points of the chi-square distribution (from tables), by degrees of freedom.
CHI2_CRITICAL_0_001 = {2: 13.816, 60: 99.607}


def chi_square(draws: list[int], probabilities: dict[int, float]) -> float:
    counts = Counter(draws)
    assert set(counts) <= set(probabilities), f"draws outside the support: {set(counts) - set(probabilities)}"
    n = len(draws)
    return sum((counts[value] - n * p) ** 2 / (n * p) for value, p in probabilities.items())


def draw(sampler: BudgetSampler, n: int, seed: int = 0, iteration: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [sampler.sample(rng, iteration) for _ in range(n)]


def test_fixed_budget_is_constant():
    assert set(draw(FixedBudget(16), 50)) == {16}


def test_uniform_budget_matches_a_uniform_distribution():
    draws = draw(UniformBudget([8, 16, 32]), 3000)
    statistic = chi_square(draws, {8: 1 / 3, 16: 1 / 3, 32: 1 / 3})
    assert statistic < CHI2_CRITICAL_0_001[2]


def test_log_uniform_budget_matches_the_log_uniform_integer_law():
    low, high = 4, 64
    draws = draw(LogUniformBudget(low, high), 20000)
    probabilities = {t: math.log((t + 1) / t) / math.log((high + 1) / low) for t in range(low, high + 1)}
    assert sum(probabilities.values()) == pytest.approx(1.0)
    assert chi_square(draws, probabilities) < CHI2_CRITICAL_0_001[high - low]
    # Log-uniform: each doubling of the budget is about equally likely; a uniform law would favour the last.
    doublings = [sum(lo <= t < 2 * lo for t in draws) / len(draws) for lo in (4, 8, 16, 32)]
    assert doublings == pytest.approx([0.25] * 4, abs=0.02)


def test_log_uniform_budget_reaches_both_ends_and_no_further():
    assert set(draw(LogUniformBudget(1, 2), 200)) == {1, 2}
    assert set(draw(LogUniformBudget(7, 7), 20)) == {7}


@pytest.mark.parametrize(
    "sampler",
    [UniformBudget([8, 16, 32]), LogUniformBudget(4, 64), ScheduleBudget([(0, LogUniformBudget(2, 9))])],
)
def test_samplers_are_deterministic_given_the_generator(sampler):
    assert draw(sampler, 100, seed=7) == draw(sampler, 100, seed=7)
    assert draw(sampler, 100, seed=7) != draw(sampler, 100, seed=8)


def test_samplers_return_python_ints():
    for sampler in (FixedBudget(3), UniformBudget([3, 5]), LogUniformBudget(3, 9), ScheduleBudget([(0, 3)])):
        assert type(sampler.sample(np.random.default_rng(0))) is int


def test_schedule_switches_stage_at_each_start():
    schedule = ScheduleBudget([(0, 8), (100, UniformBudget([16, 32])), (200, 64)])
    assert set(draw(schedule, 30, iteration=0)) == {8}
    assert set(draw(schedule, 30, iteration=99)) == {8}
    assert set(draw(schedule, 200, iteration=100)) == {16, 32}
    assert set(draw(schedule, 30, iteration=10_000)) == {64}


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: FixedBudget(0), "steps"),
        (lambda: FixedBudget(True), "steps"),
        (lambda: UniformBudget([]), "choices"),
        (lambda: UniformBudget([8, 8]), "distinct"),
        (lambda: UniformBudget([8, -1]), "choices"),
        (lambda: LogUniformBudget(64, 4), "low"),
        (lambda: LogUniformBudget(0, 4), "low"),
        (lambda: ScheduleBudget([]), "iteration 0"),
        (lambda: ScheduleBudget([(5, 8)]), "iteration 0"),
        (lambda: ScheduleBudget([(0, 8), (0, 16)]), "increase"),
        (lambda: ScheduleBudget([(0, 8), (-3, 16)]), "non-negative"),
        (lambda: ScheduleBudget([(0, 0)]), "budget"),
    ],
)
def test_invalid_samplers_raise_clear_errors(make, named):
    with pytest.raises(ValueError, match=named):
        make()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("16", FixedBudget(16)),
        (" 16 ", FixedBudget(16)),
        ("8,16,32", UniformBudget([8, 16, 32])),
        ("8, 16", UniformBudget([8, 16])),
        ("4-64", LogUniformBudget(4, 64)),
        ("log:4-64", LogUniformBudget(4, 64)),
        ("schedule:0=8,100=16", ScheduleBudget([(0, 8), (100, 16)])),
        (
            "schedule:0=8,50=8,16,200=log:16-64",
            ScheduleBudget([(0, 8), (50, UniformBudget([8, 16])), (200, LogUniformBudget(16, 64))]),
        ),
    ],
)
def test_parse_budgets_accepts_every_documented_form(spec, expected):
    assert parse_budgets(spec) == expected


@pytest.mark.parametrize(
    "spec",
    ["", "abc", "8,", "4-", "-4", "4-64-128", "log:4", "0", "64-4", "8,8", "schedule:", "schedule:5=8",
     "schedule:0=8,x=16", "schedule:0=schedule:0=8", "schedule:0=8,0=16", "1.5"],
)
def test_parse_budgets_rejects_malformed_specs_naming_the_accepted_forms(spec):
    with pytest.raises(ValueError, match="accepted forms") as error:
        parse_budgets(spec)
    assert "log:4-64" in str(error.value) and "schedule:0=8,100=16" in str(error.value)
