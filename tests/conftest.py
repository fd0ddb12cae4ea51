"""Shared fixtures: one small builtin site per test session (sites are cached per process)."""

from __future__ import annotations

import os

import pytest

# Tests run on two cores beside other work: keep torch from oversubscribing them.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SITE_SIZE = 150


@pytest.fixture(scope="session")
def small_site():
    from envs.web import load_site

    return load_site("builtin", site_seed=0, site_size=SITE_SIZE)
