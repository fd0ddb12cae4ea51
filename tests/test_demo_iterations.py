"""scripts/demo_iterations.py: seeds extended stage by stage by resume, results paired by seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import load_module

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "demo_iterations.py"


@pytest.fixture(scope="module")
def script():
    return load_module(SCRIPT, "demo_iterations")


@pytest.fixture(scope="module")
def study(script, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-it")
    script.main(["--quick", "--seeds", "2", "--stages", "1,2", "--jobs", "2", "--out", str(out)])
    return out


def test_each_stage_is_a_resume_of_the_last_and_the_results_read_its_summaries(study):
    results = json.loads((study / "results.json").read_text())
    assert [r["iterations"] for r in results["rows"]] == [1, 2]
    for seed in (0, 1):
        folder = study / f"seed{seed}"
        history = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert [m["iteration"] for m in history] == [0, 1]  # one run, extended: not two runs
        warm = None
        for row in results["rows"]:
            summary = json.loads((folder / f"summary_it{row['iterations']}.json").read_text())
            assert summary["iterations"] == row["iterations"]
            assert row["per_seed"][str(seed)] == round(summary["success_final"]["success"], 4)
            # Every stage is evaluated against the same warm-start evaluation (the same held-out episodes).
            warm = warm or summary["success_warm_start"]
            assert summary["success_warm_start"] == warm
        assert results["warm_start_per_seed"][str(seed)] == round(warm["success"], 4)
    first, second = results["rows"]
    diffs = [second["per_seed"][s] - first["per_seed"][s] for s in ("0", "1")]
    assert second["minus_1_iterations"]["mean"] == pytest.approx(sum(diffs) / 2, abs=1e-3)
    assert (study / "iterations.png").stat().st_size > 0
    assert "| 2 | 2 |" in (study / "results.md").read_text()


def test_a_second_call_runs_nothing_kept(script, study):
    kept = {p: p.stat().st_mtime_ns for p in study.glob("seed*/summary_it*.json")}
    logs = {p: p.read_text() for p in study.glob("seed*.log")}
    script.main(["--quick", "--seeds", "2", "--stages", "1,2", "--out", str(study)])
    assert {p: p.stat().st_mtime_ns for p in study.glob("seed*/summary_it*.json")} == kept
    assert {p: p.read_text() for p in study.glob("seed*.log")} == logs


@pytest.mark.parametrize("stages", ["20,10", "0,10", "10,10", "x"])
def test_bad_stages_are_refused_by_name(script, tmp_path, stages, capsys):
    with pytest.raises(SystemExit):
        script.main(["--stages", stages, "--out", str(tmp_path)])
    assert "--stages" in capsys.readouterr().err


def test_a_damaged_kept_stage_is_named_not_a_traceback(script, study, tmp_path):
    copy = tmp_path / "study"
    import shutil
    shutil.copytree(study, copy)
    (copy / "seed1" / "summary_it2.json").write_text('{"iterations": 2, "success_fi')  # cut short
    with pytest.raises(SystemExit, match=r"seed1/summary_it2.json is damaged .*delete it"):
        script.main(["--seeds", "2", "--stages", "1,2", "--out", str(copy), "--summary-only"])
