"""Real-world HTML made readable: a user corpus's page cut down to its title, main text and links.

Pages crawled from the web carry navigation bars, headers and footers, cookie banners, sidebars, scripts,
forms and broken markup. :func:`clean_html` keeps what a reader of the page came for and writes it back as a
small, safe HTML document that :func:`envs.web.browser.html_to_view` reads like any other page:

- **Dropped, always:** ``<head>`` (so no ``<meta http-equiv="refresh">``, ``<base>`` or ``<link>``), script,
  style, noscript, template, iframe, frame, object, embed, svg, canvas, media, dialogs, form controls, comments,
  elements hidden by ``hidden``, ``aria-hidden="true"`` or an inline ``display: none``, and every attribute but
  a link's ``href`` (no event handler, no style). An ``href`` that runs or embeds something (``javascript:``,
  ``vbscript:``, ``data:``) is dropped and its text kept.
- **Dropped as boilerplate:** ``<nav>``, ``<aside>``, page-level ``<header>`` and ``<footer>`` (an article's own
  stay), ARIA navigation, banner, search, complementary and contentinfo regions, elements whose ``id`` or
  ``class`` names chrome (cookie, consent, menu, sidebar, breadcrumb, share, newsletter, advert, ...), and forms
  that hold no paragraph or heading. An element that holds the page's ``<h1>``, its ``<main>`` or an
  ``<article>`` is never dropped as boilerplate, nor one named so only by its id, class or being a form that
  holds much of the page's text: a page wrapped whole in a ``<div class="menu-open">`` or an ASP.NET
  ``<form>`` keeps its text.
- **Main text:** the page's ``<main>`` (or ``role="main"``, or its only ``<article>``) when there is one that
  holds a fair share of the text; else the whole body less the boilerplate. The ``<h1>`` is shown first when
  the main region lacks it.
- **Title:** the heading the ``<title>`` names beside a site name ("Edra Vane | Wiki": the main region's first
  ``<h1>``, else its first ``<h2>``, else the page's ``<h1>``), else the ``<title>``, else the ``<h1>``, else
  ``og:title``; whitespace folded, cut to :data:`TITLE_CHARS`.
- **Size:** at most :data:`MAX_HTML_CHARS` of a page are read (libxml2 drops a text or attribute past ten
  million characters, and all that follows it); the cleaned page is never much longer than what was read. A
  tag with thousands of attributes (libxml2's time grows with their square) loses them.

:func:`decode_html` turns a page file's bytes into text: a byte order mark, else UTF-8 when the bytes are
valid UTF-8, else the ``<meta charset>`` the page declares, else windows-1252 (as browsers do).

Example:
    >>> page = clean_html('<title>Vane | Wiki</title><nav><a href="/">Home</a></nav>'
    ...                   '<h1>Vane</h1><p onclick="x()">A <a href="javascript:go()">painter</a>.</p>')
    >>> page
    '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Vane</title></head><body><h1>Vane</h1><p>A painter.</p></body></html>'
"""

from __future__ import annotations

import codecs
import html as html_lib
import re
from typing import AbstractSet

import lxml.etree

#: Most characters of a page that are read; what follows is left out.
MAX_HTML_CHARS = 8_000_000
#: A title is cut to this many characters.
TITLE_CHARS = 200

# Never shown: scripts, embedded documents and media, form controls, the head.
_DROP = frozenset(
    "head title script style noscript template iframe frame frameset object applet svg math canvas audio "
    "video map area dialog button input select option optgroup textarea datalist link meta base param portal".split()
)
# Void in HTML5 but read by libxml2 as holding what follows them: shown as their content (the page that follows).
_MISREAD_VOID = frozenset(("embed", "source", "track", "wbr", "keygen"))
# Chrome by tag: navigation and sidebars anywhere, headers and footers of the page (not of an article).
_CHROME = frozenset(("nav", "aside"))
_PAGE_CHROME = frozenset(("header", "footer"))
_SECTIONING = frozenset(("article", "main", "section", "blockquote", "td", "th", "li", "dd", "figure"))
_CHROME_ROLES = frozenset(("navigation", "banner", "search", "complementary", "contentinfo", "menu", "menubar",
                           "dialog", "alertdialog", "toolbar", "tablist"))
# Words of an id or class that name chrome (matched whole, after splitting on "-", "_" and case changes). Not
# "banner" (a hero banner holds a page's lead) nor "comment" (a forum's or Q&A site's posts are its content).
_CHROME_WORDS = frozenset(
    "cookie cookies cookiebot onetrust didomi consent gdpr ccpa dialog newsletter subscribe subscription signup share sharing social "
    "sidebar breadcrumb breadcrumbs crumbs nav navbar navigation menu menubar topbar toolbar masthead footer "
    "header skip skiplink ad ads advert adverts advertisement sponsor sponsored promo popup modal overlay "
    "related recommended disqus outbrain taboola blogroll".split()
)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# Kept as themselves; other block elements become <div>, other inline elements their text.
_KEEP = frozenset("p h1 h2 h3 h4 h5 h6 ul ol li dl dt dd table tr th td caption blockquote pre hr br".split())
_AS_DIV = frozenset(
    "div article section main header footer figure figcaption address details summary center fieldset legend "
    "hgroup menu dir form tbody thead tfoot".split()
)
_VOID = frozenset(("hr", "br"))
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_UNSAFE_HREF = re.compile(r"^\s*(javascript|vbscript|data|file)\s*:", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TITLE_SEPARATORS = re.compile(r"\s+[|\-–—·•:»«/]+\s+|\s*::\s*")
_MAIN_SHARE = 0.25  # a <main> holding less of the page's text than this is not taken as its main text
_CHROME_SHARE = 0.4  # an element holding more of the page's text than this is never dropped as chrome
_MIN_MAIN_CHARS = 200
_PARSER = lxml.etree.HTMLParser(remove_comments=True, remove_pis=True, no_network=True)
_UTF8_PARSER = lxml.etree.HTMLParser(remove_comments=True, remove_pis=True, no_network=True, encoding="utf-8")
_HEAD = '<!DOCTYPE html><html><head><meta charset="utf-8">'
_EMPTY = f"{_HEAD}<title></title></head><body></body></html>"


def decode_html(data: bytes) -> str:
    """The text of a page file: by its byte order mark, else as UTF-8 when it is valid UTF-8, else by the
    ``<meta charset>`` (or ``http-equiv`` content type) in its first 4 KiB, else as windows-1252. Never
    raises; bytes the encoding cannot read become U+FFFD.

    >>> decode_html('<meta charset="windows-1252"><p>Café</p>'.encode("cp1252"))
    '<meta charset="windows-1252"><p>Café</p>'
    """
    for bom, name in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                      (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            return data[len(bom):].decode(name, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return data.decode(_declared_encoding(data[:4096]) or "cp1252", errors="replace")


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def _declared_encoding(head: bytes) -> str | None:
    match = _META_CHARSET.search(head)
    if match is None:
        return None
    try:
        name = codecs.lookup(match.group(1).decode("ascii")).name
    except (LookupError, UnicodeDecodeError):
        return None
    # As browsers read them: latin-1 and ASCII pages are windows-1252; a page read as bytes is not UTF-16.
    if name in ("latin-1", "iso8859-1", "ascii", "utf-16", "utf-16-le", "utf-16-be", "utf-32"):
        return "cp1252"
    return name


def clean_html(html: str) -> str:
    """``html`` cut down to its title, main text and links, as a small HTML document (see the module's
    docstring for what is kept). Never raises; the same input always gives the same output.

    >>> clean_html("<p>Hello <b>world</b>.<script>alert(1)</script></p>")
    '<!DOCTYPE html><html><head><meta charset="utf-8"><title></title></head><body><p>Hello world.</p></body></html>'
    """
    root = _parse(html[:MAX_HTML_CHARS])
    if root is None:
        return _EMPTY
    body = root.find("body")
    if body is None:
        body = root
    drop = _dropped(root)
    main = _main_region(body, drop)
    h1 = _first_h1(main, drop) if main is not body else None
    h1 = h1 if h1 is not None else _first_h1(body, drop)
    # Chrome is looked for only in the main region, and never in what holds the <h1>.
    keep = set() if h1 is None else {h1, *h1.iterancestors()}
    _ChromeFinder(drop, keep, _chars(main, drop)).visit(main)
    # The heading a "<heading> | <site>" title names: the main region's first <h1> (else <h2>), then the <h1>.
    named = [h for h in (_first_heading(main, drop) if main is not body else None, h1) if h is not None]
    out = [_HEAD, f"<title>{_escape(_choose_title(root, named, h1, drop))}</title></head><body>"]
    if h1 is not None and main is not body and main not in keep:
        out.append(f"<h1>{_escape(_folded(h1, drop))}</h1>")
    _Writer(out, drop).write_children(main)
    out.append("</body></html>")
    return "".join(out)


def _parse(html: str) -> lxml.etree._Element | None:
    html = _LONG_TAG.sub(_tame_tag, _CONTROL.sub(" ", html))
    if not html.strip():
        return None
    try:
        return lxml.etree.fromstring(html, _PARSER)
    except ValueError:  # a str lxml refuses (an XML encoding declaration, a lone surrogate): parse its bytes
        try:
            return lxml.etree.fromstring(html.encode("utf-8", errors="replace"), _UTF8_PARSER)
        except (ValueError, lxml.etree.XMLSyntaxError):
            return None
    except lxml.etree.XMLSyntaxError:
        return None


# libxml2 takes time quadratic in the number of a tag's attributes (it checks each against the others): a tag
# over 512 characters with more than 64 attributes loses them all. No real page has such a tag.
_LONG_TAG = re.compile(r"<([A-Za-z][^\s<>/]*)([^<>]{512,})>")
_MAX_ATTRIBUTES = 64


def _tame_tag(match: re.Match) -> str:
    return f"<{match.group(1)}>" if match.group(2).count("=") > _MAX_ATTRIBUTES else match.group(0)


def _dropped(root: lxml.etree._Element) -> set[lxml.etree._Element]:
    """The elements never shown: scripts and the like, and what is hidden."""
    drop = set()
    for element in root.iter():
        if not isinstance(element.tag, str):
            continue
        if element.tag in _DROP or _hidden(element):
            drop.add(element)
    return drop


def _hidden(element: lxml.etree._Element) -> bool:
    if element.get("hidden") is not None or (element.get("aria-hidden") or "").strip().lower() == "true":
        return True
    style = element.get("style")
    return bool(style) and _HIDDEN_STYLE.search(style) is not None


def _shown(region: lxml.etree._Element, drop: set) -> list[lxml.etree._Element]:
    """The elements inside ``region`` that are shown (not dropped, nor inside what is), in page order."""
    shown, stack = [], list(reversed(region))
    while stack:
        element = stack.pop()
        if isinstance(element.tag, str) and element not in drop:
            shown.append(element)
            stack.extend(reversed(element))
    return shown


def _first_h1(region: lxml.etree._Element, drop: set) -> lxml.etree._Element | None:
    return next((e for e in _shown(region, drop) if e.tag == "h1" and _folded(e, drop)), None)


def _first_heading(region: lxml.etree._Element, drop: set) -> lxml.etree._Element | None:
    """The region's first ``<h1>``, else its first ``<h2>`` (a page whose ``<h1>`` is the site's name in its
    header titles its article with an ``<h2>``)."""
    shown = [e for e in _shown(region, drop) if e.tag in ("h1", "h2") and _folded(e, drop)]
    return next((e for e in shown if e.tag == "h1"), shown[0] if shown else None)


def _nonspace(text: str | None) -> int:
    return len("".join(text.split())) if text else 0


def _chars(element: lxml.etree._Element, drop: set) -> int:
    """How many non-space characters ``element`` shows (not those of dropped elements inside it)."""
    total = _nonspace(element.text)
    for child in element:
        if isinstance(child.tag, str) and child not in drop:
            total += _chars(child, drop)
        total += _nonspace(child.tail)
    return total


def _main_region(body: lxml.etree._Element, drop: set) -> lxml.etree._Element:
    """The page's ``<main>`` (or ``role="main"``, or its only outermost ``<article>``) when it holds a fair
    share of the text; else the body."""
    shown = _shown(body, drop)
    candidates = [e for e in shown if e.tag == "main" or (e.get("role") or "").strip().lower() == "main"]
    articles = [e for e in shown if e.tag == "article" and not any(a.tag == "article" for a in e.iterancestors())]
    if len(articles) == 1:
        candidates.append(articles[0])
    if not candidates:
        return body
    total = _chars(body, drop)
    for element in candidates:
        chars = _chars(element, drop)
        if chars >= min(_MIN_MAIN_CHARS, total) and chars >= _MAIN_SHARE * total:
            return element
    return body


class _ChromeFinder:
    """Adds the navigation, banners, sidebars and the like of a region to ``drop`` (see the module docstring);
    never an element in ``keep`` or one that holds a ``<main>`` or ``<article>``, and never by its id, class or
    being a form one that holds more than :data:`_CHROME_SHARE` of the region's text."""

    def __init__(self, drop: set, keep: set, region_chars: int):
        self.drop, self.keep, self.limit = drop, keep, _CHROME_SHARE * region_chars

    def visit(self, element: lxml.etree._Element) -> None:
        for child in element:
            if not isinstance(child.tag, str) or child in self.drop:
                continue
            if child not in self.keep and self.is_chrome(child):
                self.drop.add(child)
            else:
                self.visit(child)

    def is_chrome(self, element: lxml.etree._Element) -> bool:
        tag = element.tag
        role = (element.get("role") or "").strip().lower()
        named = False  # chrome by its tag or role (sure), or by its id, class or being a form (a guess)
        if tag in _CHROME or role in _CHROME_ROLES:
            chrome = True
        elif tag in _PAGE_CHROME:
            chrome = not any(a.tag in _SECTIONING for a in element.iterancestors())
        elif tag == "form":
            chrome = named = element.find(".//p") is None and next(element.iter(*_HEADINGS), None) is None
        else:
            words = f"{element.get('id') or ''} {element.get('class') or ''}"
            chrome = named = any(w.lower() in _CHROME_WORDS for w in _WORD.findall(words))
        if not chrome or next(element.iter("main", "article"), None) is not None:
            return False
        return not named or _chars(element, self.drop) <= self.limit


_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")


def _folded(element: lxml.etree._Element, drop: AbstractSet[lxml.etree._Element] = frozenset()) -> str:
    """The text ``element`` shows (not that of dropped elements inside it), whitespace folded."""
    pieces: list[str] = []
    _text_pieces(element, drop, pieces)
    return " ".join("".join(pieces).split())


def _text_pieces(element: lxml.etree._Element, drop: AbstractSet[lxml.etree._Element], pieces: list[str]) -> None:
    if element.text:
        pieces.append(element.text)
    for child in element:
        if isinstance(child.tag, str) and child not in drop:
            _text_pieces(child, drop, pieces)
        if child.tail:
            pieces.append(child.tail)


def _choose_title(root: lxml.etree._Element, named: list[lxml.etree._Element], h1: lxml.etree._Element | None,
                  drop: set) -> str:
    """The ``<title>``, or the first of the ``named`` headings it names beside a site name; else the ``<h1>``,
    else ``og:title``."""
    titles = (t for t in root.iter("title") if not any(a.tag == "svg" for a in t.iterancestors()))
    title_element = next(titles, None)
    title = "" if title_element is None else _folded(title_element)
    parts = [p.strip().casefold() for p in _TITLE_SEPARATORS.split(title)] if title else []
    for element in named if len(parts) > 1 else ():
        text = _folded(element, drop)
        if text.casefold() in parts:  # "Edra Vane | Wiki": the heading without the site's name
            title = text
            break
    heading = "" if h1 is None else _folded(h1, drop)
    if not title:
        title = heading
    if not title:
        for meta in root.iter("meta"):
            if (meta.get("property") or meta.get("name") or "").lower() == "og:title":
                title = " ".join((meta.get("content") or "").split())
                break
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 3].rstrip() + "..."


def _escape(text: str) -> str:
    return html_lib.escape(text, quote=False)


class _Writer:
    """Writes the kept part of a tree as HTML: block elements as themselves (or ``<div>``), links with their
    ``href``, everything else as its text."""

    def __init__(self, out: list[str], drop: set):
        self.out, self.drop = out, drop

    def write_children(self, element: lxml.etree._Element) -> None:
        if element.text and element.tag != "html":
            self.out.append(_escape(element.text))
        for child in element:
            self.write(child)

    def write(self, element: lxml.etree._Element) -> None:
        tag = element.tag
        if isinstance(tag, str) and element not in self.drop:
            name = tag if tag in _KEEP else "div" if tag in _AS_DIV else ""
            if tag == "a":
                href = " ".join((element.get("href") or "").split())
                if href and not _UNSAFE_HREF.match(href):
                    name = "a"
                    self.out.append(f'<a href="{html_lib.escape(href)}">')
            elif name:
                self.out.append(f"<{name}>")
            if name not in _VOID:
                self.write_children(element)
                if name:
                    self.out.append(f"</{name}>")
        if element.tail:
            self.out.append(_escape(element.tail))
