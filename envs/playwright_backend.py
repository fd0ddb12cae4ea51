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
import threading
import urllib.parse
from dataclasses import dataclass

from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Route, WebSocketRoute, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from .backends import Backend, BrowserCrashed
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
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# Generous for one page of a local site even on a loaded machine; a page that takes longer is stuck.
TIMEOUT_MS = 20_000
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


def _browser(executable: str) -> Browser:
    """The shared browser, launched now if there is none or it died."""
    shared = _adopt()
    if shared.browser is not None and shared.browser.is_connected():
        return shared.browser
    _close_browser()
    if shared.playwright is None:
        shared.playwright = sync_playwright().start()
    try:
        shared.browser = shared.playwright.chromium.launch(
            executable_path=executable, headless=True, args=list(CHROMIUM_ARGS), timeout=TIMEOUT_MS
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
    _close_browser()
    playwright, _shared.playwright = _shared.playwright, None
    if playwright is not None:
        playwright.stop()
    _shared.pid = 0  # nothing is left to own: the next backend may start afresh in any thread


atexit.register(_shutdown)


class PlaywrightBackend(Backend):
    """Pages shown by headless Chromium, served from ``site`` by request interception.

    Args:
        site: the site to serve at :data:`ORIGIN`.
        chunk_tokens: about how many tokens one chunk of a page holds.

    Attributes:
        blocked_requests: every URL refused so far (other origins, other schemes), in order.
        executable: the Chromium this backend launches when the shared browser is not running.

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

    def __init__(self, site: Site, chunk_tokens: int = CHUNK_TOKENS):
        super().__init__(site, chunk_tokens)
        self.executable = chromium_path()
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
        before the first episode."""
        return self._page

    def new_episode(self) -> None:
        """Close the last episode's browser context and open a fresh one (no cookies, no storage).

        Raises:
            BrowserCrashed: Chromium was not running and could not be started.
        """
        self._open_context()

    def view(self, url: str) -> PageView | None:
        """The page at site path ``url`` as Chromium shows it, or ``None`` when the site has no such page.

        Anything but a site path (another scheme or host, or a path not starting with ``/``) is refused:
        ``None``, and the url goes to :attr:`blocked_requests`.

        Raises:
            BrowserCrashed: Chromium failed, was started again, and failed again.
        """
        self._check_open()
        parts = urllib.parse.urlsplit(url)
        if parts.scheme or parts.netloc or not url.startswith("/"):
            self._block(url)
            return None
        try:
            return self._show(url)
        except PlaywrightError as err:
            log.warning("Chromium failed on %s (%s); starting a fresh context and retrying once", url, err)
        try:
            self._open_context()
            return self._show(url)
        except (PlaywrightError, BrowserCrashed) as err:
            raise BrowserCrashed(f"Chromium failed twice on {url}: {err}") from err

    def close(self) -> None:
        """Close this backend's context; the last backend of the process to close also closes Chromium."""
        if self._closed:
            return
        self._closed = True
        if self._pid != os.getpid():
            return  # made before a fork: its context and its share of the browser belong to the parent
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
            # A script or a meta refresh navigated away while the page loaded: read where it settled. (After a
            # crash this raises again, for view() to handle.)
            page.wait_for_load_state("load")
            html = page.evaluate(_DOM_AFTER_LOAD)
        view = html_to_view(html, url, chunk_tokens=self.chunk_tokens)
        links = tuple(dataclasses.replace(link, url=_site_path(link.url)) for link in view.links)
        return dataclasses.replace(view, links=links) if links != view.links else view

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this backend is closed; make a new env")
        _adopt()

    def _open_context(self) -> None:
        self._check_open()
        self._close_context()
        browser = _browser(self.executable)
        context = browser.new_context(service_workers="block")
        context.set_default_timeout(TIMEOUT_MS)
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
            route.abort("blockedbyclient")
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
