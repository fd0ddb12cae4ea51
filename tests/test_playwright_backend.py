"""The Playwright backend against real Chromium: parity with the text backend, isolation between episodes,
requests outside the site, crashes, process hygiene, and the env's conformance with ``backend="playwright"``.

No test here skips: without Chromium (``sudo apt-get install -y chromium``) they fail, naming the fix.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Iterator

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the environments)
from agents import RandomAgent
from helpers import SITE_SIZE, record_stream
from envs.actions import format_action
from envs.backends import TextBackend
from envs.playwright_backend import (CHROMIUM_ENV, DEFAULT_CHROMIUM, ORIGIN, ChromiumNotFound, PlaywrightBackend,
                                     child_processes)
from envs.web import Document, Site, Task
from envs.web.corpus import load_corpus

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


class ScriptedSite(Site):
    """Pages whose scripts remember visits, build DOM, and reach outside the site."""

    name = "scripted"
    tasks = (Task("scripted-1", "What does the memory page remember?", "nothing"),)
    pages = {
        "/": "<html><head><title>Home</title></head><body><a href='/memory'>Memory</a></body></html>",
        "/memory": """<html><head><title>Memory</title></head><body><p id="out">no script ran</p><script>
            const before = localStorage.getItem("visited") || "nothing";
            const cookie = document.cookie || "none";
            localStorage.setItem("visited", "kept");
            document.cookie = "visited=yes; path=/";
            document.getElementById("out").textContent = "storage: " + before + "; cookie: " + cookie;
            const back = document.createElement("a");
            back.href = location.origin + "/";
            back.textContent = "Home";
            document.body.appendChild(back);
            </script></body></html>""",
        "/late": """<html><head><title>Late</title></head>
            <body onload="document.getElementById('state').textContent = 'after load'">
            <p id="state">before load</p></body></html>""",
        "/redirect": """<html><head><title>Redirect</title></head><body><p>Moving.</p>
            <script>location.replace("/late")</script></body></html>""",
        "/outside": """<html><head><title>Outside</title>
            <script src="https://example.org/lib.js"></script></head><body><p>Reaching out.</p>
            <img src="http://example.com/pixel.png"><script>
            fetch("http://198.51.100.7/api").catch(() => {});
            new WebSocket("ws://example.net/socket");
            </script></body></html>""",
    }

    def documents(self) -> Iterator[Document]:
        return iter(Document(path, path, html) for path, html in self.pages.items())

    def page_html(self, path: str) -> str | None:
        return self.pages.get(path)


@pytest.fixture
def scripted() -> Iterator[PlaywrightBackend]:
    backend = PlaywrightBackend(ScriptedSite(), javascript=True)  # scripts are off by default
    backend.new_episode()
    yield backend
    backend.close()


def make(env_id: str = "mosaic/WebQA-v0", **kwargs) -> gym.Env:
    kwargs.setdefault("site_size", SITE_SIZE)
    return gym.make(env_id, backend="playwright", **kwargs)


def browser_main_pids() -> list[int]:
    """Main processes of the browsers this process runs: their parent is not Chromium (it is the driver)."""
    processes = child_processes()
    return [pid for pid, parent in processes.items() if parent not in processes]


def all_gone(pids) -> bool:
    """Whether none of ``pids`` is still a Chromium process (helpers that outlive the browser are re-parented
    away from this process, so looking at its children alone would miss them)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"chrom" in f.read():
                    return False
        except OSError:
            continue
    return True


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_chromium_is_installed_where_the_backend_looks(monkeypatch):
    monkeypatch.delenv(CHROMIUM_ENV, raising=False)
    assert os.access(DEFAULT_CHROMIUM, os.X_OK), "install Chromium: sudo apt-get install -y chromium"


def test_missing_chromium_fails_naming_the_fix(monkeypatch):
    monkeypatch.setenv(CHROMIUM_ENV, "/nonexistent/chromium")
    with pytest.raises(ChromiumNotFound, match=r"apt-get install -y chromium.*scripts/setup.sh"):
        make()


@pytest.mark.parametrize("site_name", ["builtin", "corpus_html"])
def test_every_kind_of_page_and_search_page_reads_as_in_the_text_backend(small_site, site_name):
    site = small_site if site_name == "builtin" else load_corpus(os.path.join(FIXTURES, site_name))
    urls = [d.path for d in site.documents()]
    urls += [site.search_url(q) for task in site.tasks for q in task.search_queries[:1] or [task.question]]
    assert len(urls) > (250 if site_name == "builtin" else 15)
    # Every kind of page (the site's first path segment, and search pages), up to 24 of each, drawn with a fixed
    # seed: the kinds render from the same templates, and a browser view costs about 85 ms.
    kinds: dict[str, list[str]] = {}
    for url in urls:
        kinds.setdefault(url.split("?")[0].split("/")[1], []).append(url)
    urls = [u for group in kinds.values() for u in random.Random(0).sample(group, min(24, len(group)))]
    backend, text = PlaywrightBackend(site), TextBackend(site)
    try:
        backend.new_episode()
        for url in urls:
            view = backend.view(url)
            assert view == text.view(url), url
            assert not any(link.url.startswith(ORIGIN) for link in view.links), url
        for url in (urls[1] + "#top", urls[1] + "#top"):  # the second is a same-document move in a browser
            assert backend.view(url) == text.view(url)
        assert backend.view("/no/such/page") is None and text.view("/no/such/page") is None
        assert backend.blocked_requests == []
    finally:
        backend.close()


def test_scripts_run_and_storage_does_not_outlive_its_episode(scripted):
    first = scripted.view("/memory")
    assert first.chunks == ("storage: nothing; cookie: none\n[1] Home",)
    # A script's absolute link on the fake origin reads as the site path.
    assert first.links[0].url == "/" and ORIGIN not in "".join(first.chunks)
    assert scripted.view("/memory").chunks[0].startswith("storage: kept; cookie: visited=yes")
    scripted.new_episode()
    assert scripted.view("/memory").chunks == first.chunks


def test_onload_handlers_have_run_and_script_redirects_are_followed(scripted):
    assert scripted.view("/late").chunks == ("after load",)
    for _ in range(3):  # the redirect races the read of the DOM: any order must land on the same page
        view = scripted.view("/redirect")
        assert (view.url, view.title, view.chunks) == ("/redirect", "Late", ("after load",))


def test_requests_outside_the_site_are_refused_and_recorded(scripted):
    assert scripted.view("/outside").chunks == ("Reaching out.",)
    outside = ["https://example.org/lib.js", "http://example.com/pixel.png", "http://198.51.100.7/api",
               "ws://example.net/socket"]
    # The fetch and the socket may start after the load event: give them a moment to arrive.
    assert wait_until(lambda: set(outside) <= set(scripted.blocked_requests), seconds=5), scripted.blocked_requests
    for url in ("file:///etc/passwd", "http://example.com/", "//example.com/x", "wiki/relative"):
        assert scripted.view(url) is None
        assert scripted.blocked_requests[-1] == url


def test_chromium_killed_mid_episode_is_relaunched_and_the_episode_goes_on():
    env, text_env = make(), gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE)
    try:
        env.reset(seed=0)
        text_env.reset(seed=0)
        task = env.unwrapped.state.task
        env.step(format_action("search", task.search_queries[0]))
        text_env.step(format_action("search", task.search_queries[0]))
        [browser] = browser_main_pids()
        os.kill(browser, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step("open(1)")
        assert not truncated and info["action_error"] is None
        assert obs == text_env.step("open(1)")[0]
        assert browser_main_pids() and browser not in browser_main_pids()
        obs, info = env.reset(seed=1)
        assert not env.step(format_action("search", "museum"))[3]
    finally:
        env.close()
        text_env.close()


def test_browser_that_cannot_come_back_truncates_with_browser_crashed():
    env = make()
    try:
        env.reset(seed=0)
        env.step('search("museum")')
        env.unwrapped.backend.executable = "/bin/false"  # any relaunch now fails
        os.kill(browser_main_pids()[0], signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step("open(1)")
        assert truncated and not terminated and info["truncation_reason"] == "browser_crashed"
        assert info["trajectory"]["steps_used"] == 2
    finally:
        env.close()


def test_envs_share_one_browser_and_close_leaves_no_chromium_behind():
    assert child_processes() == {}, "an earlier test left a browser running"
    first, second = make(), make()
    for env in (first, second):
        env.reset(seed=0)
        env.step('search("museum")')
    assert len(browser_main_pids()) == 1
    first.close()
    assert not second.step("open(1)")[3]
    chromium = child_processes()
    second.close()
    assert child_processes() == {}
    assert wait_until(lambda: all_gone(chromium)), [pid for pid in chromium if not all_gone([pid])]


def test_check_env_passes():
    env = make(candidates=True)
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


def test_same_seed_same_rollout_and_same_as_the_text_backend():
    """Two Playwright envs sharing the browser and one text env, identical random candidate actions."""
    streams = []
    for backend in ("playwright", "playwright", "text"):
        env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, backend=backend, candidates=True, max_steps=8)
        agent = RandomAgent(seed=3, compact_prob=0.1, fork_prob=0.1)
        streams.append(record_stream(env, agent, 24))
        env.close()
    assert streams[0] == streams[1] == streams[2]


def test_another_thread_is_told_to_use_processes(scripted):
    errors: list[BaseException] = []
    worker = threading.Thread(target=lambda: _record(errors, lambda: scripted.view("/")))
    worker.start()
    worker.join()
    assert len(errors) == 1 and "vectorization_mode='async'" in str(errors[0])


def _record(errors: list[BaseException], call) -> None:
    try:
        call()
    except BaseException as err:  # the test thread reports what the worker raised
        errors.append(err)


def test_async_vector_env_runs_one_browser_per_worker():
    # Observations travel by pipe: this test is about one browser per worker, not about shared memory.
    vec = gym.make_vec("mosaic/WebQA-v0", num_envs=2, vectorization_mode="async", site_size=SITE_SIZE,
                       backend="playwright", vector_kwargs={"shared_memory": False})
    try:
        obs, info = vec.reset(seed=0)
        obs, reward, terminated, truncated, info = vec.step(['search("museum")', 'search("river")'])
        assert list(info["action_error"]) == [None, None] and all("Search results" in o for o in obs)
        assert len(browser_main_pids()) == 2
        chromium = child_processes()
    finally:
        vec.close()
    assert wait_until(lambda: all_gone(chromium)), [pid for pid in chromium if not all_gone([pid])]
