"""The Pass@(K,T) estimator of ``algos.evaluate`` against brute force, and its table, CSV and heatmap forms."""

from __future__ import annotations

import csv
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from matplotlib.image import imread

from algos.evaluate import pass_at_k, pass_at_kt_table, plot_heatmap, table_markdown, write_table_csv


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The fraction of all k-subsets of n samples (the first c correct) that hold a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(sample < c for sample in subset) for subset in subsets) / len(subsets)


def random_correct_steps(rng: np.random.Generator, tasks: int, samples: int, max_steps: int) -> list[list]:
    return [
        [int(rng.integers(1, max_steps + 1)) if rng.random() < 0.4 else None for _ in range(samples)]
        for _ in range(tasks)
    ]


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_enumeration_of_all_k_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k)), (n, c, k)


def test_pass_at_k_edge_cases():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 0, 10) == 0.0
    # n - c < k: every k-subset holds a correct sample.
    assert pass_at_k(10, 8, 3) == 1.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_pass_at_k_is_finite_where_the_binomials_are_huge():
    # C(2000, 1000) overflows a float; exact integers give the reference.
    exact = 1 - Fraction(math.comb(1997, 1000), math.comb(2000, 1000))
    assert pass_at_k(2000, 3, 1000) == pytest.approx(float(exact))


@pytest.mark.parametrize(("n", "c", "k", "named"), [(4, 1, 5, "n >= k"), (4, 1, 0, "k"), (4, 5, 2, "c"), (4, -1, 2, "c")])
def test_pass_at_k_rejects_impossible_arguments(n, c, k, named):
    with pytest.raises(ValueError, match=named):
        pass_at_k(n, c, k)


def test_table_counts_correct_samples_within_each_budget():
    # Task 0: correct at steps 2 and 6 of 4 samples; task 1: correct at step 4 of 4.
    correct_steps = [[2, None, 6, None], [None, None, 4, None]]
    table = pass_at_kt_table(correct_steps, ks=[1, 2], ts=[1, 3, 6])
    # T=1: nobody. T=3: c = (1, 0). T=6: c = (2, 1). pass@1 = c/4; pass@2 = 1 - C(4-c, 2)/6.
    expected = np.array(
        [
            [0.0, (0.25 + 0.0) / 2, (0.5 + 0.25) / 2],
            [0.0, (0.5 + 0.0) / 2, ((1 - 1 / 6) + 0.5) / 2],
        ]
    )
    assert table == pytest.approx(expected)


def test_table_shape_and_monotone_in_k_and_t():
    rng = np.random.default_rng(0)
    correct_steps = random_correct_steps(rng, tasks=12, samples=10, max_steps=30)
    ks, ts = [1, 2, 4, 8, 10], [1, 5, 10, 20, 30]
    table = pass_at_kt_table(correct_steps, ks, ts)
    assert table.shape == (len(ks), len(ts))
    assert np.all((table >= 0) & (table <= 1))
    assert np.all(np.diff(table, axis=0) >= -1e-12), "Pass@(K,T) must not fall as K grows"
    assert np.all(np.diff(table, axis=1) >= -1e-12), "Pass@(K,T) must not fall as T grows"


def test_table_is_the_mean_of_per_task_tables():
    rng = np.random.default_rng(1)
    correct_steps = random_correct_steps(rng, tasks=3, samples=6, max_steps=10)
    ks, ts = [1, 3], [2, 10]
    per_task = [pass_at_kt_table([task], ks, ts) for task in correct_steps]
    assert pass_at_kt_table(correct_steps, ks, ts) == pytest.approx(np.mean(per_task, axis=0))


@pytest.mark.parametrize(
    ("correct_steps", "ks", "ts", "named"),
    [
        ([[1, None], [None]], [2], [5], "task 1 has 1 samples"),
        ([], [1], [5], "at least one task"),
        ([[1, None]], [0], [5], "ks"),
        ([[1, None]], [1], [], "ts"),
    ],
)
def test_table_rejects_bad_input(correct_steps, ks, ts, named):
    with pytest.raises(ValueError, match=named):
        pass_at_kt_table(correct_steps, ks, ts)


def test_csv_round_trips_the_table(tmp_path):
    table = np.array([[0.1, 0.25, 1 / 3], [0.2, 0.5, 0.9]])
    path = write_table_csv(tmp_path / "pass.csv", table, ks=[1, 4], ts=[8, 16, 32])
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][1:] == ["8", "16", "32"]
    assert [row[0] for row in rows[1:]] == ["1", "4"]
    assert np.array([[float(value) for value in row[1:]] for row in rows[1:]]) == pytest.approx(table, abs=0)


def test_markdown_has_a_row_per_k_and_a_column_per_t():
    text = table_markdown(np.array([[0.25, 0.5], [0.5, 0.75]]), ks=[1, 2], ts=[4, 8])
    lines = text.splitlines()
    assert len(lines) == 2 + 2
    assert lines[0].split("|")[2:4] == [" 4 ", " 8 "]
    assert lines[3] == "| 2 | 0.500 | 0.750 |"


def test_writers_reject_a_table_of_the_wrong_shape(tmp_path):
    with pytest.raises(ValueError, match="table must have shape"):
        write_table_csv(tmp_path / "x.csv", np.zeros((2, 2)), ks=[1], ts=[1, 2])
    with pytest.raises(ValueError, match="table must have shape"):
        table_markdown(np.zeros((1, 3)), ks=[1], ts=[1, 2])


def test_heatmap_is_a_real_png_of_the_requested_size(tmp_path):
    table = np.array([[0.1, 0.4, 0.6], [0.3, 0.7, 0.95]])
    path = plot_heatmap(tmp_path / "heat.png", table, ks=[1, 4], ts=[8, 16, 32], title="test", figsize=(6, 4), dpi=50)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    assert image.shape == (4 * 50, 6 * 50, 4)
    assert len(np.unique(image.reshape(-1, 4), axis=0)) > 20, "the heatmap should not be a blank image"


def test_heatmap_grows_with_the_table_by_default(tmp_path):
    small = imread(plot_heatmap(tmp_path / "s.png", np.zeros((2, 2)), [1, 2], [1, 2]))
    large = imread(plot_heatmap(tmp_path / "l.png", np.zeros((4, 6)), [1, 2, 3, 4], [1, 2, 3, 4, 5, 6]))
    assert large.shape[0] > small.shape[0] and large.shape[1] > small.shape[1]
