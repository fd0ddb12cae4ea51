"""``mosaic bench``'s RL-iteration benchmark at smoke size: three algorithms over the same episodes, and the
memory run of ``mosaic train`` beside a bare process.

Speeds depend on the machine, so nothing here asserts one (tests/test_bench.py checks the suite's report).
"""

from __future__ import annotations

from helpers import bench_smoke


def test_iteration_bench_runs_every_algorithm_on_the_same_episodes(tmp_path, capfd):
    iteration = bench_smoke(tmp_path, ("iteration",))["benchmarks"]["iteration"]
    err = capfd.readouterr().err  # (--no-progress: the benchmark's own bars are hidden too)
    assert "warm start" not in err and "rollouts" not in err
    assert iteration["same_trajectories"], iteration["rows"]  # the three rows ran the same episodes
    assert iteration["rows"]["broadcast"]["continuations_s"] == iteration["rows"]["broadcast"]["scoring_s"] == 0
    assert iteration["rows"]["mosaic-rollout"]["continuations_s"] > 0 < iteration["rows"]["mosaic-likelihood"]["scoring_s"]
    fork = iteration["fork"]  # the study's fork preset (its quick settings here): broadcast and Mosaic
    assert fork["config"]["env_id"] == "mosaic/WebQA-Fork-v0" and fork["same_trajectories"], fork["rows"]
    assert fork["rows"]["fork-broadcast"]["continuations_s"] == 0 < fork["rows"]["fork-mosaic"]["continuations_s"]
    presets = iteration["presets"]  # the study's other presets: summary (the learner's defaults), compaction
    assert presets["summary"]["config"]["learner"]["epochs"] == 2 == presets["summary"]["config"]["learner"]["minibatches"]
    for block in [fork, *presets.values()]:
        assert block["same_trajectories"], block["rows"]
        for row in block["rows"].values():
            assert row["iterations_per_hour"] == round(3600 / row["total_s"], 1)
    memory = iteration["memory"]
    # (at smoke size a run's peak can be the bare process's own, reached while both load the same libraries)
    assert memory["peak_rss_mb"] >= memory["bare_peak_rss_mb"] > 0
