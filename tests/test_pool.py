"""Env pools: a Ray pool returns exactly the local pool's trajectories (text and Playwright backends), and a
worker killed mid-episode is replaced with its episodes rerun, the results still complete, in order and equal."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the environments)
from agents import OracleAgent
from algos.rollout import Collector, Request
from envs.pool import LocalPool, RayPool

from helpers import SITE_SIZE

ENV_ID = "mosaic/WebQA-v0"


def plain(value):
    """``value`` as nested builtins (dataclasses, objects, arrays and tensors opened up), so that two results
    compare with ``==`` field by field, whichever process built them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {"dict": sorted((repr(k), plain(v)) for k, v in value.items())}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.tolist())
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return (type(value).__name__, plain(vars(value)))
    return value


def kwargs(backend: str) -> dict:
    return {"site_size": SITE_SIZE, "split": "test", "backend": backend, "max_steps": 24}


def requests(count: int) -> list[Request]:
    return [Request(seed=s, options={"max_steps": 24 if s % 2 else 16}, group=s) for s in range(count)]


class Oracle(OracleAgent):
    """The oracle, compacting and forking, with some wrong actions (so every kind of step and snapshot occurs);
    ``before_step`` runs at each batch of actions (the test kills a worker there)."""

    def __init__(self, env, before_step=None):
        super().__init__(env, compact_at=0.4, fork=True, error_rate=0.2, seed=1)
        self.before_step, self.calls = before_step, 0

    def act_batch(self, observations, infos):
        self.calls += 1
        if self.before_step is not None:
            self.before_step(self.calls)
        return super().act_batch(observations, infos)


def run_local(backend: str, reqs: list[Request], num_envs: int):
    make = lambda: gym.make(ENV_ID, **kwargs(backend))  # noqa: E731
    driver_env = make()
    with LocalPool(make, num_envs) as pool:
        trajectories = Collector(None, num_envs, pool=pool).run(Oracle(driver_env), reqs, record_snapshots=True)
    driver_env.close()
    return trajectories


@pytest.mark.parametrize("backend,count,per_worker", [("text", 8, 2), ("playwright", 3, 1)])
def test_ray_pool_equals_local_pool(ray_cluster, backend, count, per_worker):
    num_envs = 2 * per_worker
    reqs = requests(count)
    local = run_local(backend, reqs, num_envs=num_envs)
    driver_env = gym.make(ENV_ID, **kwargs("text"))  # the oracle's copy of the site (the backend is the workers')
    with RayPool(ENV_ID, kwargs(backend), num_envs=num_envs, envs_per_worker=per_worker) as pool:
        assert pool.num_workers == 2
        pids = set(ray_cluster.get([w.pid.remote() for w in pool.workers]))
        remote = Collector(None, num_envs, pool=pool).run(Oracle(driver_env), reqs, record_snapshots=True)
    assert len(pids) == 2 and os.getpid() not in pids  # two worker processes, neither this one
    assert [t.group for t in remote] == [r.group for r in reqs]
    if backend == "text":  # enough episodes that every kind of snapshot is compared
        assert all(any(t.snapshots[kind] for t in local) for kind in ("session_start", "fork_before", "fork_after"))
    assert plain(remote) == plain(local)


def test_killed_worker_is_replaced_and_its_episodes_rerun(ray_cluster, caplog):
    reqs = requests(6)
    local = run_local("text", reqs, num_envs=4)
    driver_env = gym.make(ENV_ID, **kwargs("text"))
    with RayPool(ENV_ID, kwargs("text"), num_envs=4, envs_per_worker=2) as pool:
        victim = ray_cluster.get(pool.workers[1].pid.remote())

        def kill(calls):
            if calls == 4:  # mid-episode: every slot has taken three steps
                os.kill(victim, signal.SIGKILL)

        with caplog.at_level(logging.WARNING, logger="envs.pool"):
            remote = Collector(None, 4, pool=pool).run(Oracle(driver_env, kill), reqs, record_snapshots=True)
        assert pool.restarts == 1
        assert ray_cluster.get(pool.workers[1].pid.remote()) != victim
    assert plain(remote) == plain(local)
    (message,) = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert "env worker 1 died" in message and "slot 2 (seed 2, 3 actions replayed)" in message
    assert "slot 3 (seed 3, 3 actions replayed)" in message


def test_ray_pool_refuses_bad_use(ray_cluster):
    with RayPool(ENV_ID, kwargs("text"), num_envs=2, envs_per_worker=2) as pool:
        with pytest.raises(IndexError, match="slot 5 is not in this pool of 2 envs"):
            pool.reset([5], [0], [{}])
        with pytest.raises(RuntimeError, match="stepped before they were reset"):
            pool.step([0], ['search("x")'])


def test_commands_with_ray_print_what_they_print_without(ray_cluster, capsys, tmp_path):
    from mosaic_gym.cli import main

    outputs = []
    for extra in ([], ["--ray"]):
        assert main(["rollout", "--agent", "oracle", "--site-size", str(SITE_SIZE), "--episodes", "2",
                     "--max-steps", "12", *extra]) == 0
        outputs.append(capsys.readouterr().out)
        out = tmp_path / f"eval{len(extra)}"
        assert main(["eval", "--agent", "oracle", "--error-rate", "0.3", "--site-size", str(SITE_SIZE), "--tasks",
                     "3", "--n", "2", "--ks", "1,2", "--ts", "4,12", "--num-envs", "4", "--no-progress", "--out",
                     str(out), *extra]) == 0
        capsys.readouterr()
        outputs.append(json.loads((out / "passkt.json").read_text())["samples"])
    assert "solved" in outputs[0] and outputs[2] == outputs[0]
    assert len(outputs[1]) == 6 and outputs[3] == outputs[1]


def test_a_corpus_sent_through_the_object_store_gives_the_local_results(ray_cluster):
    from pathlib import Path

    corpus = {"site": str(Path(__file__).parent / "fixtures" / "corpus_html"), "max_steps": 12}
    reqs = [Request(seed=s, options={}, group=s) for s in range(2)]
    make = lambda: gym.make(ENV_ID, **corpus)  # noqa: E731
    driver_env = make()
    local = Collector(make, 2).run(OracleAgent(driver_env), reqs)
    with RayPool(ENV_ID, corpus, num_envs=2, envs_per_worker=2, ship_corpus=True) as pool:
        remote = Collector(None, 2, pool=pool).run(OracleAgent(driver_env), reqs)
    assert plain(remote) == plain(local) and all(t.tree["steps_used"] > 0 for t in local)


_BAR = """
import gymnasium as gym
import envs
from agents import OracleAgent
from algos.rollout import Collector, Request
make = lambda: gym.make("mosaic/WebQA-v0", site_size=%d, hops=1)
Collector(make, 2).run(OracleAgent(make()), [Request(0, None), Request(1, None)], progress="demonstrations")
"""


@pytest.mark.parametrize("disabled", [True, False])
def test_the_collectors_bar_obeys_tqdm_disable(disabled):
    """``--no-progress`` sets TQDM_DISABLE, which study runs and env workers in other processes inherit (tqdm
    reads it when imported): a named bar obeys it."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    if disabled:
        env["TQDM_DISABLE"] = "1"
    child = subprocess.run([sys.executable, "-c", _BAR % SITE_SIZE], env=env, capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert ("demonstrations" in child.stderr) is not disabled


def test_a_worker_removes_the_corpus_copy_it_was_sent_when_it_closes():
    from pathlib import Path

    from envs.pool import EnvWorker, _read_corpus

    site = Path(__file__).parent / "fixtures" / "corpus_jsonl"
    worker = EnvWorker("mosaic/WebQA-v0", {"site": str(site), "split": "all"}, 1, corpus=_read_corpus(str(site)))
    copy = worker._corpus_root
    assert copy is not None and copy.is_dir() and any(copy.rglob("*"))
    worker.reset([(0, 0, {})], snapshots=False)
    worker.close()
    assert not copy.exists()


def _kill_replacements(pool, ray, count: int) -> list[int]:
    """Make the pool's next ``count`` replacement workers die as they start replaying (SIGKILL, as the kernel's
    OOM killer would); returns their pids."""
    start, killed = pool._start_worker, []

    def start_then_kill(worker: int):
        actor = start(worker)
        if len(killed) < count:
            killed.append(ray.get(actor.pid.remote()))
            os.kill(killed[-1], signal.SIGKILL)
        return actor

    pool._start_worker = start_then_kill
    return killed


@pytest.mark.parametrize("max_restarts", [2, 1])
def test_a_replacement_that_dies_while_it_replays_is_replaced_again_up_to_max_restarts(ray_cluster, caplog,
                                                                                      max_restarts):
    from envs.pool import PoolError

    reqs = requests(4)
    local = run_local("text", reqs, num_envs=4)
    driver_env = gym.make(ENV_ID, **kwargs("text"))
    with RayPool(ENV_ID, kwargs("text"), num_envs=4, envs_per_worker=2, max_restarts=max_restarts) as pool:
        victim = ray_cluster.get(pool.workers[1].pid.remote())
        killed = _kill_replacements(pool, ray_cluster, 1)

        def kill(calls):
            if calls == 4:
                os.kill(victim, signal.SIGKILL)

        with caplog.at_level(logging.WARNING, logger="envs.pool"):
            if max_restarts == 1:  # the first replacement died too: the pool gives up, in one line
                with pytest.raises(PoolError) as gave_up:
                    Collector(None, 4, pool=pool).run(Oracle(driver_env, kill), reqs, record_snapshots=True)
                message = str(gave_up.value)
                assert "\n" not in message and message.startswith("env worker 1 failed (died (")
                assert "then its replacement died (" in message and "replaced 1 workers (max_restarts)" in message
                return
            remote = Collector(None, 4, pool=pool).run(Oracle(driver_env, kill), reqs, record_snapshots=True)
        assert pool.restarts == 2 and len(killed) == 1
        assert ray_cluster.get(pool.workers[1].pid.remote()) not in (victim, *killed)
    assert plain(remote) == plain(local)
    messages = [r.getMessage() for r in caplog.records]
    assert any("its replacement died (" in m and "replacing it again" in m for m in messages)
    assert any("env worker 1 died" in m and "slot 2 (seed 2, 3 actions replayed)" in m for m in messages)


def test_a_worker_that_stops_answering_is_replaced_after_the_step_deadline(ray_cluster, caplog):
    reqs = requests(4)
    local = run_local("text", reqs, num_envs=4)
    driver_env = gym.make(ENV_ID, **kwargs("text"))
    with RayPool(ENV_ID, kwargs("text"), num_envs=4, envs_per_worker=2, step_timeout_s=1.0) as pool:
        victim = ray_cluster.get(pool.workers[0].pid.remote())

        def stop(calls):
            if calls == 3:
                os.kill(victim, signal.SIGSTOP)  # alive, holding its envs, answering nothing

        try:
            with caplog.at_level(logging.WARNING, logger="envs.pool"):
                remote = Collector(None, 4, pool=pool).run(Oracle(driver_env, stop), reqs, record_snapshots=True)
            assert pool.restarts == 1
            assert ray_cluster.get(pool.workers[0].pid.remote()) != victim
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
    assert plain(remote) == plain(local)
    (message,) = [r.getMessage() for r in caplog.records if "replaced it" in r.getMessage()]
    assert message.startswith("env worker 0 stopped answering (no answer within 1 s)")
    assert "slot 0 (seed 0, 2 actions replayed)" in message


@pytest.mark.parametrize("setting", [{"step_timeout_s": 0}, {"step_timeout_s": -1.0}, {"start_timeout_s": 0.0},
                                     {"step_timeout_s": float("nan")}])
def test_a_deadline_that_is_not_positive_is_refused(ray_cluster, setting):
    with pytest.raises(ValueError, match="must be positive"):
        RayPool(ENV_ID, kwargs("text"), num_envs=1, envs_per_worker=1, **setting)
