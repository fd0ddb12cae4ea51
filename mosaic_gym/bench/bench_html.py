"""Benchmark how a user corpus's HTML becomes page text, title and links: today's lxml cleaner beside the path
corpora took before it and beside the same cleaner written over beautifulsoup4.

Three ways from a page file's bytes to what the agent reads (title, text, numbered links), run in this one
process on the same pages:

- ``before``: the bytes decoded as UTF-8 (bad bytes replaced), then :func:`~envs.web.browser.html_title`,
  :func:`~envs.web.browser.html_text` and :func:`~envs.web.browser.html_to_view` on the page as written: the
  corpus path before :mod:`envs.web.clean` (the baseline of the ratios).
- ``lxml``: :func:`~envs.web.clean.decode_html` then :func:`~envs.web.clean.clean_html` (lxml.etree), then the
  same three: what :class:`~envs.web.corpus.CorpusSite` does now.
- ``bs4``: ``BeautifulSoup(bytes, "lxml")`` (its own encoding detection, libxml2 underneath) and the same
  cleaning rules over its tree (:func:`bs4_clean`), then the same three; skipped when beautifulsoup4 is not
  installed.

Quality, over the pages of :mod:`mosaic_gym.bench.messy_pages` (each says what a reader of it should get):
titles right, main-text phrases shown, boilerplate and script phrases leaked, links found and links that should
not be there; and which of four pages that do not declare their encoding (windows-1252, Shift JIS, KOI8-R, GBK)
read right. Speed: milliseconds per page, best of three runs over every messy page, and over pages of the
builtin site (clean pages: what the cleaning costs where there is nothing to clean), each beside ``before``.

Usage:
    python -m mosaic_gym.bench.bench_html            # every messy page, 200 builtin pages, best of 3
    python -m mosaic_gym.bench.bench_html --quick    # 50 builtin pages
    python -m mosaic_gym.bench.bench_html --smoke    # 10 builtin pages, one run
"""

from __future__ import annotations

import argparse
import html as html_lib
import sys
import time
from typing import Any, Callable

from mosaic_gym.bench.common import figure, machine
from mosaic_gym.bench.registry import Benchmark
from mosaic_gym.bench.messy_pages import PAGES, MessyPage
from envs.web import clean
from envs.web.browser import html_text, html_title, html_to_view

PACKAGES = ("lxml", "beautifulsoup4")
SETTINGS = {"full": {"builtin_pages": 200, "repeat": 3}, "quick": {"builtin_pages": 50, "repeat": 3},
            "smoke": {"builtin_pages": 10, "repeat": 1}}


def before(data: bytes) -> str:
    """A page file as corpora read it before :mod:`envs.web.clean`: UTF-8, bad bytes replaced, as written."""
    return data.decode("utf-8", errors="replace")


def with_lxml(data: bytes) -> str:
    """What :class:`~envs.web.corpus.CorpusSite` serves now."""
    return clean.clean_html(clean.decode_html(data))


def read(html: str, path: str) -> tuple[str, str, tuple[str, ...]]:
    """What the agent gets of ``html`` served at ``path``: its title, its text and its links' urls."""
    view = html_to_view(html, path)
    return html_title(html), html_text(html), tuple(link.url for link in view.links)


# --- the same cleaning rules over beautifulsoup4 ---------------------------------------------------------------


def bs4_clean(data: bytes) -> str:
    """:func:`envs.web.clean.clean_html`'s rules over ``BeautifulSoup(data, "lxml")``: the page's bytes, decoded
    by beautifulsoup4 (byte order mark, declared charset, then what charset_normalizer guesses)."""
    from bs4 import BeautifulSoup, Tag

    soup = BeautifulSoup(data[: clean.MAX_HTML_CHARS], "lxml")
    title_element = next((t for t in soup.find_all("title") if t.find_parent("svg") is None), None)
    title = "" if title_element is None else " ".join(title_element.get_text().split())
    og = soup.find("meta", attrs={"property": "og:title"}) or soup.find("meta", attrs={"name": "og:title"})
    og_title = " ".join(str(og.get("content") or "").split()) if og is not None else ""
    for element in soup.find_all(lambda t: t.name in clean._DROP or _bs4_hidden(t)):
        if not element.decomposed:
            element.decompose()
    body = soup.body or soup
    main = _bs4_main(body)
    h1 = _bs4_first_h1(main) if main is not body else None
    h1 = h1 if h1 is not None else _bs4_first_h1(body)
    keep = set() if h1 is None else {id(h1), *(id(p) for p in h1.parents)}
    limit = clean._CHROME_SHARE * _bs4_chars(main)
    stack = [main]
    while stack:
        for child in list(stack.pop().children):
            if not isinstance(child, Tag):
                continue
            if id(child) not in keep and _bs4_chrome(child) and _bs4_chars(child) <= limit:
                child.decompose()
            else:
                stack.append(child)
    named = [h for h in (_bs4_first_heading(main) if main is not body else None, h1) if h is not None]
    title = _bs4_title(title, og_title, named, h1)
    out = [clean._HEAD, f"<title>{html_lib.escape(title, quote=False)}</title></head><body>"]
    if h1 is not None and main is not body and id(main) not in keep:
        out.append(f"<h1>{html_lib.escape(' '.join(h1.get_text().split()), quote=False)}</h1>")
    _bs4_write(main, out, top=True)
    out.append("</body></html>")
    return "".join(out)


def _bs4_hidden(tag: Any) -> bool:
    if tag.get("hidden") is not None or str(tag.get("aria-hidden") or "").strip().lower() == "true":
        return True
    style = tag.get("style")
    return bool(style) and clean._HIDDEN_STYLE.search(str(style)) is not None


def _bs4_chars(tag: Any) -> int:
    return len("".join(tag.get_text().split()))


def _bs4_first_h1(region: Any) -> Any:
    return next((h for h in region.find_all("h1") if h.get_text().strip()), None)


def _bs4_main(body: Any) -> Any:
    candidates = body.find_all(lambda t: t.name == "main" or str(t.get("role") or "").strip().lower() == "main")
    articles = [a for a in body.find_all("article") if a.find_parent("article") is None]
    if len(articles) == 1:
        candidates.append(articles[0])
    total = _bs4_chars(body)
    for element in candidates:
        chars = _bs4_chars(element)
        if chars >= min(clean._MIN_MAIN_CHARS, total) and chars >= clean._MAIN_SHARE * total:
            return element
    return body


def _bs4_chrome(tag: Any) -> bool:
    role = str(tag.get("role") or "").strip().lower()
    if tag.name in clean._CHROME or role in clean._CHROME_ROLES:
        chrome = True
    elif tag.name in clean._PAGE_CHROME:
        chrome = not any(p.name in clean._SECTIONING for p in tag.parents)
    elif tag.name == "form":
        chrome = tag.find("p") is None and tag.find(clean._HEADINGS) is None
    else:
        classes = tag.get("class") or []
        words = f"{tag.get('id') or ''} {' '.join(classes) if isinstance(classes, list) else classes}"
        chrome = any(w.lower() in clean._CHROME_WORDS for w in clean._WORD.findall(words))
    return chrome and tag.find(["main", "article"]) is None


def _bs4_first_heading(region: Any) -> Any:
    shown = [h for h in region.find_all(["h1", "h2"]) if h.get_text().strip()]
    return next((h for h in shown if h.name == "h1"), shown[0] if shown else None)


def _bs4_title(title: str, og_title: str, named: list[Any], h1: Any) -> str:
    parts = [p.strip().casefold() for p in clean._TITLE_SEPARATORS.split(title)] if title else []
    for element in named if len(parts) > 1 else ():
        text = " ".join(element.get_text().split())
        if text.casefold() in parts:
            title = text
            break
    heading = "" if h1 is None else " ".join(h1.get_text().split())
    if not title:
        title = heading
    title = title or og_title
    return title if len(title) <= clean.TITLE_CHARS else title[: clean.TITLE_CHARS - 3].rstrip() + "..."


def _bs4_write(tag: Any, out: list[str], top: bool = False) -> None:
    """Iterative (beautifulsoup4's trees are as deep as the page): block tags kept, links with a safe href."""
    from bs4 import NavigableString, Tag
    from bs4.element import PreformattedString

    stack: list[Any] = [(child, False) for child in reversed(list(tag.children))]
    while stack:
        node, closing = stack.pop()
        if closing:
            out.append(node)
            continue
        if isinstance(node, NavigableString):
            if not isinstance(node, PreformattedString):  # comments, doctypes, CDATA
                out.append(html_lib.escape(str(node), quote=False))
            continue
        if not isinstance(node, Tag):
            continue
        name = node.name if node.name in clean._KEEP else "div" if node.name in clean._AS_DIV else ""
        if node.name == "a":
            href = " ".join(str(node.get("href") or "").split())
            if href and not clean._UNSAFE_HREF.match(href):
                name = "a"
                out.append(f'<a href="{html_lib.escape(href)}">')
        elif name:
            out.append(f"<{name}>")
        if name in clean._VOID:
            continue
        if name:
            stack.append((f"</{name}>", True))
        stack.extend((child, False) for child in reversed(list(node.children)))


# --- measuring -------------------------------------------------------------------------------------------------


def quality(method: Callable[[bytes], str], pages: tuple[MessyPage, ...] = PAGES) -> dict[str, Any]:
    """How much of what each page should give ``method`` gives: counts over every page, and each page's misses."""
    counts = {"titles_right": 0, "titles": 0, "main_shown": 0, "main": 0, "chrome_leaked": 0, "chrome": 0,
              "links_found": 0, "links": 0, "wrong_links": 0, "not_links": 0}
    misses: dict[str, dict[str, Any]] = {}
    for page in pages:
        title, text, urls = read(method(page.data), page.path)
        lost_main = [m for m in page.main if m not in text]
        leaked = [c for c in page.chrome if c in text]
        lost_links = [u for u in page.links if u not in urls]
        wrong_links = [u for u in page.not_links if u in urls]
        missed = {"title": None if title == page.title else repr(title[:80]), "main": lost_main,
                  "leaked": leaked, "links": lost_links, "wrong_links": wrong_links}
        counts["titles"] += 1
        counts["titles_right"] += title == page.title
        counts["main"] += len(page.main)
        counts["main_shown"] += len(page.main) - len(lost_main)
        counts["links"] += len(page.links)
        counts["links_found"] += len(page.links) - len(lost_links)
        counts["chrome"] += len(page.chrome)
        counts["chrome_leaked"] += len(leaked)
        counts["not_links"] += len(page.not_links)
        counts["wrong_links"] += len(wrong_links)
        wrong = {k: v for k, v in missed.items() if v}
        if wrong:
            misses[page.file] = wrong
    return {**counts, "misses": misses}


#: Pages that do not say their encoding (no byte order mark, no ``<meta charset>``), with the sentence each holds.
UNDECLARED = {
    "windows-1252": "Unsere Spezialität: Apfelstrudel für 4,50 € – naïve Gäste.",
    "shift_jis": "東京都の天気は晴れです。明日は雨が降るでしょう。",
    "koi8-r": "Привет, как дела? Сегодня хорошая погода.",
    "gbk": "今天天气很好，我们去公园散步吧。",
}


def undeclared(method: Callable[[bytes], str]) -> dict[str, bool]:
    """Whether ``method`` reads each :data:`UNDECLARED` page's sentence right."""
    return {encoding: sentence in html_text(method(f"<html><body><p>{sentence}</p></body></html>".encode(encoding)))
            for encoding, sentence in UNDECLARED.items()}


def speed(method: Callable[[bytes], str], pages: list[tuple[bytes, str]], repeat: int) -> float:
    """Milliseconds per page, from the bytes to title, text and links: the best of ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for data, path in pages:
            read(method(data), path)
        best = min(best, time.perf_counter() - start)
    return round(1000 * best / len(pages), 3)


def builtin_pages(count: int) -> list[tuple[bytes, str]]:
    """``count`` pages of the builtin site (seed 0, 300 entities) as page files' bytes, with their paths."""
    from envs.web.builtin import BuiltinSite

    site = BuiltinSite(seed=0, size=300)
    paths = [d.path for d in site.documents()]
    step = max(1, len(paths) // count)
    pages = []
    for path in paths[::step][:count]:
        html = site.page_html(path)
        if html is None:
            raise RuntimeError(f"the builtin site lists {path} among its documents but renders no page there")
        pages.append((html.encode("utf-8"), path))
    return pages


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark as one JSON-ready dict, at ``args.settings``."""
    settings = args.settings
    config = SETTINGS[settings]
    methods: dict[str, Callable[[bytes], str]] = {"before": before, "lxml": with_lxml}
    try:
        import bs4  # noqa: F401
        methods["bs4"] = bs4_clean
    except ImportError:
        pass
    messy = [(p.data, p.path) for p in PAGES]
    builtin = builtin_pages(config["builtin_pages"])
    result: dict[str, Any] = {"bench": "html", "settings": settings, "machine": machine(PACKAGES),
                              "messy_pages": len(PAGES), "messy_bytes": sum(len(p.data) for p in PAGES),
                              "builtin_pages": len(builtin), "methods": {}}
    for name, method in methods.items():
        result["methods"][name] = {
            "quality": quality(method),
            "undeclared_encodings_read": undeclared(method),
            "messy_ms_per_page": speed(method, messy, config["repeat"]),
            # The page with the 3 MB attribute alone, and the rest without it: one page is most of the time.
            "messy_ms_per_page_without_huge": speed(method, [m for m in messy if len(m[0]) < 1_000_000],
                                                    config["repeat"]),
            "builtin_ms_per_page": speed(method, builtin, config["repeat"]),
        }
    base = result["methods"]["before"]
    for entry in result["methods"].values():
        for key in ("messy_ms_per_page", "messy_ms_per_page_without_huge", "builtin_ms_per_page"):
            entry[key.replace("ms_per_page", "ratio")] = round(entry[key] / base[key], 3)
    return result


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows: each cleaner's quality and time per page beside the path corpora took before."""
    rows = []
    base = result["methods"]["before"]
    bq = base["quality"]
    for name, entry in result["methods"].items():
        if name == "before":
            continue
        q = entry["quality"]
        rows += [
            figure(f"{name}: main-text phrases shown", q["main_shown"], f"of {q['main']}", "before",
                   bq["main_shown"]),
            figure(f"{name}: boilerplate/script phrases leaked", q["chrome_leaked"], f"of {q['chrome']}", "before",
                   bq["chrome_leaked"]),
            figure(f"{name}: titles right", q["titles_right"], f"of {q['titles']}", "before", bq["titles_right"]),
            figure(f"{name}: messy pages, bytes to title, text and links", entry["messy_ms_per_page"], "ms/page",
                   "before", base["messy_ms_per_page"]),
            figure(f"{name}: messy pages but the 3 MB one", entry["messy_ms_per_page_without_huge"], "ms/page",
                   "before", base["messy_ms_per_page_without_huge"]),
            figure(f"{name}: builtin pages, bytes to title, text and links", entry["builtin_ms_per_page"],
                   "ms/page", "before", base["builtin_ms_per_page"]),
        ]
    return rows


BENCHMARK = Benchmark(
    "html", "a user corpus's HTML to page text, title and links: the lxml cleaner's quality and time per page "
    "beside the path corpora took before it, and beside the same rules over beautifulsoup4", measure, figures,
    quick="50 builtin pages", smoke="10 builtin pages, one run (figures too short to trust)", suites=())


if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
