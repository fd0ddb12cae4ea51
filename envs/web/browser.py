"""The page view both backends show: an HTML page as readable text with numbered links, cut into chunks.

A text browser's rendering: visible text only (no script, style, head, hidden elements or form inputs),
block elements on their own lines, whitespace folded, and each link written as ``[n] link text`` with a
page-global number ``n`` that ``open(n)`` follows. Hrefs are resolved against the page url to site paths
(``/wiki/X``); links that leave the site keep their absolute URL. The same HTML always gives the same view.

Example:
    >>> view = html_to_view('<title>Vane</title><p>Born in <a href="Oskarde">Oskarde</a>.</p>', "/wiki/Vane")
    >>> view.chunks
    ('Born in [1] Oskarde.',)
    >>> view.links
    (Link(number=1, text='Oskarde', url='/wiki/Oskarde'),)
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

import lxml.etree
import lxml.html

from ..tokens import approx_tokens

CHUNK_TOKENS = 256

# Passages longer than this are cut into sentences by `PageView.find`, so a hit does not return a whole
# section-sized paragraph.
_PASSAGE_CHARS = 300

_SKIP = frozenset(
    "head title script style noscript template meta link input select option textarea button iframe "
    "object embed svg canvas audio video map datalist".split()
)
_BLOCK = frozenset(
    "address article aside blockquote body caption center dd details dialog dir div dl dt fieldset "
    "figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr html li main menu nav ol p pre "
    "section summary table tbody tfoot thead tr ul".split()
)
_CELLS = frozenset(("td", "th"))
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Link:
    """A link of a page.

    Attributes:
        number: 1-based, page-global; the text shows it as ``[number] text``.
        text: the link's visible text, whitespace folded.
        url: the href resolved against the page url: a site path (``/wiki/X``, with its query if any), or the
            absolute URL of a link that leaves the site.
    """

    number: int
    text: str
    url: str


@dataclass(frozen=True)
class PageView:
    """A page as the agent reads it.

    Attributes:
        url: the page's url as opened.
        title: the ``<title>``, else the first ``<h1>``, else the url.
        chunks: the readable text in chunks of about ``CHUNK_TOKENS`` tokens; at least one (``""`` for an
            empty page).
        links: every numbered link, in page order (``links[n - 1].number == n``).
    """

    url: str
    title: str
    chunks: tuple[str, ...]
    links: tuple[Link, ...]

    def find(self, text: str) -> list[str]:
        """The passages (lines, or sentences of long lines) that contain ``text``, case-insensitive, in page
        order, each once.

        >>> html_to_view("<p>Edra Vane was born in 1887.</p><p>She died.</p>", "/").find("BORN")
        ['Edra Vane was born in 1887.']
        """
        needle = " ".join(text.split()).casefold()
        if not needle:
            return []
        found: dict[str, None] = {}
        for line in "\n".join(self.chunks).split("\n"):
            if needle not in line.casefold():
                continue
            if len(line) > _PASSAGE_CHARS:
                sentences = [s for s in _SENTENCE_END.split(line) if needle in s.casefold()]
                # A needle that spans a sentence boundary is only found in the whole line.
                found.update(dict.fromkeys(sentences or [line]))
            else:
                found[line] = None
        return list(found)


def html_to_view(html: str, url: str, chunk_tokens: int = CHUNK_TOKENS) -> PageView:
    """Render ``html``, served at ``url``, as a :class:`PageView`.

    Args:
        html: the page's HTML.
        url: where the page was opened (a site path such as ``/wiki/X`` or an absolute URL); relative hrefs
            resolve against it.
        chunk_tokens: about how many tokens (:func:`envs.tokens.approx_tokens`) a chunk holds; chunks break
            at line boundaries, and inside a line only when the line alone is longer than a chunk.

    Example:
        >>> view = html_to_view("<h1>Oskarde</h1><p>A port.</p>", "/wiki/Oskarde")
        >>> view.title, view.chunks
        ('Oskarde', ('Oskarde\\nA port.',))
    """
    root = _parse(html)
    renderer = _Renderer(url, number_links=True)
    if root is not None:
        renderer.walk(root)
    lines = renderer.finish()
    return PageView(
        url=url,
        title=_title(root) or url,
        chunks=_chunk(lines, chunk_tokens),
        links=tuple(renderer.links),
    )


def html_text(html: str) -> str:
    """The visible text of ``html`` as :func:`html_to_view` reads it, without link numbers (for search
    indexes and snippets).

    >>> html_text('<p>Born in <a href="/wiki/Oskarde">Oskarde</a>.</p><script>x()</script>')
    'Born in Oskarde.'
    """
    root = _parse(html)
    if root is None:
        return ""
    renderer = _Renderer("/", number_links=False)
    renderer.walk(root)
    return "\n".join(renderer.finish())


def html_title(html: str) -> str:
    """The ``<title>`` of ``html``, else its first ``<h1>``, else ``""``.

    >>> html_title("<html><body><h1>Oskarde</h1></body></html>")
    'Oskarde'
    """
    return _title(_parse(html))


def _parse(html: str) -> lxml.html.HtmlElement | None:
    if not html.strip():
        return None
    try:
        return lxml.html.document_fromstring(html)
    except ValueError:
        # lxml refuses str input that carries an XML encoding declaration; the text is already decoded.
        return lxml.html.document_fromstring(html.encode("utf-8"), parser=_UTF8_PARSER)
    except lxml.etree.ParserError:
        return None


_UTF8_PARSER = lxml.html.HTMLParser(encoding="utf-8")


def _title(root: lxml.html.HtmlElement | None) -> str:
    if root is None:
        return ""
    for tag in ("title", "h1"):
        element = root.find(f".//{tag}")
        if element is not None:
            text = " ".join(element.text_content().split())
            if text:
                return text
    return ""


def _hidden(element: lxml.html.HtmlElement) -> bool:
    attrib = element.attrib
    if "hidden" in attrib or attrib.get("aria-hidden", "").lower() == "true":
        return True
    style = attrib.get("style")
    return bool(style) and _HIDDEN_STYLE.search(style) is not None


class _Renderer:
    """Walks an lxml tree once, collecting text lines and links."""

    def __init__(self, url: str, number_links: bool):
        self.base = url
        self.base_parts = urllib.parse.urlsplit(url)
        self.number_links = number_links
        self.lines: list[str] = []
        self.pieces: list[str] = []
        self.links: list[Link] = []
        self.link_text: list[str] | None = None  # the text of the link being read, when inside one
        self.pre_depth = 0

    def walk(self, element: lxml.html.HtmlElement) -> None:
        tag = element.tag
        if not isinstance(tag, str):  # comments and processing instructions
            self.text(element.tail)
            return
        if tag in _SKIP or _hidden(element):
            self.text(element.tail)
            return
        block = tag in _BLOCK
        if block or tag == "br":
            self.flush()
        elif tag in _CELLS and "".join(self.pieces).strip():
            self.pieces.append(" | ")
        outer_link_text = self.link_text
        link = self.open_link(element) if tag == "a" and self.number_links else None
        if tag == "pre":
            self.pre_depth += 1
        self.text(element.text)
        for child in element:
            self.walk(child)
        if tag == "pre":
            self.pre_depth -= 1
        if link is not None:
            text = " ".join("".join(self.link_text or ()).split())
            self.links[link.number - 1] = Link(link.number, text, link.url)
            self.link_text = outer_link_text
        if block:
            self.flush()
        self.text(element.tail)

    def open_link(self, element: lxml.html.HtmlElement) -> Link | None:
        """Number the link ``element`` and start collecting its text; ``None`` for links nobody can follow
        (no href, in-page anchors, scripts, mail) or see (no text)."""
        href = (element.get("href") or "").strip()
        if not href or href.startswith("#") or href.lower().startswith(("javascript:", "mailto:")):
            return None
        if not element.text_content().strip():
            return None
        link = Link(len(self.links) + 1, "", self.resolve(href))
        self.links.append(link)
        self.pieces.append(f" [{link.number}] ")
        self.link_text = []
        return link

    def resolve(self, href: str) -> str:
        target = urllib.parse.urlsplit(urllib.parse.urljoin(self.base, href))
        leaves_site = target.netloc and (
            not self.base_parts.netloc or target.netloc.lower() != self.base_parts.netloc.lower()
        )
        if leaves_site:
            return urllib.parse.urlunsplit(target._replace(fragment=""))
        path = target.path or "/"
        return f"{path}?{target.query}" if target.query else path

    def text(self, text: str | None) -> None:
        if not text:
            return
        if self.link_text is not None:
            self.link_text.append(text)
        if self.pre_depth:
            first, *rest = text.split("\n")
            self.pieces.append(first)
            for line in rest:
                self.flush()
                self.pieces.append(line)
        else:
            self.pieces.append(text)

    def flush(self) -> None:
        line = " ".join("".join(self.pieces).split())
        self.pieces.clear()
        if line:
            self.lines.append(line)

    def finish(self) -> list[str]:
        self.flush()
        return self.lines


def _chunk(lines: list[str], chunk_tokens: int) -> tuple[str, ...]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        for piece in _fit(line, chunk_tokens):
            cost = approx_tokens(piece + "\n")
            if current and size + cost > chunk_tokens:
                chunks.append("\n".join(current))
                current, size = [], 0
            current.append(piece)
            size += cost
    if current:
        chunks.append("\n".join(current))
    return tuple(chunks) or ("",)


def _fit(line: str, chunk_tokens: int) -> list[str]:
    """``line`` alone, or cut at sentence and then word boundaries into pieces that each fit a chunk."""
    if approx_tokens(line) <= chunk_tokens:
        return [line]
    pieces: list[str] = []
    current = ""
    for unit in _units(line, chunk_tokens):
        joined = f"{current} {unit}" if current else unit
        if current and approx_tokens(joined) > chunk_tokens:
            pieces.append(current)
            current = unit
        else:
            current = joined
    if current:
        pieces.append(current)
    return pieces


def _units(line: str, chunk_tokens: int) -> list[str]:
    units: list[str] = []
    for sentence in _SENTENCE_END.split(line):
        if approx_tokens(sentence) <= chunk_tokens:
            units.append(sentence)
        else:
            units.extend(sentence.split(" "))
    return units
