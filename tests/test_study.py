"""``mosaic study``: every claim's quick mode end to end, on real (tiny) training runs, with resumption and
shared runs; and the interval arithmetic the results stand on."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from algos.learn.config import WARM_START_FREE, changed_settings
from algos.study import CLAIMS, interval, run_configs, warm_start_configs
from mosaic_gym.cli import main


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    assert main(["study", "compaction", "--quick", "--seeds", "2", "--out", str(out)]) == 0
    return out


def test_compaction_quick_runs_both_arms_paired(study, capsys):
    results = json.loads((study / "compaction" / "results.json").read_text())
    assert results["finished"] == {"broadcast": [0, 1], "mosaic": [0, 1]}
    for name in ("results.md", "curves.png"):
        assert (study / "compaction" / name).stat().st_size > 0
    # Seed k of both arms starts from the same warm start: the pairing the paired intervals rely on.
    for seed in (0, 1):
        warm = [json.loads((study / "compaction" / arm / f"seed{seed}" / "summary.json").read_text())
                ["success_warm_start"] for arm in ("broadcast", "mosaic")]
        assert warm[0]["per_task"] == warm[1]["per_task"] and warm[0]["metrics"] == warm[1]["metrics"]
    assert results["paired"]["success"]["n"] == 2
    assert results["arms"]["mosaic"]["final"]["sessions"]["n"] == 2
    assert len(results["verdict"]) == 2 and "sessions" in results["verdict"][1]
    # Where the two credits differ, read from the Mosaic arm's logged training groups (broadcast's estimate no D).
    assert set(results["credit"]) == {"mosaic"} and results["credit"]["mosaic"]["seeds"] == [0, 1]
    assert results["credit"]["mosaic"]["groups_per_seed"]["mean"] >= 1
    assert (study / "compaction" / "credit-mosaic.png").stat().st_size > 0
    assert "Where Mosaic's credit differs" in (study / "compaction" / "results.md").read_text()


def test_a_finished_study_is_not_run_again(study, capsys):
    before = {p: p.stat().st_mtime_ns for p in study.glob("compaction/*/seed*/checkpoint.pt")}
    assert len(before) == 6  # two seeds of the warm start and of each arm
    assert main(["study", "compaction", "--quick", "--seeds", "2", "--out", str(study)]) == 0
    assert "broadcast seed 0: finished" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime_ns for p in study.glob("compaction/*/seed*/checkpoint.pt")}


def test_recovery_reads_the_compaction_runs(study, capsys):
    assert main(["study", "recovery", "--quick", "--seeds", "2", "--out", str(study), "--summary-only"]) == 0
    results = json.loads((study / "recovery" / "results.json").read_text())
    assert set(results["recovery"]) == {"broadcast", "mosaic"}
    assert results["recovery"]["mosaic"]["step_quality"]["n"] == 2
    assert "single-step quality" in capsys.readouterr().out


def test_results_report_the_settings_the_runs_used(study, tmp_path):
    """The settings come from each run's own config.json, not from the study's presets as they are now."""
    copy = tmp_path / "copy"
    shutil.copytree(study / "compaction", copy / "compaction")
    results = json.loads((study / "compaction" / "results.json").read_text())
    ran = json.loads((study / "compaction" / "mosaic" / "seed0" / "config.json").read_text())
    assert results["settings"]["mosaic"]["config"]["env_kwargs"] == ran["env_kwargs"]
    assert results["settings"]["mosaic"]["differs"] == {}
    config = copy / "compaction" / "mosaic" / "seed1" / "config.json"
    edited = {**json.loads(config.read_text()), "bc_episodes": 999}
    config.write_text(json.dumps(edited))
    assert main(["study", "compaction", "--quick", "--seeds", "2", "--out", str(copy), "--summary-only"]) == 0
    results = json.loads((copy / "compaction" / "results.json").read_text())
    assert results["settings"]["mosaic"]["differs"] == {"1": ["bc_episodes"]}
    assert results["settings"]["broadcast"]["differs"] == {}
    assert "seeds that differ: 1 (bc_episodes)" in (copy / "compaction" / "results.md").read_text()


def test_budgets_adds_one_arm_beside_the_compaction_runs(study):
    assert main(["study", "budgets", "--quick", "--seeds", "1", "--out", str(study)]) == 0
    assert sorted(p.name for p in (study / "compaction").iterdir() if p.is_dir()) == \
        ["broadcast", "mosaic", "mosaic-budgetmix", "warm-start"]
    results = json.loads((study / "budgets" / "results.json").read_text())
    assert set(results["budgets"]["mosaic"]["gain_at"]) == {"4", "8"}  # eval_budgets, and the env's own T
    assert (study / "budgets" / "pass_at_t.png").stat().st_size > 0


def test_run_folders_and_settings():
    runs = run_configs("budgets", "/x", seeds=2)
    assert [(a.name, s) for a, s, _ in runs] == [("mosaic", 0), ("mosaic", 1), ("mosaic-budgetmix", 0),
                                                 ("mosaic-budgetmix", 1)]
    assert runs[0][2].out == "/x/compaction/mosaic/seed0" and runs[2][2].budgets == "4,8,12"
    assert all(c.bc_styles for _, _, c in runs)  # a varied warm start
    # Seed k's arms, of every claim on a preset, take one warm start, computed with the arms' settings but those
    # nothing before RL reads.
    warm = warm_start_configs("compaction", "/x", seeds=2)
    assert [c.out for c in warm] == ["/x/compaction/warm-start/seed0", "/x/compaction/warm-start/seed1"]
    for claim in ("compaction", "budgets", "recovery"):
        for _, seed, config in run_configs(claim, "/x", seeds=2):
            assert config.warm_start_from == warm[seed].out
            assert changed_settings(warm[seed], config, free=WARM_START_FREE) == []
    assert {c.out for _, _, c in run_configs("recovery", "/x")} <= {c.out for _, _, c in run_configs("compaction", "/x")}
    with pytest.raises(ValueError, match="unknown"):
        run_configs("compactions", "/x")
    assert set(CLAIMS) == {"summary", "compaction", "fork", "budgets", "recovery"}


def test_a_summary_cut_short_counts_as_unfinished(tmp_path):
    from algos.study.summary import finished as _finished

    (tmp_path / "summary.json").write_bytes(b'{"success_final": {"succ')
    assert _finished(tmp_path) is None
    (tmp_path / "summary.json").write_bytes(b"\xff\xfe")
    assert _finished(tmp_path) is None
    (tmp_path / "summary.json").write_text('{"iterations": 5}')
    assert _finished(tmp_path) == {"iterations": 5}


def test_interval():
    assert interval([1.0, 1.0]) == {"mean": 1.0, "ci95": 0.0, "n": 2}
    assert interval([None, 0.5]) == {"mean": 0.5, "ci95": None, "n": 1}
    assert interval([]) == {"mean": None, "ci95": None, "n": 0}
    wide, narrow = interval([0.0, 1.0, 0.0, 1.0]), interval([0.0, 1.0] * 8)
    assert wide["mean"] == narrow["mean"] and wide["ci95"] > narrow["ci95"] > 0


@pytest.mark.parametrize("flag, value, hint", [("--seeds", "0", "give 1 or more seeds"), ("--jobs", "0", "give 1 or more"),
                                              ("--iterations", "-1", "give 0 or more"), ("--log-groups", "x", "give 0")])
def test_bad_counts_are_one_usage_line(capsys, flag, value, hint):
    with pytest.raises(SystemExit) as stop:
        main(["study", "compaction", flag, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: '{value}': {hint}" in err and "Traceback" not in err


def test_bad_arguments_are_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["study", "everything"])


def test_summary_quick_reports_the_probe_paired_by_seed(tmp_path, capsys):
    """`mosaic study summary --quick`: both arms from one warm start per seed, the probe measured after the warm
    start and after every update, and the probe's table, verdict and plot."""
    out = tmp_path / "study"
    assert main(["study", "summary", "--quick", "--seeds", "2", "--out", str(out), "--no-progress"]) == 0
    shown = capsys.readouterr().out
    results = json.loads((out / "summary" / "results.json").read_text())
    probe = results["probe"]
    for arm in ("broadcast", "mosaic"):
        a = probe["arms"][arm]
        assert a["seeds"] == [0, 1] and a["updates"] == 1 and len(a["curve"]) == 2
        assert 0 <= a["start"]["mean"] <= 1 and a["updates_to"]["n"] == 2
    # Paired by seed: both arms start RL from seed k's one warm start, so their probes after it are equal.
    for seed in (0, 1):
        starts = {arm: json.loads((out / "summary" / arm / f"seed{seed}" / "summary.json").read_text())
                  ["probe_warm_start"]["probe_summary"] for arm in ("broadcast", "mosaic")}
        assert starts["broadcast"] == starts["mosaic"]
    assert probe["paired"]["seeds"] == [0, 1] and probe["paired"]["auc"]["n"] == 2
    assert (out / "summary" / "probe.png").is_file()
    assert "The probe: P(complete summary)" in shown and "updates to reach 0.9" in shown


@pytest.mark.parametrize("values,expected", [([0.0, 0.0], 0.0), ([0.1], None), ([1.0, 3.0], None)])
def test_the_smallest_detectable_difference_follows_the_t_quantiles(values, expected):
    from algos.study.summary import _T80, _T95, detectable

    got = detectable(values)
    if len(values) < 2:
        assert got is None
    elif expected is not None:
        assert got == expected
    else:  # two values: df 1, (12.706 + 1.376) * sd / sqrt(2)
        sd = float(np.std(values, ddof=1))
        assert got == pytest.approx((_T95[0] + _T80[0]) * sd / np.sqrt(2), abs=1e-3)


def test_updates_to_threshold_counts_a_run_that_never_reaches_it_as_censored():
    from algos.study.summary import updates_to

    assert updates_to([0.95]) == (0, True)
    assert updates_to([0.5, 0.89, 0.9]) == (2, True)
    assert updates_to([0.5, 0.6, 0.7]) == (3, False)
