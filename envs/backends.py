"""Backends turn a URL of the site into a :class:`~envs.web.browser.PageView`.

The text backend (default) renders the site's HTML in-process and converts it with lxml: no browser on the
hot path. The Playwright backend (:mod:`envs.playwright_backend`) shows the same HTML in real Chromium and
converts the live DOM with the same converter, so both give the same text for builtin pages.

Example:
    >>> from envs.web import load_site
    >>> backend = TextBackend(load_site("builtin", site_size=120))
    >>> backend.view("/").url
    '/'
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

from .actions import ActionError
from .web.browser import CHUNK_TOKENS, PageView, html_to_view
from .web.site import Site


class BrowserCrashed(RuntimeError):
    """The backend's browser failed and could not be brought back; the env truncates the episode with reason
    ``"browser_crashed"``."""


class BrowserTimeout(ActionError):
    """A page kept the browser busy past the backend's timeout (a script that never ends, say). The browser
    was restarted and the episode goes on: the env shows the message to the agent as the action's error."""


class Backend:
    """What the env needs from a browser: a page view by URL, and ``close()``."""

    name = "base"

    def __init__(self, site: Site, chunk_tokens: int = CHUNK_TOKENS):
        self.site = site
        self.chunk_tokens = chunk_tokens

    def view(self, url: str) -> PageView | None:
        """The page at ``url`` (site path, optional query), or ``None`` when there is none.

        Raises:
            BrowserCrashed: a browser-backed backend lost its browser for good.
        """
        raise NotImplementedError

    def new_episode(self) -> None:
        """Called at every reset (a browser starts a fresh context here)."""

    def close(self) -> None:
        """Release what the backend holds."""


class TextBackend(Backend):
    """Pure-Python rendering with a per-process cache of page views (search pages included)."""

    name = "text"
    _shared: dict[tuple[int, int], "OrderedDict[str, PageView | None]"] = {}

    def __init__(self, site: Site, chunk_tokens: int = CHUNK_TOKENS, cache_size: int = 50_000):
        super().__init__(site, chunk_tokens)
        # Envs of one process share their site, so they share its rendered views too.
        key = (id(site), chunk_tokens)
        if key not in self._shared:
            self._shared[key] = OrderedDict()
            # The views go with their site: a site created later at the same address must not be shown them.
            weakref.finalize(site, self._shared.pop, key, None)
        self._cache = self._shared[key]
        self._cache_size = cache_size

    def view(self, url: str) -> PageView | None:
        cache = self._cache
        if url in cache:
            cache.move_to_end(url)
            return cache[url]
        html = self.site.render(url)
        view = None if html is None else html_to_view(html, url, chunk_tokens=self.chunk_tokens)
        cache[url] = view
        if len(cache) > self._cache_size:
            cache.popitem(last=False)
        return view
