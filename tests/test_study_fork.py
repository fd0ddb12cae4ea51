"""``mosaic study fork --quick`` end to end, and a committed study (no checkpoints) resumed: its own file, so
that it can run beside the compaction study of tests/test_study.py on the other test worker."""

from __future__ import annotations

import json
import shutil

from mosaic_gym.cli import main


def test_fork_quick(tmp_path, capsys):
    assert main(["study", "fork", "--quick", "--seeds", "1", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "fork" / "results.json").read_text())
    assert results["finished"] == {"broadcast": [0], "mosaic": [0]}
    assert results["paired"]["success"]["ci95"] is None  # one seed: no interval, and the verdict says so
    assert "too few seeds" in results["verdict"][0]
    # Committed results hold no checkpoints: an unfinished arm there computes its seed's warm start again, and
    # ends where it would have.
    runs = tmp_path / "fork"
    summary = json.loads((runs / "mosaic" / "seed0" / "summary.json").read_text())
    for path in [runs / "warm-start" / "seed0" / "checkpoint.pt", *(runs / "mosaic" / "seed0").iterdir()]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    capsys.readouterr()
    assert main(["study", "fork", "--quick", "--seeds", "1", "--out", str(tmp_path)]) == 0
    assert "warm start seed 0: computing it again" in capsys.readouterr().out
    again = json.loads((runs / "mosaic" / "seed0" / "summary.json").read_text())
    assert again["success_final"] == summary["success_final"]
