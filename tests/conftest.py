"""Shared fixtures: one small builtin site per test session (sites are cached per process)."""

from __future__ import annotations

import os

import pytest

from helpers import SITE_SIZE

# Tests run on two cores beside other work: keep torch from oversubscribing them.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")



# The files that take longest (Chromium, Ray, subprocesses, the SmolLM2 conversion: 15-70 s each, measured on 2
# cores), longest first. Each file runs on one worker (`--dist loadfile`), in collection order
# (`--no-loadscope-reorder`), so starting these first leaves the short files to fill both workers at the end.
# Only an order: a file missing here runs after them, as collected.
SLOW_FILES_FIRST = ("test_playwright_backend.py", "test_resume.py", "test_models.py", "test_playwright_hostile.py",
                    "test_pool.py", "test_study.py", "test_train.py", "test_bench_scale.py", "test_vector.py",
                    "test_server_agent.py", "test_bench_iteration.py", "test_bench_server.py", "test_viewer.py",
                    "test_study_fork.py", "test_examples.py", "test_pg.py", "test_generate_mode.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # (stable: the rest keep their order)


@pytest.fixture(scope="session", autouse=True)
def sb3_logs_in_the_tests_temporary_folder(tmp_path_factory):
    """Stable-Baselines3 makes a log folder in /tmp for every ``learn`` unless SB3_LOGDIR names one."""
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3-logs")))


@pytest.fixture(scope="session")
def small_site():
    from envs.web import load_site

    return load_site("builtin", site_seed=0, site_size=SITE_SIZE)


@pytest.fixture(scope="session")
def ray_cluster():
    """One small local Ray cluster for every test that needs one (starting Ray takes seconds), shut down at
    the end of the session; the tests are skipped where Ray is not installed (``pip install 'mosaic-gym[ray]'``)."""
    ray = pytest.importorskip("ray")
    from envs.pool import init_ray

    started = not ray.is_initialized()
    # Ray's memory monitor kills workers when the whole machine runs short, whoever holds the memory: on a
    # machine shared with other work that fails tests that use little. Off for the tests' cluster.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    # Two CPUs whatever the machine: the pool's workers ask for one each, and the tests use two.
    init_ray(num_cpus=2, object_store_memory=100 * 1024 * 1024,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}})
    yield ray
    if started:
        ray.shutdown()
