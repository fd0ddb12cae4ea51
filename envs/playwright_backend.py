"""Real Chromium over the same site: :class:`PlaywrightBackend`, the ``backend="playwright"`` of the env.

The site never touches a network. Chromium (Debian's, at ``/usr/bin/chromium``; ``MOSAIC_CHROMIUM``
overrides the path) browses a fixed fake origin, :data:`ORIGIN`, and every request it makes is intercepted in
this process: requests to the origin are answered from ``site.render(path_with_query)`` (a 404 page when the
site has no such page); requests anywhere else, WebSockets included, are refused and recorded in
``backend.blocked_requests``. ``view(url)`` navigates to ``ORIGIN + url``, waits for the document's ``load``
event (so its scripts, ``onload`` handlers included, have run), serialises the live DOM
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

Faults: if Chromium dies, the next ``view`` starts it again and retries once (the episode goes on in a fresh
context); if that fails too it raises :class:`~envs.backends.BrowserCrashed`, which the env turns into
truncation with reason ``"browser_crashed"``.

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
import dataclasses
import logging
import os
import re
import shutil
import signal
import threading
import urllib.parse
from dataclasses import dataclass

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
    # WebRTC sends UDP without asking the resolver or the interception; allow it no UDP at all.
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
    # Changes with every launch (and fork), so a backend can tell its context belongs to a browser gone by.
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


def _browser(executable: str, timeout_s: float) -> Browser:
    """The shared browser, launched now if there is none or it died."""
    shared = _adopt()
    if shared.browser is not None and shared.browser.is_connected():
        return shared.browser
    _close_browser()
    if shared.playwright is None:
        shared.playwright = sync_playwright().start()
    try:
        shared.browser = shared.playwright.chromium.launch(
            executable_path=executable, headless=True, args=list(CHROMIUM_ARGS),
            ignore_default_args=list(CHROMIUM_DEFAULT_ARGS_DROPPED), timeout=_backup_timeout_ms(timeout_s),
        )
    except PlaywrightError as err:
        raise BrowserCrashed(
            f"Chromium at {executable} did not start: {err}. Check that `{executable} --headless --no-sandbox "
            "--dump-dom about:blank` works; reinstall with `sudo apt-get install -y chromium`."
        ) from err
    shared.generation += 1
    return shared.browser


def _close_browser() -> None:
    browser, _shared.browser = _shared.browser, None
    if browser is not None:
        try:
            browser.close()
        except PlaywrightError:
            pass  # already gone: a crashed browser has nothing left to close


def _shutdown() -> None:
    """Close the browser and stop Playwright, if this process started them."""
    if _shared.pid != os.getpid():
        return
    with _Deadline(TIMEOUT_S):
        _close_browser()
    playwright, _shared.playwright = _shared.playwright, None
    if playwright is not None:
        playwright.stop()
    _shared.pid = 0  # nothing is left to own: the next backend may start afresh in any thread


atexit.register(_shutdown)


def _backup_timeout_ms(timeout_s: float) -> int:
    """Playwright's own timeout, only a backup for :class:`_Deadline` (which kills the browser and so ends any
    call): longer, so that it never fires first and leaves a stuck page running."""
    return int(3 * timeout_s * 1000)


class _Deadline:
    """Kills this process's Chromium if the browser work inside ``with`` runs past ``seconds``.

    Playwright's timeouts do not cover every call (``page.evaluate`` has none), and a page stuck in a script
    never answers one. Once the browser is killed, whatever call waits on it fails at once; :attr:`expired`
    tells that failure from a crash, and the next call launches a fresh browser.
    """

    def __init__(self, seconds: float):
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._timer.cancel()
        self._timer.join()  # a kill under way finishes before the caller reads `expired`
        if self.expired:
            _close_browser()  # only forgets it: the browser is dead, and closing a dead one returns at once

    def _expire(self) -> None:
        self.expired = True
        log.warning("the browser did not answer within %.1f s; killing it", self._timer.interval)
        for pid in child_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # it ended on its own meanwhile


class PlaywrightBackend(Backend):
    """Pages shown by headless Chromium, served from ``site`` by request interception.

    Args:
        site: the site to serve at :data:`ORIGIN`.
        chunk_tokens: about how many tokens one chunk of a page holds.
        javascript: run the pages' scripts. Off by default: the builtin site needs none, and a corpus page's
            scripts are a corpus author's code running in the agent's browser.
        timeout_s: the longest one :meth:`view` or :meth:`new_episode` may keep the browser busy.

    Attributes:
        blocked_requests: every URL refused so far (other origins, other schemes), in order.
        executable: the Chromium this backend launches when the shared browser is not running.
        timeout_s: as the argument; may be changed between calls.

    Raises:
        ChromiumNotFound: when there is no Chromium to launch (checked here, before any browsing).

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
        self._closed = False
        self._pid = os.getpid()
        _adopt().users += 1

    @property
    def page(self) -> Page | None:
        """The Playwright page of the current episode (for screenshots or your own scripting), or ``None``
        before the first episode (or when the browser could not be brought back for this one)."""
        return self._page

    def new_episode(self) -> None:
        """Close the last episode's browser context and open a fresh one (no cookies, no storage).

        Never raises for the browser's sake: if Chromium dies meanwhile it is started again, and if that fails
        too the episode starts without a context; its first page tries once more (and the env truncates the
        episode with reason ``"browser_crashed"`` if that fails).
        """
        self._check_open()
        with _Deadline(self.timeout_s) as deadline:
            for attempt in (1, 2):
                try:
                    self._open_context()
                    return
                except (PlaywrightError, BrowserCrashed) as err:
                    failure = err
                    if deadline.expired:
                        break
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
        with _Deadline(self.timeout_s) as deadline:
            try:
                return self._show(url)
            except (PlaywrightError, BrowserCrashed) as err:
                if deadline.expired:
                    raise self._timeout(url) from err
                log.warning("Chromium failed on %s (%s); starting a fresh context and retrying once", url, err)
            try:
                self._open_context()
                return self._show(url)
            except (PlaywrightError, BrowserCrashed) as err:
                if deadline.expired:
                    raise self._timeout(url) from err
                raise BrowserCrashed(f"Chromium failed twice on {url}: {err}") from err

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
        if self._page is None or self._generation != _shared.generation or self._page.is_closed():
            # No episode opened yet, or the browser it ran in was replaced (by another backend's relaunch).
            self._open_context()
        assert self._page is not None
        page = self._page
        self._route_error = None
        # Without its fragment, so that a url differing only there still loads (and reads) the page afresh.
        response = page.goto(ORIGIN + url.split("#", 1)[0], wait_until="commit")
        if self._route_error is not None:
            # The site itself failed: that is a bug to see, as the text backend would show it, not a crash.
            raise self._route_error
        if response is None or response.status == 404:
            return None
        try:
            html = page.evaluate(_DOM_AFTER_LOAD)
        except PlaywrightError:
            # A script or a meta refresh navigated (within the site) while the page loaded: read where it
            # settled. (After a crash this raises again, for view() to handle.)
            page.wait_for_load_state("load")
            html = page.evaluate(_DOM_AFTER_LOAD)
        view = html_to_view(html, url, chunk_tokens=self.chunk_tokens)
        links = tuple(dataclasses.replace(link, url=_site_path(link.url)) for link in view.links)
        return dataclasses.replace(view, links=links) if links != view.links else view

    def _timeout(self, url: str) -> BrowserTimeout:
        return BrowserTimeout(
            f"the page {url} did not finish within {self.timeout_s:g} s (something on it kept the browser "
            "busy); the browser was restarted: open another page"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this backend is closed; make a new env")
        _adopt()

    def _open_context(self) -> None:
        self._check_open()
        self._close_context()
        browser = _browser(self.executable, self.timeout_s)
        context = browser.new_context(service_workers="block", java_script_enabled=self.javascript)
        context.set_default_timeout(_backup_timeout_ms(self.timeout_s))
        context.route(_ANY_URL, self._serve)
        context.route_web_socket(_ANY_URL, self._refuse_socket)
        self._context, self._page, self._generation = context, context.new_page(), _shared.generation

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
