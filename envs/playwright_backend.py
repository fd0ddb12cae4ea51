"""Real Chromium over the same site: :class:`PlaywrightBackend`, the ``backend="playwright"`` of the env.

The site never touches a network. Chromium (Debian's, at ``/usr/bin/chromium``; ``MOSAIC_CHROMIUM``
overrides the path) browses a fixed fake origin, :data:`ORIGIN`, and every request it makes is intercepted in
this process: requests to the origin are answered from ``site.render(path_with_query)`` (a 404 page when the
site has no such page); requests anywhere else, WebSockets included, are refused and recorded in
``backend.blocked_requests``. ``view(url)`` navigates to ``ORIGIN + url``, waits for the document's ``load``
event (so its scripts, if on, ``onload`` handlers included, have run), serialises the live DOM
(``document.documentElement.outerHTML``) and converts it with the one converter both backends share,
:func:`envs.web.browser.html_to_view`, with the url as the text backend sees it.

Parity with the text backend: for pages whose scripts do not change the DOM (every builtin page) the views
are equal, field for field; ``tests/test_playwright_backend.py`` checks every page of a builtin site and
its search pages. Differences come only from what a browser does and lxml does not: the DOM a script builds
is what this backend shows, and a link a script writes as an absolute URL on :data:`ORIGIN` reads as the
site path it points to.

Processes and threads: one Chromium per process, started on first use, is shared by that process's
backends; each episode (``new_episode()``, called at every reset) gets a fresh browser context, so no
cookie or storage outlives its episode. The browser closes with the last backend, or at exit. Playwright's
sync objects belong to the thread that started them: use one process per worker, e.g.
``gym.make_vec(id, n, vectorization_mode="async", backend="playwright")``, never threads.

Isolation: Chromium reaches nothing outside this process. Besides interception, every host name resolves to
nothing (``--host-resolver-rules``, IP literals included), so what interception never sees
(``<link rel=preconnect>``, DNS prefetch, WebRTC, Chromium's own calls home) opens no socket, and Chromium's
background services are off. Page scripts are off unless ``javascript=True`` (the env's
``browser_javascript=True``); with them on, each view opens its page in a fresh tab and closes it once read,
so that a page's scripts end with its step. A navigation away from the site (a meta refresh, a script, a
submitted form) is refused and leaves the page where it was; a page that still gets away (to ``about:blank``,
say) is shown as the site serves it, without its scripts, under a note ``[blocked navigation to ...]``. Never
a browser error page.

Time: every call into the browser is bounded. A page may keep the browser busy for
:attr:`PlaywrightBackend.timeout_s` (:data:`TIMEOUT_S` unless set; Chromium's start is not counted). Past it
the browser is killed and the view raises :class:`~envs.backends.BrowserTimeout`, an action error: the env
shows it to the agent, the episode goes on, and the next view starts a fresh browser.

Faults: if Chromium (or any of its processes) dies, whether between calls or during one, the call starts it
again in a fresh context and tries again, twice at most, each try with its own ``timeout_s`` (and
:data:`GRACE_S` more for a Playwright call that outlives its browser: then Playwright's driver is restarted
too). ``new_episode`` never raises for the browser's sake; a ``view`` whose tries all fail raises
:class:`~envs.backends.BrowserCrashed`, which the env turns into truncation with reason ``"browser_crashed"``.

Example:
    >>> from envs.web import load_site
    >>> backend = PlaywrightBackend(load_site("builtin", site_size=120))
    >>> backend.new_episode()
    >>> backend.view("/").url
    '/'
    >>> backend.close()
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Iterator

from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Route, WebSocketRoute, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from .backends import Backend, BrowserCrashed, BrowserTimeout
from .web.browser import CHUNK_TOKENS, PageView, html_to_view
from .web.site import Site

# A reserved name (RFC 6761): even a request that slipped past interception could not reach a real host.
ORIGIN = "http://mosaic.test"
CHROMIUM_ENV = "MOSAIC_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Every host name, IP literals included, resolves to nothing: the only way a socket could open is through
    # the network stack, and interception answers the site's requests before they reach it. This also stops
    # what interception never sees: <link rel=preconnect>, DNS prefetch, and Chromium's own calls home.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    # WebRTC opens sockets of its own, which interception never sees: no UDP at all (STUN to an IP literal
    # needs no resolver), and its TCP only through a proxy, of which there is none.
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    # Nothing to fetch for Chromium itself: no updates, sync, hyperlink-auditing pings, error reports, or the
    # Google account and API endpoints the Debian build has keys for.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-pings",
    "--disable-domain-reliability",
    "--gaia-url=" + ORIGIN,
    "--google-apis-url=" + ORIGIN,
)
# Playwright's own switches are kept (its --disable-features list among them, which a second such switch would
# replace) except this one: with the popup blocker on, a page cannot open windows, as no user ever clicks.
CHROMIUM_DEFAULT_ARGS_DROPPED = ("--disable-popup-blocking",)
# How long one page (or one new episode) may keep the browser busy: generous for one page of a local site
# even on a loaded machine; a page that takes longer is stuck, e.g. in a script that never ends.
TIMEOUT_S = 10.0
# Starting Chromium is not the page's doing and takes seconds on a loaded machine: it has its own bound, which
# Playwright enforces itself (it kills the process it started), and does not count against TIMEOUT_S.
LAUNCH_TIMEOUT_S = 60.0
# How long a call may outlive its killed browser before Playwright's driver is killed too (see _Deadline): the
# call normally fails within milliseconds of the kill.
GRACE_S = 1.0
# Tries of one view before the episode is given up as "browser_crashed". One retry covers a browser that died
# since the last call; a second covers its dying again during that retry (two faults in one call: a browser
# that died between calls, then again while the call started it anew).
VIEW_ATTEMPTS = 3
_NOT_FOUND = ('<!DOCTYPE html><html><head><meta charset="utf-8"><title>Not found</title></head>'
              "<body><h1>Not found</h1><p>There is no page at this address.</p></body></html>")
_HTML = "text/html; charset=utf-8"
_ANY_URL = re.compile(".*")
# The live DOM as HTML once the document has loaded: what ``page.content()`` returns after ``goto(url,
# wait_until="load")``, less the doctype (which the converter ignores). Waiting inside the page saves a round
# trip through Playwright's driver, and ``content()`` builds an isolated JS world for each new document: this
# is about a third faster per page.
_DOM_AFTER_LOAD = """() => new Promise(done => {
    const serialize = () => done(document.documentElement.outerHTML);
    if (document.readyState === "complete") serialize();
    else addEventListener("load", serialize, {once: true});
})"""
# With scripts off, Chromium runs no event listener, the one above included: Playwright waits for the load
# event instead (it watches the page from outside), then this reads the DOM.
_DOM_NOW = "() => document.documentElement.outerHTML"
# Where a page that left the site is shown (see PlaywrightBackend._left_site).
_BLOCKED_NOTE = "[blocked navigation to {}: the page tried to leave the site; shown as served, without scripts]"

log = logging.getLogger(__name__)


class ChromiumNotFound(FileNotFoundError):
    """No Chromium executable where the backend looks; the message names the fix."""


def chromium_path() -> str:
    """The Chromium executable to launch: ``$MOSAIC_CHROMIUM`` if set, else ``/usr/bin/chromium``.

    Raises:
        ChromiumNotFound: when that file is missing or not executable.

    Example:
        >>> chromium_path()
        '/usr/bin/chromium'
    """
    configured = os.environ.get(CHROMIUM_ENV) or DEFAULT_CHROMIUM
    found = shutil.which(configured)
    if found is None:
        raise ChromiumNotFound(
            f"no Chromium executable at {configured!r} (backend='playwright' needs one). Install Debian's: "
            f"`sudo apt-get install -y chromium` (or run `bash scripts/setup.sh`), or point {CHROMIUM_ENV} at "
            "a Chromium binary. `playwright install` is not needed."
        )
    return found


@dataclass
class _SharedBrowser:
    """The process's one Chromium and who may use it."""

    playwright: Playwright | None = None
    browser: Browser | None = None
    pid: int = 0
    thread: int = 0
    users: int = 0
    driver_pid: int = 0  # Playwright's driver process (0: none, or not found)
    tmpdir: str | None = None  # the browser's TMPDIR, removed with it (a killed Chromium leaves its files there)
    # Changes with every launch and close (and fork), so a backend can tell its context belongs to a browser
    # gone by.
    generation: int = 0


_shared = _SharedBrowser()


def _adopt() -> _SharedBrowser:
    """The shared state of this process, checked for the thread that may use it."""
    if _shared.pid != os.getpid():
        # A forked child inherits the parent's objects but not its Playwright connection: start over here,
        # leaving the parent's browser to the parent.
        generation = _shared.generation + 1
        for f in dataclasses.fields(_SharedBrowser):
            setattr(_shared, f.name, f.default)
        _shared.pid, _shared.thread, _shared.generation = os.getpid(), threading.get_ident(), generation
    elif _shared.thread != threading.get_ident():
        raise RuntimeError(
            "Playwright's sync objects belong to the thread that started them, and this process's browser "
            "was started in another thread. Vectorise with processes instead: "
            "gym.make_vec(..., vectorization_mode='async')."
        )
    return _shared


def shared_playwright() -> Playwright:
    """This process's Playwright, started now if there is none or its driver died: the one the backend's
    browser runs on. A second ``sync_playwright()`` in the same thread fails ("Sync API inside the asyncio
    loop"), so other code of this process that needs a browser of its own launches it from here (and closes
    it; Playwright itself stops at exit)."""
    shared = _adopt()
    if shared.playwright is not None and not _alive(shared.driver_pid):
        _forget_playwright()
    if shared.playwright is None:
        before = _drivers()
        shared.playwright = sync_playwright().start()
        started = _drivers() - before
        shared.driver_pid = started.pop() if len(started) == 1 else 0
    return shared.playwright


def _browser(executable: str) -> Browser:
    """The shared browser, launched now if there is none or it died (with Playwright's driver, if that died)."""
    shared = _adopt()
    if shared.browser is not None and shared.browser.is_connected() and _alive(shared.driver_pid):
        return shared.browser
    _close_browser()
    playwright = shared_playwright()
    # Chromium's own temporary files (its singleton socket and cookie) in a folder of this browser's, removed
    # when the browser is closed or replaced: a Chromium killed mid-way cannot remove them itself.
    shared.tmpdir = tempfile.mkdtemp(prefix="mosaic-chromium-")
    try:
        with _Deadline.paused():
            shared.browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=list(CHROMIUM_ARGS),
                ignore_default_args=list(CHROMIUM_DEFAULT_ARGS_DROPPED), timeout=LAUNCH_TIMEOUT_S * 1000,
                env={**os.environ, "TMPDIR": shared.tmpdir},
            )
    except PlaywrightError as err:
        raise BrowserCrashed(
            f"Chromium at {executable} did not start: {err}. Check that `{executable} --headless --no-sandbox "
            "--dump-dom about:blank` works; reinstall with `sudo apt-get install -y chromium`."
        ) from err
    shared.generation += 1
    return shared.browser


def _close_browser() -> None:
    """Close the shared browser (if any) and forget it; every backend's context goes with it."""
    browser, _shared.browser = _shared.browser, None
    if browser is not None:
        _shared.generation += 1  # so that no backend tries its old context (or page) first
        try:
            browser.close()
        except PlaywrightError:
            pass  # already gone: a crashed browser has nothing left to close
    tmpdir, _shared.tmpdir = _shared.tmpdir, None
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _forget_playwright() -> None:
    """Stop Playwright (its driver died or was killed) so that the next browser comes with a new driver."""
    playwright, _shared.playwright, _shared.driver_pid = _shared.playwright, None, 0
    if playwright is not None:
        try:
            playwright.stop()
        except Exception as err:  # a dead driver may fail in any way; there is nothing left to stop
            log.debug("stopping a dead Playwright driver: %s", err)


def _shutdown() -> None:
    """Close the browser and stop Playwright, if this process started them."""
    if _shared.pid != os.getpid():
        return
    with _Deadline(TIMEOUT_S):
        _close_browser()
    _forget_playwright()
    _shared.pid = 0  # nothing is left to own: the next backend may start afresh in any thread


atexit.register(_shutdown)


def _drivers() -> set[int]:
    """The Playwright drivers this process runs (its child processes running ``run-driver``)."""
    found = set()
    for pid, parent in child_processes("").items():
        if parent == os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"run-driver" in f.read().split(b"\0"):
                        found.add(pid)
            except OSError:
                continue
    return found


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not); ``True`` for 0, an unknown process."""
    if not pid:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # it ended on its own meanwhile


def _backup_timeout_ms(timeout_s: float) -> int:
    """Playwright's own timeout, only a backup for :class:`_Deadline` (which kills the browser and so ends any
    call): longer, so that it never fires first and leaves a stuck page running."""
    return int(3 * timeout_s * 1000)


class _Deadline:
    """Kills this process's Chromium if the browser work inside ``with`` runs past ``seconds``.

    Playwright's timeouts do not cover every call (``page.evaluate`` has none), and a page stuck in a script
    never answers one. Once the browser is killed, whatever call waits on it fails at once; :attr:`expired`
    tells that failure from a crash, and the next call launches a fresh browser. The watch runs in its own
    thread, which only sends signals: Playwright's objects stay in the thread that made them.

    Some calls outlive their browser: a ``new_page`` whose browser (or renderer) dies under it never returns,
    however the browser ends. If the call is still waiting :data:`GRACE_S` after the kill, the watch kills
    Playwright's driver too, which fails every call waiting on it; the next browser comes with a new driver.

    :meth:`paused` stops the clock while Chromium starts (Playwright bounds that itself), so that a slow start
    on a loaded machine is not taken for a stuck page.
    """

    _current: "_Deadline | None" = None

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._due: float | None = None  # monotonic time of the next kill; None while paused
        self._left = seconds  # what is left of the time while paused
        self._ended = False
        self._outer: _Deadline | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="mosaic-browser-deadline", daemon=True)

    def __enter__(self) -> "_Deadline":
        self._outer, _Deadline._current = _Deadline._current, self
        self._due = time.monotonic() + self.seconds
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        _Deadline._current = self._outer
        with self._cond:
            self._ended = True
            self._cond.notify()
        self._thread.join()  # a kill under way finishes before the caller reads `expired`
        if self.expired:
            _close_browser()  # only forgets it: the browser is dead, and closing a dead one returns at once

    def check(self) -> None:
        """Raise if the time is up: nothing more may start under this deadline, as no kill would end it."""
        if self.expired:
            raise BrowserCrashed(f"the browser did not answer within {self.seconds:g} s")

    @staticmethod
    @contextlib.contextmanager
    def paused() -> Iterator[None]:
        """The clock of the innermost deadline (if any) stands still inside ``with``."""
        deadline = _Deadline._current
        if deadline is None:
            yield
            return
        with deadline._cond:
            if deadline._due is not None:
                deadline._left = deadline._due - time.monotonic()
            deadline._due = None
        try:
            yield
        finally:
            with deadline._cond:
                deadline._due = time.monotonic() + max(deadline._left, 0.0)
                deadline._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while not self._ended:
                left = None if self._due is None else self._due - time.monotonic()
                if left is None or left > 0:
                    self._cond.wait(left)
                    continue
                if not self.expired:
                    self.expired = True
                    log.warning("the browser did not answer within %.1f s; killing it", self.seconds)
                    _kill(child_processes())
                    self._due = time.monotonic() + GRACE_S
                    continue
                log.warning("a call to Playwright outlived its browser by %.1f s; restarting Playwright", GRACE_S)
                _kill([*child_processes(), *([_shared.driver_pid] if _shared.driver_pid else ())])
                return


class PlaywrightBackend(Backend):
    """Pages shown by headless Chromium, served from ``site`` by request interception.

    Args:
        site: the site to serve at :data:`ORIGIN`.
        chunk_tokens: about how many tokens one chunk of a page holds.
        javascript: run the pages' scripts. Off by default: the builtin site needs none, and a corpus page's
            scripts are a corpus author's code running in the agent's browser.
        timeout_s: the longest one :meth:`view` or :meth:`new_episode` may keep the browser busy, in seconds
            (starting Chromium not counted).

    Attributes:
        blocked_requests: every URL refused so far (other origins, other schemes, WebSockets), in order.
        executable: the Chromium this backend launches when the shared browser is not running.
        javascript: as the argument; takes effect at the next episode.
        timeout_s: as the argument; may be changed between calls.

    Raises:
        ChromiumNotFound: when there is no Chromium to launch (checked here, before any browsing).
        ValueError: ``timeout_s`` is not a positive number of seconds.

    Example:
        >>> from envs.web import load_site
        >>> backend = PlaywrightBackend(load_site("builtin", site_size=120))
        >>> backend.new_episode()
        >>> backend.view("file:///etc/passwd") is None, backend.blocked_requests
        (True, ['file:///etc/passwd'])
        >>> backend.close()
    """

    name = "playwright"

    def __init__(self, site: Site, chunk_tokens: int = CHUNK_TOKENS, javascript: bool = False,
                 timeout_s: float = TIMEOUT_S):
        super().__init__(site, chunk_tokens)
        self.executable = chromium_path()
        self.javascript = javascript
        self.timeout_s = timeout_s
        self.blocked_requests: list[str] = []
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._generation = 0
        self._route_error: Exception | None = None
        self._left_to: str | None = None
        self._loading = False  # between the page's navigation and its read: a timeout then is the page's
        self._crashed = False  # a tab crashed during this try, before any deadline killed the browser
        self._closed = False
        self._pid = os.getpid()
        _adopt().users += 1

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    @timeout_s.setter
    def timeout_s(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {seconds!r}")
        self._timeout_s = float(seconds)
        context = getattr(self, "_context", None)
        if context is not None and self._generation == _shared.generation:
            # Playwright's own timeout must stay the longer one (see _backup_timeout_ms).
            context.set_default_timeout(_backup_timeout_ms(self._timeout_s))

    @property
    def page(self) -> Page | None:
        """The Playwright page of the current episode (for screenshots or your own scripting), or ``None``
        before the first episode, when the browser could not be brought back for this one, or (with scripts
        on) between views, as each page's tab is closed once read."""
        return self._page

    def new_episode(self) -> None:
        """Close the last episode's browser context and open a fresh one (no cookies, no storage).

        Never raises for the browser's sake: if Chromium died (or dies meanwhile) it is started again, and if
        that fails too the episode starts without a context; its first page tries once more (and the env
        truncates the episode with reason ``"browser_crashed"`` if that fails).
        """
        self._check_open()
        for attempt in (1, 2):
            # Each try has its own time: the first may have been spent on a browser that died under it.
            with _Deadline(self.timeout_s) as deadline:
                try:
                    if attempt == 2:
                        _close_browser()  # whatever went wrong, the second try starts from a fresh browser
                    self._open_context()
                    return
                except (PlaywrightError, BrowserCrashed) as err:
                    failure = err
                    if deadline.expired:
                        failure = BrowserCrashed(f"no answer within {self.timeout_s:g} s ({err})")
        self._close_context()
        log.warning("could not open a browser context for the new episode (%s); its first page will try again",
                    failure)

    def view(self, url: str) -> PageView | None:
        """The page at site path ``url`` as Chromium shows it, or ``None`` when the site has no such page.

        Anything but a site path (another scheme or host, or a path not starting with ``/``) is refused:
        ``None``, and the url goes to :attr:`blocked_requests`.

        Raises:
            BrowserTimeout: the page kept the browser busy past :attr:`timeout_s`; the browser was killed and
                the next call starts a fresh one.
            BrowserCrashed: Chromium failed, was started again, and failed again.
        """
        self._check_open()
        parts = urllib.parse.urlsplit(url)
        if parts.scheme or parts.netloc or not url.startswith("/"):
            self._block(url)
            return None
        for attempt in range(1, VIEW_ATTEMPTS + 1):
            # Each try has its own time: the last may have been spent on a browser that died under it.
            with _Deadline(self.timeout_s) as deadline:
                self._loading, self._crashed = False, False
                try:
                    if attempt > 1:
                        self._reopen(deadline)
                    return self._show(url)
                except (PlaywrightError, BrowserCrashed) as err:
                    failure: Exception = err
            if deadline.expired and self._loading and not self._crashed:
                # The time ran out on the page itself (not on opening a tab or a context, nor after its tab
                # crashed, which can leave a call waiting): the page is to blame, and another try would only
                # wait as long again.
                raise self._timeout(url) from failure
            log.warning("Chromium failed on %s (%s); trying again in a fresh context", url, failure)
        raise BrowserCrashed(f"Chromium failed {VIEW_ATTEMPTS} times on {url}: {failure}") from failure

    def close(self) -> None:
        """Close this backend's context; the last backend of the process to close also closes Chromium."""
        if self._closed:
            return
        self._closed = True
        if self._pid != os.getpid():
            return  # made before a fork: its context and its share of the browser belong to the parent
        with _Deadline(self.timeout_s):
            self._close_context()
        _shared.users -= 1
        if _shared.users <= 0:
            _shutdown()

    # ------------------------------------------------------------------------------------------------
    def _show(self, url: str) -> PageView | None:
        if self._context is None or self._generation != _shared.generation:
            # No episode opened yet, or the browser it ran in was replaced (by another backend's relaunch).
            self._open_context()
        if self._page is None or self._page.is_closed():
            self._page = self._new_tab()
        page = self._page
        self._route_error, self._left_to = None, None
        self._loading = True
        try:
            # Without its fragment, so that a url differing only there still loads (and reads) the page afresh.
            response = page.goto(ORIGIN + url.split("#", 1)[0], wait_until="commit")
            if self._route_error is not None:
                # The site itself failed: that is a bug to see, as the text backend would show it, not a crash.
                raise self._route_error
            if response is None or response.status == 404:
                return None
            try:
                html = self._read(page)
            except PlaywrightError:
                # A script or a meta refresh navigated (within the site) while the page loaded: read where it
                # settled. (After a crash this raises again, for view() to handle.)
                page.wait_for_load_state("load")
                html = self._read(page)
            left = self._left_site(page)
            self._loading = False  # read: what is left (closing the tab) is not the page's time any more
        finally:
            if self.javascript:
                self._close_tab()
        if left is not None:
            html = self.site.render(url) or ""
            view = html_to_view(html, url, chunk_tokens=self.chunk_tokens)
            chunks = (_BLOCKED_NOTE.format(left) + "\n" + view.chunks[0],) + view.chunks[1:]
            return dataclasses.replace(view, chunks=chunks)
        view = html_to_view(html, url, chunk_tokens=self.chunk_tokens)
        links = tuple(dataclasses.replace(link, url=_site_path(link.url)) for link in view.links)
        return dataclasses.replace(view, links=links) if links != view.links else view

    def _read(self, page: Page) -> str:
        """The page's DOM once its document has loaded (see :data:`_DOM_AFTER_LOAD`, :data:`_DOM_NOW`)."""
        if self.javascript:
            return page.evaluate(_DOM_AFTER_LOAD)
        page.wait_for_load_state("load")
        return page.evaluate(_DOM_NOW)

    def _left_site(self, page: Page) -> str | None:
        """Where the page went if it left the site, else ``None``.

        Interception refuses every navigation to another origin, and a refused ("aborted") one leaves the page
        where it was. What interception never sees still gets away: ``about:blank``, a ``blob:`` document
        the page made itself, or an error page if a navigation failed some other way. The agent reads the page
        it asked for, as served, under a note saying so, instead of an empty page or a browser's error text.
        """
        where = page.url
        if where.startswith(ORIGIN + "/"):
            return None
        if where.startswith("chrome-error:"):
            where = self._left_to or "another site"
        return where

    def _timeout(self, what: str) -> BrowserTimeout:
        return BrowserTimeout(
            f"the page {what} did not finish within {self.timeout_s:g} s (something on it kept the browser "
            "busy); the browser was restarted: open another page"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this backend is closed; make a new env")
        _adopt()

    def _reopen(self, deadline: _Deadline) -> None:
        """A fresh context, on a fresh browser if the one running cannot give one.

        Right after Chromium is killed, Playwright may not have noticed yet and still take the browser for
        connected: the first try then fails, and the second starts a new browser rather than trusting it.
        """
        try:
            self._open_context()
        except (PlaywrightError, BrowserCrashed) as err:
            deadline.check()
            log.warning("the browser could not open a context (%s); starting a fresh browser", err)
            _close_browser()
            self._open_context()

    def _open_context(self) -> None:
        self._check_open()
        self._close_context()
        browser = _browser(self.executable)
        # No downloads: a page (or its script) asking for one would leave a file on this machine.
        context = browser.new_context(service_workers="block", java_script_enabled=self.javascript,
                                      accept_downloads=False)
        context.set_default_timeout(_backup_timeout_ms(self.timeout_s))
        context.route(_ANY_URL, self._serve)
        context.route_web_socket(_ANY_URL, self._refuse_socket)
        self._context, self._generation = context, _shared.generation
        # With scripts on, every view opens its own tab (see _show); without, one tab serves the episode.
        self._page = None if self.javascript else self._new_tab()

    def _new_tab(self) -> Page:
        """A new tab in this episode's context, whose popups are closed as they open.

        With scripts on, each page is read in a tab of its own that is closed once read: a script still
        running (or looping forever) after the page's load event then ends with its step. It can neither
        delay the next page (Chromium cannot navigate away from a renderer stuck in a script, but closes its
        tab at once) nor change what a later page reads at a moment that depends on how long the agent took.
        """
        assert self._context is not None
        page = self._context.new_page()
        page.on("popup", _close_quietly)
        page.on("crash", self._on_crash)
        return page

    def _on_crash(self, page: Page) -> None:
        deadline = _Deadline._current
        if deadline is None or not deadline.expired:  # a deadline's own kill crashes tabs too: not those
            self._crashed = True

    def _close_tab(self) -> None:
        page, self._page = self._page, None
        if page is not None:
            _close_quietly(page)

    def _close_context(self) -> None:
        context, self._context, self._page = self._context, None, None
        if context is not None and self._generation == _shared.generation:
            try:
                context.close()
            except PlaywrightError:
                pass  # its browser died: nothing is left to close

    def _serve(self, route: Route) -> None:
        url = route.request.url
        if not url.startswith(ORIGIN + "/"):
            self._block(url)
            if route.request.is_navigation_request():
                self._left_to = url
            # "aborted", not "blockedbyclient": a navigation that fails with any other error shows Chromium's
            # error page in place of the page, while an aborted one leaves the page where it was (as a 204
            # does), so a meta refresh or a script sending the page away cannot replace what the agent reads.
            route.abort("aborted")
            return
        try:
            html = self.site.render(url[len(ORIGIN):])
        except Exception as err:
            # Raising here would only be logged by Playwright; view() raises it where the caller sees it.
            self._route_error = err
            route.fulfill(status=500, content_type=_HTML, body="")
            return
        if html is None:
            route.fulfill(status=404, content_type=_HTML, body=_NOT_FOUND)
        else:
            route.fulfill(status=200, content_type=_HTML, body=html)

    def _refuse_socket(self, socket: WebSocketRoute) -> None:
        self._block(socket.url)
        socket.close()

    def _block(self, url: str) -> None:
        self.blocked_requests.append(url)
        log.info("refused a request outside the site: %s", url)


def _close_quietly(page: Page) -> None:
    """Close ``page`` (a tab, or a popup a script opened), without waiting on its scripts."""
    try:
        page.close(run_before_unload=False)
    except PlaywrightError:
        pass  # it, or its browser, is gone already


def _site_path(url: str) -> str:
    """``url`` with :data:`ORIGIN` taken off, so links a script wrote as absolute URLs read as site paths."""
    if url == ORIGIN or url.startswith(ORIGIN + "/") or url.startswith(ORIGIN + "?"):
        return url[len(ORIGIN):] or "/"
    return url


def child_processes(name_contains: str = "chrom") -> dict[int, int]:
    """The processes this process started, directly or not, whose executable's name contains
    ``name_contains`` (``""``: all of them), as ``{pid: parent pid}``. Read from ``/proc``; Linux only.

    With the default, these are the Chromium processes of this process's browser; its main process is the
    one whose parent is not itself in the result (its parent is Playwright's driver).

    Example:
        >>> all(pid != os.getpid() for pid in child_processes())
        True
    """
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                # Chromium's helpers rewrite their command line into one space-separated string.
                argv0 = f.read().split(b"\0", 1)[0].split(b" ", 1)[0]
        except OSError:
            continue  # the process ended while we looked
        # The command name in parentheses may itself hold spaces or parentheses: split after the last ")".
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        names[int(entry)] = os.path.basename(argv0.decode(errors="replace"))
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, int] = {}
    stack = [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), ()):
            stack.append(child)
            if name_contains in names[child]:
                found[child] = parents[child]
    return found
