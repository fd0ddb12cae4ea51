"""The browsing tools, ``search``, ``open``, ``scroll`` and ``find``, run on a backend for one session.

A tool changes the session's browser state (the page open, the part of it on screen, the pages read) and
returns what the agent is shown, as a :class:`Shown`; the env appends that to the session's context. A call the
site cannot serve raises :class:`~envs.actions.ActionError` with the message the agent sees. The multi-session
tools (``answer``, ``compact``, ``fork``, ``finish``) are the env's own: they end or start sessions.

Example:
    >>> from envs.session import Session
    >>> from envs.web import load_site
    >>> site = load_site("builtin", site_size=120)
    >>> tools = WebTools(site, make_backend("text", site))
    >>> session = Session(id=0, parent=None, kind="root", depth=0, messages=[], pieces=[], tokens=0)
    >>> tools.run(session, "search", "a question").text.splitlines()[0]  # doctest: +ELLIPSIS
    '[Search results: Search: a question | /search?q=a+question | part 1 of ...'
    >>> session.pages_read
    ['Search: a question']
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from .actions import ActionError
from .backends import Backend, TextBackend
from .prompts import NO_PAGE_OPEN
from .session import Session
from .web.browser import CHUNK_TOKENS, PageView
from .web.checks import shown
from .web.site import Site

#: The tools that only browse: they change what the session has on screen, never the session tree.
WEB_TOOLS = ("search", "open", "scroll", "find")
MAX_FIND_PASSAGES = 10


@dataclass(frozen=True)
class Shown:
    """What a tool shows the agent: ``text``, and ``mentions_of``, the part of it the session has now read (the
    values it may answer with and the facts its notes keep are taken from it; ``""`` for none)."""

    text: str
    mentions_of: str = ""


class WebTools:
    """The browsing tools over ``site``, its pages shown by ``backend``."""

    def __init__(self, site: Site, backend: Backend):
        self.site = site
        self.backend = backend

    def run(self, session: Session, name: str, arg: str | int) -> Shown:
        """Run the browsing tool ``name`` (one of :data:`WEB_TOOLS`) with ``arg`` for ``session``.

        Raises:
            ActionError: the call cannot be served (no such page or link, nothing open to scroll or search in).
            BrowserCrashed: the backend lost its browser for good.
        """
        if name == "search":
            return self._show_page(session, self.site.search_url(str(arg)), what="Search results")
        if name == "open":
            return self._show_page(session, self.resolve_target(session, arg), what="Page")
        if name == "scroll":
            return self._scroll(session, str(arg))
        if name == "find":
            return self._find(session, str(arg))
        raise ValueError(f"{name!r} is not a browsing tool: use one of {WEB_TOOLS}")

    def resolve_target(self, session: Session, target: str | int) -> str:
        """The site path that ``open(target)`` shows: link ``target`` of the page open, or a path or URL."""
        if isinstance(target, int):
            if session.page is None:
                raise ActionError(f"there is no page open to take link {shown(target)} from; search or open a path "
                                  "first")
            links = session.page.links
            if target > len(links):
                raise ActionError(f"there is no link {shown(target)} on this page (it has {len(links)})")
            url = links[target - 1].url
        else:
            url = target.strip()
        try:
            parts = urllib.parse.urlsplit(url)
        except ValueError as err:  # e.g. "http://[bad": an unbalanced IPv6 bracket
            raise ActionError(f"{shown(url)} is not a URL or path this website has ({err})") from None
        if parts.scheme in ("http", "https") and parts.netloc:
            local = self.site.local_path(url)  # a corpus document's own URL opens its page
            if local is None:
                raise ActionError(f"{url} is outside this website; only its own pages can be opened")
            return local
        if parts.scheme or not url.startswith("/"):
            url = "/" + url.lstrip("/")
        return url

    def _show_page(self, session: Session, url: str, what: str) -> Shown:
        view = self.backend.view(url)
        if view is None:
            raise ActionError(f"there is no page at {url}")
        session.page, session.chunk = view, 0
        session.pages_read.append(view.title)
        return Shown(chunk_text(view, 0, what), mentions_of=view.chunks[0] if view.chunks else "")

    def _scroll(self, session: Session, direction: str) -> Shown:
        view = session.page
        if view is None:
            raise ActionError(NO_PAGE_OPEN)
        index = session.chunk + (1 if direction == "down" else -1)
        if not 0 <= index < len(view.chunks):
            raise ActionError(f"already at the {'end' if direction == 'down' else 'top'} of {view.title}")
        session.chunk = index
        return Shown(chunk_text(view, index), mentions_of=view.chunks[index])

    def _find(self, session: Session, text: str) -> Shown:
        view = session.page
        if view is None:
            raise ActionError(NO_PAGE_OPEN)
        passages = view.find(text)
        if not passages:
            return Shown(f"[Find {text!r} in {view.title}: no passage contains it.]")
        body = "\n".join(f"- {p}" for p in passages[:MAX_FIND_PASSAGES])
        return Shown(f"[Find {text!r} in {view.title}: {len(passages)} passages]\n{body}", mentions_of=body)


def chunk_text(view: PageView, index: int, what: str = "Page") -> str:
    """Part ``index`` of ``view`` as the agent sees it: a header naming the page and the part, then the text."""
    body = view.chunks[index] if view.chunks else "(this page is empty)"
    more = " Scroll down for more." if index + 1 < len(view.chunks) else ""
    return f"[{what}: {view.title} | {view.url} | part {index + 1} of {max(1, len(view.chunks))}.{more}]\n{body}"


def make_backend(
    name: str, site: Site, chunk_tokens: int = CHUNK_TOKENS, browser_javascript: bool = False
) -> Backend:
    """The backend called ``name``: ``"text"`` or ``"playwright"``; ``browser_javascript`` runs the pages'
    scripts (Playwright only). Here, not in :mod:`envs.backends`, so that the base module never names the
    Playwright one (which builds on it): no import cycle."""
    if not isinstance(browser_javascript, bool):
        raise ValueError(f"browser_javascript must be True or False, got {browser_javascript!r}")
    if name == "text":
        if browser_javascript:
            raise ValueError("browser_javascript=True needs backend='playwright': the text backend runs no scripts")
        return TextBackend(site, chunk_tokens)
    if name == "playwright":
        from .playwright_backend import PlaywrightBackend

        return PlaywrightBackend(site, chunk_tokens, javascript=browser_javascript)
    raise ValueError(f"backend={name!r} is unknown: use backend='text' (fast, default) or backend='playwright'")
