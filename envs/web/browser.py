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
from functools import lru_cache

import lxml.etree

from .tokens import approx_tokens

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
        chunk_tokens: about how many tokens (:func:`envs.web.tokens.approx_tokens`) a chunk holds; chunks break
            at line boundaries, and inside a line only when the line alone is longer than a chunk.

    Example:
        >>> view = html_to_view("<h1>Oskarde</h1><p>A port.</p>", "/wiki/Oskarde")
        >>> view.title, view.chunks
        ('Oskarde', ('Oskarde\\nA port.',))
    """
    root = _parse(html)
    if root is None:
        return PageView(url, url, ("",), ())
    rendered = _Renderer(root, html, url, number_links=True)
    return PageView(url, _title(root) or url, _chunk(rendered.lines, chunk_tokens), tuple(rendered.links))


def html_text(html: str) -> str:
    """The visible text of ``html`` as :func:`html_to_view` reads it, without link numbers (for search
    indexes and snippets).

    >>> html_text('<p>Born in <a href="/wiki/Oskarde">Oskarde</a>.</p><script>x()</script>')
    'Born in Oskarde.'
    """
    root = _parse(html)
    return "" if root is None else "\n".join(_Renderer(root, html, "/", number_links=False).lines)


def html_title(html: str) -> str:
    """The ``<title>`` of ``html``, else its first ``<h1>``, else ``""``.

    >>> html_title("<html><body><h1>Oskarde</h1></body></html>")
    'Oskarde'
    """
    return _title(_parse(html))


def _parse(html: str) -> lxml.etree._Element | None:
    # Plain etree elements: lxml.html's element classes cost a Python call for every element of the page.
    if not html.strip():
        return None
    try:
        return lxml.etree.fromstring(html, _PARSER)
    except ValueError:
        # lxml refuses str input that carries an XML encoding declaration; the text is already decoded.
        return lxml.etree.fromstring(html.encode("utf-8"), _UTF8_PARSER)
    except lxml.etree.XMLSyntaxError:
        return None


_PARSER = lxml.etree.HTMLParser()
_UTF8_PARSER = lxml.etree.HTMLParser(encoding="utf-8")


def _title(root: lxml.etree._Element | None) -> str:
    if root is None:
        return ""
    for tag in ("title", "h1"):
        element = root.find(f".//{tag}")
        if element is not None:
            text = " ".join("".join(element.itertext()).split())
            if text:
                return text
    return ""


def _hidden_elements(root: lxml.etree._Element, html: str) -> set[lxml.etree._Element]:
    """The elements hidden by attribute or inline style.

    lxml hands out the same proxy object for a node while one is alive, so the set keeps its members and
    the walk can test membership as it meets them.
    """
    lowered = html.lower()
    if "hidden" not in lowered and "none" not in lowered:  # most pages hide nothing: skip the search
        return set()
    hidden = set()
    for value in _HIDING_ATTRIBUTES(root):
        name = value.attrname
        if (
            name == "hidden"
            or (name == "aria-hidden" and value.lower() == "true")
            or (name == "style" and _HIDDEN_STYLE.search(value))
        ):
            hidden.add(value.getparent())
    return hidden


_HIDING_ATTRIBUTES = lxml.etree.XPath("//@hidden|//@aria-hidden|//@style")


class _Renderer:
    """Walks a parsed page once, collecting text lines and links."""

    def __init__(self, root: lxml.etree._Element, html: str, url: str, number_links: bool):
        self.base = url
        self.number_links = number_links
        self.hidden = _hidden_elements(root, html)
        self.lines: list[str] = []
        self.pieces: list[str] = []
        self.links: list[Link] = []
        self.link_text: list[str] | None = None  # the text of the link being read, when inside one
        self.pre_depth = 0
        self.flushes = 0
        self.walk(root)
        self.flush()

    def walk(self, element: lxml.etree._Element) -> None:
        tag = element.tag
        if not isinstance(tag, str) or tag in _SKIP or element in self.hidden:
            self.text(element.tail)  # comments, processing instructions and hidden parts show only their tail
            return
        block = tag in _BLOCK
        if block or tag == "br":
            self.flush()
        elif tag in _CELLS and any(piece.strip() for piece in self.pieces):
            self.pieces.append(" | ")
        if tag == "a" and self.number_links:
            self.walk_link(element)
        else:
            self.pre_depth += tag == "pre"
            self.text(element.text)
            for child in element:
                self.walk(child)
            self.pre_depth -= tag == "pre"
        if block:
            self.flush()
        self.text(element.tail)

    def walk_link(self, element: lxml.etree._Element) -> None:
        """Number a link anyone can follow (not an in-page anchor, a script or mail) and read its text; a link
        that shows no text loses its number again."""
        href = (element.get("href") or "").strip()
        followable = href and not href.startswith("#") and not href.lower().startswith(("javascript:", "mailto:"))
        outer_text, marker, flushes = self.link_text, len(self.pieces), self.flushes
        if followable:
            self.pieces.append(f" [{len(self.links) + 1}] ")
            self.link_text = []
        self.text(element.text)
        for child in element:
            self.walk(child)
        if followable:
            text = " ".join("".join(self.link_text or ()).split())
            self.link_text = outer_text
            if text or flushes != self.flushes:  # a number already written out on a line stays
                self.links.append(Link(len(self.links) + 1, text, self.resolve(href)))
            else:
                self.pieces[marker] = ""

    def resolve(self, href: str) -> str:
        if href.startswith("/") and not href.startswith("//") and "/." not in href:
            return href.split("#", 1)[0]  # already a site path: the common case, and urljoin is slow
        return _resolve(self.base, href)

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
        self.flushes += 1
        if line:
            self.lines.append(line)


@lru_cache(maxsize=65536)
def _resolve(base: str, href: str) -> str:
    """``href`` resolved against the page url ``base``: a site path, or an absolute URL off the site."""
    target = urllib.parse.urlsplit(urllib.parse.urljoin(base, href))
    base_host = urllib.parse.urlsplit(base).netloc
    if target.netloc and target.netloc.lower() != base_host.lower():
        return urllib.parse.urlunsplit(target._replace(fragment=""))
    path = target.path or "/"
    return f"{path}?{target.query}" if target.query else path


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
