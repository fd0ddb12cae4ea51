"""``algos.learn.train``: a tiny run of each algorithm writes its artifacts; an iteration with Mosaic's rollout
estimator branches from session boundaries; a run killed (even mid-save) or extended resumes to exactly the
parameters of an uninterrupted run; checkpoints are written atomically."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import matplotlib.image
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import algos.learn.train
from agents.llm import LLMAgent
from agents.models import build_tiny_model, train_tokenizer
from algos.learn.checkpoint import load_checkpoint, save_checkpoint
from algos.learn.config import PGConfig, TrainConfig
from algos.learn.pg import PolicyGradient
from algos.rollout import Collector, Request
from helpers import SITE_SIZE, TEST_MODEL

# Tiny everything: one-hop tasks, short page chunks and windows (short contexts, and compactions mid-episode,
# so Mosaic's rollout estimator branches continuations), a few demonstrations, tiny groups.
ENV = {"site_size": SITE_SIZE, "hops": 1, "max_steps": 6, "candidates": True, "chunk_tokens": 96,
       "session_max_tokens": 500}


def _config(out: Path, algo: str, iterations: int, **changes) -> TrainConfig:
    config = TrainConfig(algo=algo, env_kwargs=dict(ENV), model=TEST_MODEL, bc_episodes=4, bc_epochs=1,
                         bc_compact_at=None, iterations=iterations, tasks_per_iter=2, group_size=2, continuations=1,
                         eval_episodes=1, eval_tasks=3, eval_initial=True, num_envs=4, seed=3, out=str(out),
                         pg=PGConfig(lr=1e-2, kl_coef=0.05),
                         # Untrained policies fail every task (zero reward advantages); the likelihood estimator
                         # still gives sessions distinct advantages, so RL moves the parameters.
                         estimator="likelihood")
    return dataclasses.replace(config, **changes)


def _quiet(*args) -> None:
    pass


def _metrics(out: Path) -> list[dict]:
    """Each iteration's metrics without its phase timings and peak memory (what two equal runs do not share)."""
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not k.startswith(("time_", "memory_"))} for line in lines]


def _parameters(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)["model"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def broadcast_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("broadcast")
    (out / "metrics.jsonl").write_text('{"iteration": 0, "from": "an older run in this folder"}\n' * 3)
    algos.learn.train.train(_config(out, "broadcast", iterations=2), log=_quiet)
    return out


@pytest.fixture(scope="module")
def mosaic_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mosaic")
    algos.learn.train.train(_config(out, "mosaic", iterations=2), log=_quiet)
    return out


@pytest.mark.parametrize("run", ["broadcast_run", "mosaic_run"])
def test_a_tiny_run_writes_metrics_summary_plot_and_checkpoint(request, run):
    out: Path = request.getfixturevalue(run)
    iterations = 2
    metrics = _metrics(out)
    # One line per iteration of this run: nothing left over from an earlier run in the same folder.
    assert [m["iteration"] for m in metrics] == list(range(iterations))
    for m in metrics:
        assert 0.0 <= m["success"] <= 1.0 and m["sessions"] >= 1.0 and m["tokens"] > 0
    # Each iteration's phases are timed within its total; Mosaic's likelihood estimator scores, nothing continues.
    for line in (out / "metrics.jsonl").read_text().splitlines():
        times = {k: v for k, v in json.loads(line).items() if k.startswith("time_")}
        assert times["time_total"] >= times["time_rollouts"] + times["time_update"] + times["time_scoring"]
        assert times["time_rollouts"] > 0 and times["time_update"] > 0 and times["time_continuations"] == 0
        assert (times["time_scoring"] > 0) == (run == "mosaic_run")
    peaks = [m["memory_peak_mib"] for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]
    assert 0 < peaks[0] <= peaks[-1]  # the process's peak so far: it never falls
    summary = json.loads((out / "summary.json").read_text())
    for key in ("success_initial", "success_warm_start", "success_final"):
        assert 0.0 <= summary[key]["success"] <= 1.0 and summary[key]["episodes"] > 0
    assert summary["iterations"] == iterations
    # The gain is paired task by task, over every test task (each run eval_episodes times).
    before, after = summary["success_warm_start"], summary["success_final"]
    assert set(before["per_task"]) == set(after["per_task"])
    assert len(after["per_task"]) == 3  # eval_tasks: the first 3 test tasks, not all of them
    assert sum(before["per_task"].values()) / len(before["per_task"]) == pytest.approx(before["success"])
    assert summary["rl_gain"] == pytest.approx(after["success"] - before["success"])
    image = matplotlib.image.imread(out / "training.png")
    assert (out / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.shape[0] > 100
    payload = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert payload["step"] == iterations and payload["extra"]["state"]["phase"] == "rl"
    assert len(payload["extra"]["state"]["history"]) == iterations
    assert (out / "final" / "config.json").is_file()


def test_an_iteration_with_the_rollout_estimator_branches_from_session_boundaries(tmp_path):
    config = _config(tmp_path, "mosaic", iterations=1, estimator="rollout", continuations=2)
    make_env = lambda: gym.make(config.env_id, **config.env_kwargs)  # noqa: E731
    env = make_env()
    tokenizer = train_tokenizer([d.text for d in env.unwrapped.site.documents()], vocab_size=800)
    agent = LLMAgent(build_tiny_model(tokenizer, TEST_MODEL.removeprefix("tiny-")), tokenizer, mode="choose", seed=0)
    branched: list[Request] = []
    real_run = Collector.run

    def counting_run(self, agent, requests, **kwargs):
        branched.extend(r for r in requests if "snapshot" in r.options)
        return real_run(self, agent, requests, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Collector, "run", counting_run)
        metrics = algos.learn.train.rl_iteration(config, 0, agent, PolicyGradient(agent.model, config.pg),
                                           Collector(make_env, 4), env, algos.learn.train.budget_sampler(config),
                                           np.random.default_rng(0))
    # The settings compact mid-episode, so there are boundaries to branch from, M continuations each.
    assert branched and len(branched) % config.continuations == 0
    assert metrics["sessions"] > 1.0 and metrics["tokens"] > 0
    assert all(np.isfinite(v) for v in metrics.values())


class _Crash(Exception):
    """Stands for the process being killed."""


def test_killed_mid_save_then_extended_runs_resume_to_the_uninterrupted_parameters(mosaic_run, tmp_path,
                                                                                   monkeypatch):
    out = tmp_path / "interrupted"
    # 1. A finished run with the warm start only (its final evaluation samples too) ...
    algos.learn.train.train(_config(out, "mosaic", iterations=0), log=_quiet)
    warm = torch.load(out / "checkpoint.pt", weights_only=False)
    initial = AutoModelForCausalLM.from_pretrained(out / "model").state_dict()
    # (the KL's reference is the warm-started policy, not the random initial model)
    assert all(torch.equal(warm["extra"]["ref_model"][k], v) for k, v in warm["model"].items())
    assert any(not torch.equal(initial[k], v) for k, v in warm["model"].items())
    # 2. ... extended to 2 iterations with resume, killed while writing the checkpoint after the second: its
    #    metrics line is written, its checkpoint is not (half a file, then the kill) ...
    real_save, calls = torch.save, []

    def save_then_die(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            f.write(b"\x80\x02half a checkpoint")
            raise _Crash
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save_then_die)
    with pytest.raises(_Crash):
        algos.learn.train.train(_config(out, "mosaic", iterations=2, resume=True), log=_quiet)
    monkeypatch.setattr(torch, "save", real_save)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 1  # the last good checkpoint
    assert len(_metrics(out)) == 2
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []
    # 3. ... and resumed again to the end.
    summary = algos.learn.train.train(_config(out, "mosaic", iterations=2, resume=True), log=_quiet)

    expected, got = _parameters(mosaic_run), _parameters(out)
    assert any(not torch.equal(warm["model"][k], v) for k, v in got.items())  # RL did change the policy
    different = [k for k in expected if not torch.equal(expected[k], got[k])]
    assert not different, f"resumed parameters differ from the uninterrupted run's in {different[:3]}"
    assert _metrics(out) == _metrics(mosaic_run)
    uninterrupted = json.loads((mosaic_run / "summary.json").read_text())
    assert summary["success_final"] == uninterrupted["success_final"]


def test_configs_sharing_learner_settings_keep_their_own_algorithm():
    shared = PGConfig(lr=1e-3)
    broadcast = TrainConfig(algo="broadcast", pg=shared)
    mosaic = TrainConfig(algo="mosaic", pg=shared)
    assert (broadcast.pg.advantage, mosaic.pg.advantage) == ("broadcast", "mosaic")
    assert dataclasses.replace(broadcast, algo="mosaic").pg.advantage == "mosaic"
    assert broadcast.pg.advantage == "broadcast" and broadcast.pg.lr == 1e-3


def test_checkpoint_survives_a_crash_while_it_is_being_replaced(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model, optimizer, step=1, extra={"note": "good"})
    good = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)

    def partial_save(obj, f, *args, **kwargs):
        f.write(b"\x80\x02PK half written")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", partial_save)
    with pytest.raises(OSError):
        save_checkpoint(path, model, optimizer, step=2)
    monkeypatch.undo()
    fresh = torch.nn.Linear(3, 2)
    payload = load_checkpoint(path, fresh, torch.optim.AdamW(fresh.parameters()))
    assert payload["step"] == 1 and payload["extra"] == {"note": "good"}
    assert all(torch.equal(fresh.state_dict()[k], good[k]) for k in good)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temporary file left behind


def test_train_command_without_arguments_is_the_embedded_default():
    from mosaic_gym.cli import build_parser
    from mosaic_gym.commands.train import config_from_args

    config = config_from_args(build_parser().parse_args(["train"]))
    default = TrainConfig()
    assert {k: v for k, v in config.env_kwargs.items() if k != "site_seed"} == default.env_kwargs
    for name in ("algo", "model", "mode", "bc_episodes", "bc_epochs", "bc_compact_at", "iterations", "tasks_per_iter",
                 "group_size", "estimator", "continuations", "root_start", "eval_episodes", "num_envs",
                 "seed"):
        assert getattr(config, name) == getattr(default, name), name
    assert config.pg == default.pg
    shared = config_from_args(build_parser().parse_args(["train", "--root-start", "group_rollout"]))
    assert shared.root_start == "group_rollout"
    with pytest.raises(ValueError, match="root_start='group': use 'rollout' or 'group_rollout'"):
        TrainConfig(root_start="group")


@pytest.mark.parametrize("run", ["broadcast_run", "mosaic_run"])
def test_a_run_logs_its_sampled_groups_with_each_sessions_credit(request, run):
    from algos import logs

    out: Path = request.getfixturevalue(run)
    config = _config(out, "broadcast" if run == "broadcast_run" else "mosaic", iterations=2)
    paths = logs.find_logs(out)
    assert [p.name for p in paths] == [f"iteration-{it:04d}{logs.SUFFIX}" for it in range(2)]
    for it, path in enumerate(paths):
        records = list(logs.read(path))
        assert len(records) == min(config.log_groups, config.tasks_per_iter) * config.group_size
        for r in records:
            assert (r["source"], r["iteration"], r["credit"]) == ("train", it, config.algo)
            assert len(r["steps"]) == r["steps_used"]
            for s in r["sessions"]:
                # The run's own credit is its column; the other is computed beside it; D only where estimated.
                assert s["credit_advantage"] == pytest.approx(s[f"credit_{config.algo}"])
                assert (s["credit_contribution"] is None) == (config.algo == "broadcast")
        # Broadcast gives every session of a trajectory the same advantage, z-scored over the group's rewards.
        for g in {r["group"] for r in records}:
            group = [r for r in records if r["group"] == g]
            rewards = np.array([r["reward"] for r in group])
            z = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
            for r, expected in zip(group, z):
                assert [s["credit_broadcast"] for s in r["sessions"]] == pytest.approx([expected] * len(r["sessions"]))
    # A Mosaic run's summary says where its credit departed from broadcast's, over these logged groups.
    summary = json.loads((out / "summary.json").read_text())
    if run == "broadcast_run":
        assert "credit_vs_broadcast" not in summary
    else:
        credit = summary["credit_vs_broadcast"]
        assert credit["groups"]["n"] == 2 * min(config.log_groups, config.tasks_per_iter)
        assert sum(credit["groups"][k]["share"] for k in ("all_success", "mixed", "all_failure")) == pytest.approx(1)


def test_eval_tasks_below_one_is_refused_naming_it():
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match=f"eval_tasks={bad!r}: give how many test tasks"):
            TrainConfig(eval_tasks=bad)
    assert TrainConfig(eval_tasks=2).eval_tasks == 2 and TrainConfig().eval_tasks is None
