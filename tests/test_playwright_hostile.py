"""The Playwright backend against hostile pages and a browser that keeps dying.

A corpus of pages that try every way out of the browser (scripts, iframes, images, preconnect, DNS prefetch,
meta refresh, auto-submitted forms, workers, WebSockets, WebRTC, window.open, fetch/XHR/sendBeacon,
EventSource, infinite loops) runs with page scripts off (the default) and on. Its addresses are loopback
listeners of this test, which must accept nothing; Chromium must carry the switch that resolves every host to
nothing; the agent must read the page it asked for (or a note that a navigation was blocked), never a
browser error page; and a page stuck in a script must end its step with an action error within the backend's
timeout, after which the next page works.

Then Chromium is killed (its main process, its renderers, or all of it) at seeded random moments during
resets and steps: every call must return, and the episode go on.

No test here skips: without Chromium (``sudo apt-get install -y chromium``) they fail, naming the fix.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers the environments)
from helpers import SITE_SIZE
from envs.actions import format_action
from envs.playwright_backend import CHROMIUM_ARGS, child_processes
from envs.web.corpus import load_corpus

# Small, so that the looping page costs the test little; the backend's default is much longer.
TIMEOUT_S = 3.0
RESOLVER_RULES = "--host-resolver-rules=MAP * ~NOTFOUND"
# What Chromium shows when a navigation fails (its error page and its error codes), and the tab-crash page.
ERROR_PAGE_MARKS = ("ERR_", "can’t be reached", "can't be reached", "isn’t working", "isn't working",
                    "chrome-error", "Aw, Snap", "This page has been blocked")
BLOCKED_NOTE = "[blocked navigation to "


class Listeners:
    """TCP listeners on two loopback addresses and a UDP socket, recording whatever reaches them."""

    def __init__(self):
        self.accepted: list[tuple] = []
        self.datagrams: list[tuple] = []
        self._sockets: list[socket.socket] = []
        self.tcp = self._listen("127.0.0.1")
        self.tcp2 = self._listen("127.0.0.2")  # another address: a rule for one literal would miss it
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        self._sockets.append(udp)
        self.udp = "127.0.0.1:%d" % udp.getsockname()[1]
        threading.Thread(target=self._receive, args=(udp,), daemon=True).start()

    def _listen(self, host: str) -> str:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((host, 0))
        server.listen(64)
        self._sockets.append(server)
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        return "%s:%d" % (host, server.getsockname()[1])

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return  # closed
            self.accepted.append((server.getsockname(), peer))
            conn.close()

    def _receive(self, udp: socket.socket) -> None:
        while True:
            try:
                _, peer = udp.recvfrom(65536)
            except OSError:
                return
            self.datagrams.append(peer)

    def close(self) -> None:
        for s in self._sockets:
            s.close()


def _page(title: str, body: str = "", head: str = "") -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title>{head}</head>'
            f"<body><h1>{title}</h1><p>The {title.lower()} page text.</p>{body}</body></html>")


def hostile_pages(tcp: str, tcp2: str, udp: str) -> dict[str, str]:
    """File name -> HTML: every page tries to reach ``tcp``/``tcp2`` (and example.com) some way."""
    a, b = f"http://{tcp}", f"http://{tcp2}"
    worker = f"fetch('{a}/worker').catch(() => {{}}); new WebSocket('ws://{tcp}/w');"
    return {
        "index.html": _page("Home", "<a href='/good'>Good</a>"),
        "good.html": _page("Good", "<p>Nothing odd here.</p>"),
        "mode.html": _page("Mode", "<p id='mode'>scripts off</p>"
                                   "<script>document.getElementById('mode').textContent = 'scripts on';</script>"),
        "scripts.html": _page("Scripts", f"""
<img src="{a}/img.png"><img src="{b}/img.png"><img src="http://example.com/x.png">
<iframe src="http://example.com/"></iframe><iframe src="{b}/frame"></iframe>
<a ping="{a}/ping" href="/good">Good</a>
<script src="{a}/lib.js"></script>
<script>
fetch("{a}/fetch").catch(() => {{}});
fetch("{b}/fetch", {{mode: "no-cors", keepalive: true}}).catch(() => {{}});
const xhr = new XMLHttpRequest(); xhr.open("GET", "{a}/xhr"); xhr.send();
navigator.sendBeacon("{a}/beacon", "data");
try {{ new EventSource("{a}/events"); }} catch (e) {{}}
try {{ new WebSocket("ws://{tcp}/ws"); }} catch (e) {{}}
try {{ new WebSocket("ws://{tcp2}/ws"); }} catch (e) {{}}
window.open("{a}/popup");
try {{ new Worker(URL.createObjectURL(new Blob(["{worker}"]))); }} catch (e) {{}}
try {{ new SharedWorker(URL.createObjectURL(new Blob(["fetch('{b}/shared').catch(() => {{}})"]))); }} catch (e) {{}}
try {{ navigator.serviceWorker.register("/sw.js").catch(() => {{}}); }} catch (e) {{}}
try {{
  const pc = new RTCPeerConnection({{iceServers: [{{urls: "stun:{udp}"}},
                                               {{urls: "turn:{tcp}?transport=tcp", username: "u", credential: "c"}}]}});
  pc.createDataChannel("d");
  pc.createOffer().then(offer => pc.setLocalDescription(offer));
}} catch (e) {{}}
</script>"""),
        "preconnect.html": _page("Preconnect", "<a href='/good'>Good</a>", head=f"""
<link rel="preconnect" href="{a}"><link rel="preconnect" href="{b}" crossorigin>
<link rel="dns-prefetch" href="//example.com"><link rel="dns-prefetch" href="//accounts.google.com">
<link rel="prefetch" href="{a}/prefetch"><link rel="preload" as="image" href="{b}/preload.png">
<link rel="stylesheet" href="{a}/style.css">
<script type="speculationrules">{{"prerender": [{{"source": "list", "urls": ["{a}/prerender"]}}],
  "prefetch": [{{"source": "list", "urls": ["{b}/prefetch"]}}]}}</script>"""),
        "refresh.html": _page("Refresh", head=f'<meta http-equiv="refresh" content="0; url={a}/refresh">'),
        "refresh_late.html": _page("Refresh late", head=f'<meta http-equiv="refresh" content="1; url={b}/refresh">'),
        "location.html": _page("Location", f"<script>location.href = '{a}/location';</script>"),
        "location_late.html": _page("Location late",
                                    f"<script>setTimeout(() => location.href = '{b}/late', 50);</script>"),
        "blank.html": _page("Blank", "<script>location.href = 'about:blank';</script>"),
        "blob.html": _page("Blob", "<script>location.href = URL.createObjectURL("
                                   "new Blob(['<title>Elsewhere</title>gone'], {type: 'text/html'}));</script>"),
        "form.html": _page("Form", f"""<form id="f" method="post" action="{a}/submit"><input name="q" value="x"></form>
<script>document.getElementById("f").submit();</script>"""),
        "form_get.html": _page("Form get", f"""<form id="f" action="{b}/submit"><input name="q" value="x"></form>
<script>document.getElementById("f").requestSubmit();</script>"""),
        "loop.html": _page("Loop", "<script>while (true) {}</script>"),
        "loop_late.html": _page("Loop late", "<script>addEventListener('load', () => "
                                             "setTimeout(() => { while (true) {} }, 0));</script>"),
    }


def write_corpus(root: Path, listeners: Listeners) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, html in hostile_pages(listeners.tcp, listeners.tcp2, listeners.udp).items():
        (root / name).write_text(html, encoding="utf-8")
    task = {"id": "hostile-1", "question": "What does the good page say?", "answer": "Nothing odd here"}
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def listeners() -> Iterator[Listeners]:
    found = Listeners()
    yield found
    found.close()


@pytest.fixture(scope="module")
def hostile_corpus(tmp_path_factory, listeners) -> Path:
    return write_corpus(tmp_path_factory.mktemp("hostile"), listeners)


def make_env(corpus: Path, javascript: bool) -> gym.Env:
    # The pages as written (clean=False): a corpus's pages are served cleaned by default (envs/web/clean.py), with
    # nothing left that could run or load; here the browser itself must hold them.
    env = gym.make("mosaic/WebQA-v0", site=load_corpus(corpus, clean=False), split="all", backend="playwright",
                   browser_javascript=javascript, max_steps=200, session_max_tokens=200_000)
    env.unwrapped.backend.timeout_s = TIMEOUT_S
    return env


def shown_page(obs: str) -> str:
    """The last page the agent was shown, from its ``[Page: ...]`` header on."""
    assert "[Page: " in obs
    return "[Page: " + obs.rsplit("[Page: ", 1)[1]


def assert_no_error_page(text: str) -> None:
    marks = [mark for mark in ERROR_PAGE_MARKS if mark in text]
    assert not marks, (marks, text[-2000:])


def chromium_cmdlines() -> tuple[list[str], list[str]]:
    """The command lines of the browser's main processes and of its network services (which resolve names)."""
    processes = child_processes()
    main, network = [], []
    for pid, parent in processes.items():
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            # Helpers rewrite their command line into one space-separated string; the main process does not.
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        if parent not in processes:
            main.append(cmdline)
        elif "NetworkService" in cmdline:
            network.append(cmdline)
    return main, network


def test_listeners_see_a_connection_when_one_is_made(listeners):
    """The control: a connection to either TCP listener, or a datagram to the UDP one, is seen."""
    before = len(listeners.accepted), len(listeners.datagrams)
    for address in (listeners.tcp, listeners.tcp2):
        host, port = address.split(":")
        socket.create_connection((host, int(port)), timeout=5).close()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        host, port = listeners.udp.split(":")
        udp.sendto(b"x", (host, int(port)))
    deadline = time.monotonic() + 5
    while (len(listeners.accepted), len(listeners.datagrams)) < (before[0] + 2, before[1] + 1):
        assert time.monotonic() < deadline, (listeners.accepted, listeners.datagrams)
        time.sleep(0.02)
    del listeners.accepted[before[0]:], listeners.datagrams[before[1]:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("javascript", [False, True], ids=["scripts-off", "scripts-on"])
def test_hostile_pages_reach_nothing_and_show_no_error_page(hostile_corpus, listeners, javascript):
    env = make_env(hostile_corpus, javascript)
    backend = env.unwrapped.backend
    pages = hostile_pages(listeners.tcp, listeners.tcp2, listeners.udp)
    try:
        env.reset(seed=0)
        env.step('open("/good")')
        [main], network = chromium_cmdlines()
        assert network and all(RESOLVER_RULES in cmdline for cmdline in [main, *network]), (main, network)
        assert all(arg in main for arg in CHROMIUM_ARGS), main
        for name in sorted(pages):
            path = "/" + name[: -len(".html")].replace("index", "")
            title = pages[name].split("<title>", 1)[1].split("<", 1)[0]
            obs, reward, terminated, truncated, info = env.step(format_action("open", path))
            assert not truncated and not terminated, (path, info.get("truncation_reason"))
            assert_no_error_page(obs)
            if javascript and name.startswith("loop"):
                if name == "loop.html":
                    assert f"did not finish within {TIMEOUT_S:g} s" in info["action_error"]
                elif info["action_error"] is not None:
                    # Its loop starts as it loads: whether the read beat it is a race, either end is right.
                    assert f"did not finish within {TIMEOUT_S:g} s" in info["action_error"]
                obs, reward, terminated, truncated, info = env.step('open("/good")')
                assert info["action_error"] is None and not truncated
                assert shown_page(obs).startswith("[Page: Good | /good |") and "Nothing odd here." in obs
                continue
            assert info["action_error"] is None, (path, info["action_error"])
            page = shown_page(obs)
            assert page.startswith(f"[Page: {title} | {path} |"), page
            assert f"The {title.lower()} page text." in page, page
            if BLOCKED_NOTE in page:
                assert javascript and name in ("blank.html", "blob.html"), page
        env.step('open("/mode")')
        assert ("scripts on" if javascript else "scripts off") in shown_page(env.unwrapped._observation())
        time.sleep(1.5)  # for anything late: the 1 s refresh, a worker, a prefetch
        assert listeners.accepted == [] and listeners.datagrams == []
        # The pages did try: the refusals were recorded (scripts add their own).
        tried = {url.split("/", 3)[2] for url in backend.blocked_requests if "://" in url}
        assert {listeners.tcp, listeners.tcp2, "example.com"} <= tried, backend.blocked_requests
        if javascript:
            assert f"ws://{listeners.tcp}/ws" in backend.blocked_requests
            assert f"http://{listeners.tcp}/xhr" in backend.blocked_requests
    finally:
        env.close()
    assert listeners.accepted == [] and listeners.datagrams == []


# --- Chromium killed at random moments ------------------------------------------------------------------

KILL_TARGETS = ("main", "renderers", "all")


def kill_chromium(target: str) -> None:
    """SIGKILL this process's Chromium: its main process, its renderers, or every Chromium process."""
    processes = child_processes()
    for pid, parent in processes.items():
        if target == "renderers":
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"--type=renderer" not in f.read():
                        continue
            except OSError:
                continue
        elif target == "main" and parent in processes:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # it ended meanwhile


@contextlib.contextmanager
def killed_at_random(rng: random.Random, longest_delay: float = 0.4) -> Iterator[None]:
    """A timer thread kills Chromium at a random moment from the start of the block on (it may fire after the
    block, for the next call to meet a dead browser). It only sends signals: Playwright stays in this thread."""
    timer = threading.Timer(rng.uniform(0, longest_delay), kill_chromium, args=(rng.choice(KILL_TARGETS),))
    timer.start()
    try:
        yield
    finally:
        timer.join()


def run_kills(env: gym.Env, rng: random.Random, episodes: int) -> tuple[int, int]:
    """Episodes of reset + three steps, each call with a kill at a random moment. Returns (recovered, calls):
    a reset that returns, or a step that returns without truncation or action error, has recovered."""
    calls = recovered = 0
    for episode in range(episodes):
        with killed_at_random(rng):
            env.reset(seed=episode)
        calls, recovered = calls + 1, recovered + 1
        task = env.unwrapped.state.task
        for action in (format_action("search", task.search_queries[0]), "open(1)", 'open("/")'):
            with killed_at_random(rng):
                obs, reward, terminated, truncated, info = env.step(action)
            calls += 1
            assert_no_error_page(obs)
            if truncated:
                assert info["truncation_reason"] == "browser_crashed", info.get("truncation_reason")
                break
            assert info["action_error"] is None, info["action_error"]
            recovered += 1
    return recovered, calls


@pytest.mark.timeout(120)
def test_chromium_killed_at_random_moments_every_reset_and_step_recovers():
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, backend="playwright", max_steps=64)
    # A kill during some Playwright calls (opening a tab) leaves them waiting until the timeout: keep it short.
    env.unwrapped.backend.timeout_s = 3.0
    try:
        recovered, calls = run_kills(env, random.Random(13), episodes=3)
    finally:
        env.close()
    print(f"recovered {recovered} of {calls} calls with Chromium killed at a random moment")
    assert recovered == calls
    assert child_processes() == {}


def test_a_killed_chromium_leaves_no_temporary_files_behind():
    """Chromium keeps its own temporary files (singleton socket and cookie) in a folder of the browser's, which
    goes when the browser is closed or replaced: a Chromium killed mid-way used to leave them in /tmp."""
    from envs import playwright_backend

    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, backend="playwright")
    folders = []
    try:
        env.reset(seed=0)
        folders.append(Path(playwright_backend._shared.tmpdir))
        assert any(folders[0].iterdir()), "Chromium wrote nothing in the browser's temporary folder"
        [main] = [pid for pid, parent in child_processes().items() if parent not in child_processes()]
        os.kill(main, signal.SIGKILL)
        env.reset(seed=1)  # a new browser, in a new folder; the killed one's is gone
        folders.append(Path(playwright_backend._shared.tmpdir))
        assert folders[1] != folders[0] and not folders[0].exists() and folders[1].is_dir()
    finally:
        env.close()
    assert not any(folder.exists() for folder in folders)
