"""A user's own corpus as a :class:`~envs.web.site.Site`: a folder of HTML files, or JSONL documents.

Two layouts load, each with an optional ``tasks.jsonl`` beside the pages:

- **A folder of HTML files.** ``a/b.html`` is served at ``/a/b`` (and at ``/a/b.html``); ``a/index.html``
  at ``/a/`` (and ``/a``, ``/a/index.html``); ``index.html`` is the home page ``/``. A page is shown and
  indexed cut down to its title, main text and links (:mod:`envs.web.clean`: navigation, headers and footers,
  cookie banners, sidebars, scripts, forms and embedded content dropped; a file in another encoding than UTF-8
  read by its ``<meta charset>``); its title is its ``<title>`` (less a site name after its ``<h1>``), else its
  first ``<h1>``, else its file name. ``load_corpus(path, clean=False)`` shows pages as written. ``mosaic site
  build`` writes this layout.
- **JSONL documents** (the shape BrowseComp-Plus uses): a folder with ``documents.jsonl``, or the path of
  any ``.jsonl`` documents file, with ``tasks.jsonl`` beside it. One document a line::

      {"id": "d1", "url": "/wiki/Edra_Vane", "title": "Edra Vane", "text": "Edra Vane was a painter."}

  with ``"html"`` instead of ``"text"`` for HTML documents (text is shown as simple paragraphs). The page
  path is ``url`` when it is a site path (``wiki/X`` counts as ``/wiki/X``), ``/<host><path>`` for an
  absolute URL (which opens too: ``open("https://example.org/wiki/X")`` shows ``/example.org/wiki/X``), and
  ``/doc/<id>`` when ``url`` is absent or its path is already taken.

**BrowseComp-Plus field names** load as they are: a document's ``docid`` is its ``id`` and its ``title``
may be left out (the text's first line stands in, shown once: a ``---`` front-matter block's ``title:``, else
the first line, then not repeated as a heading); a query's ``query_id`` and ``query`` are a task's ``id`` and
``question``, and its ``evidence_docs`` and ``gold_docs`` are its gold path (its ``negative_docs`` are
ignored). Save the queries as ``tasks.jsonl`` beside ``documents.jsonl``.

The search index over the pages is saved beside them, in the hidden folder ``.mosaic-index/``, and mapped by
every later process (:mod:`envs.web.bm25`); it is rebuilt when a corpus file's size or modification time changes.

``tasks.jsonl`` holds one task a line::

    {"id": "t1", "question": "Who ...?", "answer": "Edra Vane", "aliases": ["Vane"]}

with optional ``hops`` (int, default 1), ``family`` (default ``"corpus"``), ``answer_kind`` (default
``"text"``), ``split`` (``"train"``/``"test"``; by default a fixed hash of the id puts about 20% in test, the
rest in train, so an env's default ``split="train"`` has tasks), ``search_queries`` (what the env's candidates
offer to search; by default the names the question mentions, then the question itself: :func:`question_queries`)
and ``evidence_docs``/``gold_docs`` (lists of document ids or page paths, or BrowseComp-Plus's objects with a
``docid``): the gold path the oracle follows is a search, then opening each evidence document and each gold
document, reading on to the answer where a gold document states it (:func:`gold_path`). A task without them has
no gold path, and the oracle refuses it.
Anything malformed raises :class:`CorpusError` naming the file, the line and what a valid line looks like
(bytes that are not UTF-8, numbers past Python's 4,300-digit limit and JSON nested past its recursion limit
included). Links in an HTML folder that lead nowhere (a loop, a missing target) are skipped with a
:class:`CorpusWarning` naming them; the rest of the folder loads.

Example:
    >>> site = load_corpus("tests/fixtures/corpus_jsonl")
    >>> site.render("/wiki/Anselm_Rook") is not None, len(site.tasks) > 0
    (True, True)
"""

from __future__ import annotations

import errno
import hashlib
import html as html_lib
import json
import os
import re
import sys
import urllib.parse
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from .checks import shown
from .browser import html_text, html_title
from .clean import MAX_HTML_CHARS, clean_html, decode_html
from .site import SEARCH_PATH, Site
from .types import Document, GoldStep, Task

TASKS_FILE = "tasks.jsonl"
DOCUMENTS_FILE = "documents.jsonl"
TEST_FRACTION = 0.2
HTML_SUFFIXES = (".html", ".htm")
SPLITS = ("train", "test")

_DOCUMENT_EXAMPLE = '{"id": "d1", "url": "/wiki/Edra_Vane", "title": "Edra Vane", "text": "Edra Vane was a painter."}'
TASK_EXAMPLE = '{"id": "t1", "question": "Who ...?", "answer": "Edra Vane", "aliases": ["Vane"]}'
_DOCUMENT_KEYS = ("id", "url", "title", "text", "html")
_TASK_KEYS = ("id", "question", "answer", "aliases", "hops", "family", "answer_kind", "split", "search_queries",
              "evidence_docs", "gold_docs")
#: The field names of BrowseComp-Plus (and of most retrieval corpora), read as ours: a document's ``docid`` is
#: its ``id``; a query's ``query_id`` and ``query`` are a task's ``id`` and ``question``.
DOCUMENT_KEY_ALIASES = {"docid": "id"}
TASK_KEY_ALIASES = {"query_id": "id", "query": "question"}
#: BrowseComp-Plus query fields that a task does not use (the documents they list are in the corpus already).
TASK_KEYS_IGNORED = ("negative_docs",)
#: The tasks' document lists, in the order the gold path opens them: the evidence, then the documents that
#: state the answer.
GOLD_DOC_KEYS = ("evidence_docs", "gold_docs")
#: Most name spans :func:`question_queries` takes from a question.
MAX_NAME_QUERIES = 3
#: A gold step's note (the sentence that states the answer) is cut here.
MAX_NOTE_CHARS = 200
TITLE_CHARS = 120
#: The search index is saved here, beside the pages (a hidden folder: never read as part of the corpus).
INDEX_FOLDER = ".mosaic-index"
#: Bumped when how files become documents changes: indexes saved before are then rebuilt.
INDEX_FORMAT = 2


class CorpusError(ValueError):
    """A corpus that is missing or malformed; the message names the file, the line and the fix."""


class CorpusWarning(UserWarning):
    """Part of a corpus was skipped (a link that leads nowhere); the message names what and why."""


@dataclass(frozen=True)
class CorpusPage:
    """One page of a corpus.

    Attributes:
        path: where the page is served (a site path such as ``/wiki/X``).
        source: the page's HTML, the file that holds it (read when the page is asked for), or ``None`` for a
            text document, shown as simple paragraphs of ``text`` (made when the page is asked for: holding
            every page's HTML beside its text would double a large corpus in memory).
        title: the page's title; ``""`` to take it from the HTML.
        text: the page's searchable text; ``None`` to take the visible text of the HTML.
        aliases: other paths that serve the same page.
        heading: whether a text document shows its title as a heading; ``False`` when the title is the text's
            own first line (shown once, as the text's first line).
    """

    path: str
    source: str | Path | None
    title: str = ""
    text: str | None = None
    aliases: tuple[str, ...] = ()
    heading: bool = True


class CorpusSite(Site):
    """A :class:`Site` over a fixed list of pages and tasks (see :func:`load_corpus`).

    Example:
        >>> site = CorpusSite("demo", [CorpusPage("/", "<title>Home</title><p>Hello.</p>")])
        >>> [d.title for d in site.documents()], site.page_html("/missing")
        (['Home'], None)
    """

    def __init__(self, name: str, pages: Sequence[CorpusPage], tasks: Sequence[Task] = (),
                 index_folder: Path | None = None, files: Sequence[Path] = (), root: Path | None = None,
                 clean: bool = True):
        """``index_folder``: where the search index is saved (``None``: in memory only); ``files``: what the
        pages are read from, whose sizes and times say whether a saved index is still this corpus's;
        ``root``: the folder a page's file must really be in (links resolved, as it is when read) to be
        read, so that a page swapped for a link to ``tasks.jsonl`` after loading shows nothing; ``clean``:
        serve and index each HTML page cut down to its title, main text and links
        (:func:`envs.web.clean.clean_html`: no navigation, boilerplate, script or embedded content), rather
        than as written."""
        self.name = name
        self.clean = clean
        self.root = None if root is None else root.resolve()
        self._index_folder, self._files = index_folder, tuple(files)
        self.tasks = tuple(tasks)
        self.pages = tuple(pages)
        self._routes: dict[str, CorpusPage] = {page.path: page for page in self.pages}
        for page in self.pages:
            for alias in page.aliases:
                self._routes.setdefault(alias, page)
        self._documents: tuple[Document, ...] | None = None

    def documents(self) -> Iterator[Document]:
        if self._documents is None:
            self._documents = tuple(self._document(page) for page in self.pages)
        return iter(self._documents)

    def page_html(self, path: str) -> str | None:
        """The page's HTML as written (what ``mosaic site build`` copies); :meth:`render` serves it cleaned."""
        page = self._routes.get(path)
        return None if page is None else self._read(page)

    def render(self, url: str) -> str | None:
        """The HTML served at ``url``: an HTML page cut down to its title, main text and links
        (:func:`envs.web.clean.clean_html`; as written when the site was made with ``clean=False``), a text
        document's paragraphs, the search page, or ``None`` for a missing page."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path) or "/"
        page = None if path == SEARCH_PATH else self._routes.get(path)
        if page is None:
            return super().render(url)
        return self._shown(page)

    def _shown(self, page: CorpusPage) -> str | None:
        """The page's HTML as the agent is shown it and its text is indexed: cleaned unless ``clean=False``
        (a text document's paragraphs are made here, clean already)."""
        html = self._read(page)
        return clean_html(html) if html is not None and self.clean and page.source is not None else html

    def _read(self, page: CorpusPage) -> str | None:
        """The page's HTML; ``None`` when its file may not be read (see :func:`page_target`) or is gone."""
        if page.source is None:
            return text_to_html(page.title, page.text or "", heading=page.heading)
        if not isinstance(page.source, Path):
            return page.source
        file = page.source if self.root is None else page_target(page.source, self.root)
        if file is None:
            return None
        try:
            with open(file, "rb") as f:
                # The first MAX_HTML_CHARS bytes: a page is never more than that (envs.web.clean).
                return decode_html(f.read(MAX_HTML_CHARS))
        except OSError:  # removed or made unreadable since the corpus loaded: no such page
            return None

    def local_path(self, url: str) -> str | None:
        """The site path of a document whose own ``url`` is absolute (``https://example.org/wiki/X`` is served
        at ``/example.org/wiki/X``), with its query; ``None`` when no page of this site has that URL."""
        try:
            parts = urllib.parse.urlsplit(url)
            path = _document_path(urllib.parse.urlunsplit(parts._replace(query="", fragment="")))
        except ValueError:  # a URL urlsplit refuses: no page has it
            return None
        if not parts.netloc or path not in self._routes:
            return None
        return f"{path}?{parts.query}" if parts.query else path

    def page_document(self, ref: str) -> Document | None:
        """The document of the page at site path ``ref``, or ``None`` when there is none."""
        page = self._routes.get(ref)
        return None if page is None else self._document(page)

    def index_location(self) -> tuple[Path, str] | None:
        if self._index_folder is None:
            return None
        files = self._files or [p.source for p in self.pages if isinstance(p.source, Path)]
        stats = [(str(f), *_stat(f)) for f in files]
        return self._index_folder, _fingerprint([INDEX_FORMAT, self.clean, len(self.pages), stats])

    def _document(self, page: CorpusPage) -> Document:
        html = (self._shown(page) or "") if not page.title or page.text is None else ""
        name = page.path.rstrip("/").rsplit("/", 1)[-1].replace("_", " ")
        title = page.title or html_title(html) or name or self.name
        return Document(page.path, title, html_text(html) if page.text is None else page.text)


def _stat(file: Path) -> tuple[int, int]:
    try:
        st = file.stat()
    except OSError:  # gone since the corpus loaded: no saved index matches
        return (-1, -1)
    return st.st_size, st.st_mtime_ns


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode("utf-8")).hexdigest()


def load_corpus(path: str | os.PathLike, clean: bool = True) -> CorpusSite:
    """Load the corpus at ``path``: a folder of HTML files, a folder with ``documents.jsonl``, or a JSONL
    documents file; ``tasks.jsonl`` beside the pages is read when present. HTML pages are shown and indexed
    cut down to their title, main text and links (:func:`envs.web.clean.clean_html`); ``clean=False`` keeps
    them as written (for the Playwright backend with page scripts on, say).

    Raises:
        CorpusError: the path is empty or does not exist, holds no corpus, or a line of a JSONL file is malformed.

    Example:
        >>> site = load_corpus("tests/fixtures/corpus_html")
        >>> site.page_html("/wiki/Mira_Esk") == site.page_html("/wiki/Mira_Esk.html")
        True
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).strip():
        # Path("") is the current folder: never load whatever happens to be there.
        raise CorpusError(f"no corpus path given ({shown(path)}): give the path of a corpus folder or .jsonl file")
    root = Path(path)
    if not root.exists():
        raise CorpusError(
            f"no corpus at {root}: no such file or folder. Give a folder of .html files, a folder with "
            f"{DOCUMENTS_FILE}, or a .jsonl documents file."
        )
    if root.is_file():
        if root.suffix != ".jsonl":
            raise CorpusError(f"{root} is not a .jsonl documents file (one JSON object a line: {_DOCUMENT_EXAMPLE})")
        return _jsonl_site(root, clean)
    if (root / DOCUMENTS_FILE).is_file():
        return _jsonl_site(root / DOCUMENTS_FILE, clean)
    pages = _html_pages(root)
    if not pages:
        raise CorpusError(
            f"no corpus in {root}: it holds neither .html files nor {DOCUMENTS_FILE} "
            f"(one JSON object a line: {_DOCUMENT_EXAMPLE})"
        )
    top = root.resolve()
    site = CorpusSite(top.name, pages, index_folder=top / INDEX_FOLDER / "html", root=top, clean=clean)
    site.tasks = _load_tasks(root / TASKS_FILE, site)
    return site


# --- folders of HTML ----------------------------------------------------------------------------------


def iter_files(root: Path) -> Iterator[str]:
    """The regular files under ``root``, as sorted relative POSIX paths; hidden entries and links that lead
    outside ``root`` are left out (a corpus never reaches beyond its folder). Links that lead nowhere (a loop,
    a missing target) and names that are not UTF-8 are left out too, with one :class:`CorpusWarning` naming
    them: a user would rather have the rest of the folder than no corpus at all.

    >>> "wiki/Mira_Esk.html" in list(iter_files(Path("tests/fixtures/corpus_html")))
    True
    """
    top = root.resolve()
    skipped: list[str] = []
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            file = Path(folder, name)
            relative = file.relative_to(top).as_posix()
            if not _is_utf8(relative):
                skipped.append(f"{relative.encode('utf-8', 'replace').decode('utf-8')} (its name is not UTF-8)")
                continue
            if file.is_symlink():
                try:
                    target = file.resolve(strict=True)
                except RuntimeError:  # how Python 3.11 reports a loop
                    skipped.append(f"{relative} (a symbolic link loop)")
                    continue
                except OSError as err:
                    why = "a symbolic link loop" if err.errno == errno.ELOOP else "a link to a missing file"
                    skipped.append(f"{relative} ({why})")
                    continue
                if not target.is_relative_to(top):
                    continue
            if file.is_file():
                yield relative
    if skipped:
        warnings.warn(
            f"skipped {len(skipped)} file(s) of the corpus at {root}: {'; '.join(skipped[:5])}"
            f"{'; ...' if len(skipped) > 5 else ''}. Fix them to include them; remove them to silence this warning.",
            CorpusWarning,
            stacklevel=2,
        )


def _is_utf8(name: str) -> bool:
    # os.walk hands undecodable bytes back as lone surrogates, which no page path or HTTP reply can carry.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def page_file(path: str) -> str:
    """The file, relative to a site folder, that holds the page at site path ``path`` (the inverse of how
    :func:`load_corpus` serves a folder of HTML).

    >>> page_file("/"), page_file("/wiki/Edra_Vane"), page_file("/category/People/")
    ('index.html', 'wiki/Edra_Vane.html', 'category/People/index.html')

    Raises:
        ValueError: ``path`` is not a plain site path (it climbs out with ``..`` or holds a backslash).
    """
    parts = path.split("/")
    if not path.startswith("/") or "\\" in path or "\0" in path or any(p in (".", "..") for p in parts):
        raise ValueError(f"not a plain site path: {path!r}")
    inner = path.strip("/")
    if not inner or path.endswith("/"):
        return f"{inner}/index.html".lstrip("/")
    return inner if inner.endswith(HTML_SUFFIXES) else inner + ".html"


def page_target(file: Path, top: Path) -> Path | None:
    """The file that a page at ``file`` really reads, links resolved, when a page may read it: an HTML file
    (by its own name, not only the link's) inside the site folder ``top`` and not hidden. ``None`` otherwise:
    ``page.html`` linking to ``tasks.jsonl`` (the answers), to a hidden file or to anything outside the folder
    is no page.

    >>> top = Path("tests/fixtures/corpus_html").resolve()
    >>> page_target(top / "wiki" / "Mira_Esk.html", top) == top / "wiki" / "Mira_Esk.html"
    True
    >>> page_target(top / "tasks.jsonl", top) is None
    True
    """
    try:
        real = file.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a link loop (RuntimeError on Python 3.11)
        return None
    if not real.is_relative_to(top) or not real.name.endswith(HTML_SUFFIXES) or not real.is_file():
        return None
    if any(part.startswith(".") for part in real.relative_to(top).parts):
        return None
    return real


def _html_pages(root: Path) -> list[CorpusPage]:
    pages, top = [], root.resolve()
    refused = []
    for relative in iter_files(top):
        if not relative.endswith(HTML_SUFFIXES):
            continue
        if page_target(top / relative, top) is None:
            refused.append(relative)
            continue
        stem = relative.rsplit(".", 1)[0]
        folder, _, name = stem.rpartition("/")
        if name != "index":
            pages.append(CorpusPage("/" + stem, top / relative, aliases=("/" + relative,)))
        elif folder:
            pages.append(CorpusPage(f"/{folder}/", top / relative, aliases=("/" + relative, "/" + folder)))
        else:
            pages.append(CorpusPage("/", top / relative, aliases=("/" + relative,)))
    if refused:
        warnings.warn(
            f"skipped {len(refused)} page(s) of the corpus at {root} that link to a file which is not an HTML page "
            f"of the site (a hidden or data file such as {TASKS_FILE}): {'; '.join(refused[:5])}"
            f"{'; ...' if len(refused) > 5 else ''}",
            CorpusWarning,
            stacklevel=3,
        )
    return pages


# --- JSONL --------------------------------------------------------------------------------------------


def _jsonl_site(file: Path, clean: bool = True) -> CorpusSite:
    pages: list[CorpusPage] = []
    taken: set[str] = set()
    ids: dict[str, str] = {}  # a document's id -> its page path
    for line_no, record in _records(file, _DOCUMENT_EXAMPLE):
        where = f"{file.name} line {line_no}"
        spelled = _spelling(record, DOCUMENT_KEY_ALIASES, "id")
        record = _canonical(record, DOCUMENT_KEY_ALIASES, where)
        _check_keys(record, _DOCUMENT_KEYS, where, _DOCUMENT_EXAMPLE)
        doc_id = _id(record, where, _DOCUMENT_EXAMPLE, spelled)
        if doc_id in ids:
            raise CorpusError(f"{where}: the id {shown(doc_id)} is used twice; every document needs its own id")
        heading = True
        if "title" in record or "text" not in record:
            title = _string(record, "title", where, _DOCUMENT_EXAMPLE)
        else:  # BrowseComp-Plus documents have none: the text's first line stands in
            title, heading, record["text"] = _title_from_text(
                _string(record, "text", where, _DOCUMENT_EXAMPLE, empty=True), doc_id)
        if ("text" in record) == ("html" in record):
            raise CorpusError(f'{where}: give exactly one of "text" or "html"; a valid line: {_DOCUMENT_EXAMPLE}')
        url = record.get("url") or ""
        if not isinstance(url, str):
            raise CorpusError(f'{where}: "url" must be a string; a valid line: {_DOCUMENT_EXAMPLE}')
        try:
            path = _document_path(url)
        except ValueError as err:  # urlsplit refuses some URLs, e.g. "http://[bad"
            raise CorpusError(f'{where}: "url" is not a URL ({err}); a valid line: {_DOCUMENT_EXAMPLE}') from None
        if not path or path in taken:
            path = "/doc/" + doc_id
            if path in taken:
                raise CorpusError(f"{where}: document {shown(doc_id)} has no path of its own: {path} is taken")
        taken.add(path)
        if "html" in record:
            pages.append(CorpusPage(path, _string(record, "html", where, _DOCUMENT_EXAMPLE, empty=True), title))
        else:
            text = _string(record, "text", where, _DOCUMENT_EXAMPLE, empty=True)
            pages.append(CorpusPage(path, None, title, text, heading=heading))
        ids[doc_id] = path
    if not pages:
        raise CorpusError(f"{file} holds no documents (one JSON object a line: {_DOCUMENT_EXAMPLE})")
    name = file.parent.resolve().name if file.name == DOCUMENTS_FILE else file.stem
    index_folder = file.parent.resolve() / INDEX_FOLDER / file.stem
    site = CorpusSite(name, pages, index_folder=index_folder, files=[file.resolve()], clean=clean)
    site.tasks = _load_tasks(file.parent / TASKS_FILE, site, ids)
    return site


def _document_path(url: str) -> str:
    """The site path of a document's url (unquoted, as :meth:`Site.render` looks pages up); ``""`` for none."""
    parts = urllib.parse.urlsplit(url)
    if parts.netloc:
        return "/" + parts.netloc.lower() + urllib.parse.unquote(parts.path or "/")
    return "/" + urllib.parse.unquote(parts.path).lstrip("/") if parts.path else ""


def text_to_html(title: str, text: str, heading: bool = True) -> str:
    """A plain-text document as a simple HTML page: its title as a heading (unless ``heading`` is false: the
    text's first line is its title already), blank lines between paragraphs.

    >>> text_to_html("Oskarde", "A port.\\n\\nOn the coast.").split("<body>")[1]
    '<h1>Oskarde</h1><p>A port.</p><p>On the coast.</p></body></html>'
    >>> text_to_html("Oskarde", "Oskarde\\nA port.", heading=False).split("<body>")[1]
    '<p>Oskarde<br>A port.</p></body></html>'
    """
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    body = "".join("<p>" + html_lib.escape(p).replace("\n", "<br>") + "</p>" for p in paragraphs)
    t = html_lib.escape(title)
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{t}</title></head>'
        f"<body>{f'<h1>{t}</h1>' if heading else ''}{body}</body></html>"
    )


# --- tasks --------------------------------------------------------------------------------------------


def _load_tasks(file: Path, site: CorpusSite, doc_paths: dict[str, str] | None = None) -> tuple[Task, ...]:
    """The tasks of ``file`` about ``site``; ``doc_paths`` maps a document id to its page path (JSONL corpora)."""
    if not file.is_file():
        return ()
    tasks: list[Task] = []
    ids: set[str] = set()
    missing: list[str] = []
    for line_no, record in _records(file, TASK_EXAMPLE):
        where = f"{file.name} line {line_no}"
        spelled = _spelling(record, TASK_KEY_ALIASES, "id")
        record = _canonical(record, TASK_KEY_ALIASES, where)
        for key in TASK_KEYS_IGNORED:
            record.pop(key, None)
        _check_keys(record, _TASK_KEYS, where, TASK_EXAMPLE)
        task_id = _id(record, where, TASK_EXAMPLE, spelled)
        if task_id in ids:
            raise CorpusError(f"{where}: the id {shown(task_id)} is used twice; every task needs its own id")
        ids.add(task_id)
        aliases = record.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise CorpusError(f'{where}: "aliases" must be a list of strings; a valid line: {TASK_EXAMPLE}')
        hops = record.get("hops", 1)
        if not isinstance(hops, int) or isinstance(hops, bool) or hops < 1:
            raise CorpusError(f'{where}: "hops" must be a whole number of at least 1, not {shown(hops)}')
        split = record.get("split", default_split(task_id))
        if split not in SPLITS:
            raise CorpusError(f'{where}: "split" must be "train" or "test", not {shown(split)}')
        question = _string(record, "question", where, TASK_EXAMPLE)
        answer = _string(record, "answer", where, TASK_EXAMPLE)
        queries = record.get("search_queries")
        if queries is None:
            queries = question_queries(question)
        elif not isinstance(queries, list) or not all(isinstance(q, str) and q.strip() for q in queries):
            raise CorpusError(f'{where}: "search_queries" must be a list of non-empty strings; a valid line: '
                              f'{TASK_EXAMPLE}')
        evidence, gold = (_gold_docs(record, key, where, site, doc_paths or {}, missing) for key in GOLD_DOC_KEYS)
        tasks.append(
            Task(
                id=task_id,
                question=question,
                answer=answer,
                aliases=tuple(aliases),
                family=_string(record, "family", where, TASK_EXAMPLE, default="corpus"),
                hops=hops,
                split=split,
                answer_kind=_string(record, "answer_kind", where, TASK_EXAMPLE, default="text"),
                gold_path=gold_path(tuple(queries), evidence, gold, (answer, *aliases)),
                search_queries=tuple(queries),
            )
        )
    if missing:
        warnings.warn(
            f"{file.name}: {len(missing)} gold document(s) are not in the corpus and were left out of the tasks' gold "
            f"paths: {'; '.join(missing[:5])}{'; ...' if len(missing) > 5 else ''}",
            CorpusWarning,
            stacklevel=4,
        )
    return tuple(tasks)


def _gold_docs(record: dict[str, Any], key: str, where: str, site: CorpusSite, doc_paths: dict[str, str],
               missing: list[str]) -> list[Document]:
    """The documents a task's ``key`` list names (ids, page paths, or objects with a ``docid`` or ``id``), in
    order, each once; one the corpus lacks is added to ``missing``."""
    refs = record.get(key, [])
    if not isinstance(refs, list):
        raise CorpusError(f'{where}: "{key}" must be a list of document ids, not {shown(refs)}')
    docs: list[Document] = []
    for ref in refs:
        if isinstance(ref, dict):
            ref = ref.get("docid", ref.get("id"))
        if isinstance(ref, bool) or not isinstance(ref, (str, int)):
            raise CorpusError(f'{where}: "{key}" must list document ids (strings or integers) or objects with a '
                              f'"docid", not {shown(ref)}')
        ref = str(ref)
        doc = site.page_document(doc_paths.get(ref, ref))
        if doc is None:
            missing.append(f"{ref} ({where})")
        elif all(doc.path != d.path for d in docs):
            docs.append(doc)
    return docs


def gold_path(queries: Sequence[str], evidence: Sequence[Document], gold: Sequence[Document],
              answers: Sequence[str]) -> tuple[GoldStep, ...]:
    """The gold path of a corpus task: search for its first query, open each evidence document and then each gold
    document (those that state the answer), and on a gold document read on to the first of ``answers`` it
    states. ``()`` when no document is given: the task has no gold path.

    >>> doc = Document("/wiki/Vane", "Edra Vane", "Edra Vane was a painter. She was born in Oskarde.")
    >>> [(s.tool, s.arg, s.expect) for s in gold_path(["Edra Vane"], [], [doc], ["Oskarde"])]
    [('search', 'Edra Vane', ''), ('open', '/wiki/Vane', 'Edra Vane'), ('scroll', 'down', 'Oskarde')]
    """
    docs = list(evidence) + [d for d in gold if all(d.path != e.path for e in evidence)]
    if not docs:
        return ()
    steps = [GoldStep("search", queries[0])] if queries else []
    gold_paths = {d.path for d in gold}
    for doc in docs:
        steps.append(GoldStep("open", doc.path, doc.title))
        stated = next((a for a in answers if doc.path in gold_paths and a in doc.text), None)
        if stated is not None:
            sentence = next(s for s in re.split(r"(?<=[.!?])\s+|\n+", doc.text) if stated in s)
            steps.append(GoldStep("scroll", "down", stated, sentence.strip()[:MAX_NOTE_CHARS]))
    return tuple(steps)


_NAME_WORD = re.compile(r"[A-Z][\w'’.-]*|[0-9][\w'’.-]*")
#: Words inside a name ("Bank of England", "Vincent van Gogh") that do not end it.
_NAME_JOINERS = frozenset({"of", "the", "de", "du", "da", "di", "van", "von", "der", "la", "le", "and", "&", "y"})
#: Capitalised words that open a question rather than name something.
_QUESTION_OPENERS = frozenset(
    "what which who whom whose when where why how in of on at the a an for from to by with did does do is was were "
    "are name this that these those i if during after before between among as there it its he she they we you his "
    "her their our my".split()
)


def question_queries(question: str) -> tuple[str, ...]:
    """What a reader would search for first: the names ``question`` mentions (runs of capitalised words, at most
    :data:`MAX_NAME_QUERIES`, in order), then the question itself, spaces folded. Fixed for a question.

    >>> question_queries("Which architect designed the theatre where The Salt Queen was first performed?")
    ('The Salt Queen', 'Which architect designed the theatre where The Salt Queen was first performed?')
    >>> question_queries("In which town was the teacher of Livia Marr born?")[0]
    'Livia Marr'
    """
    question = " ".join(question.split())
    names: list[str] = []
    for sentence in re.split(r"(?<=[.!?;:])\s+", question):
        words = sentence.split()
        run: list[str] = []
        for i, raw in enumerate(words):
            word = raw.strip(_PUNCTUATION)
            if raw[:1] in _PUNCTUATION:  # an opening quote or bracket starts a new name
                _add_name(run, names)
            # A name starts with a capital; a number may go on one ("Apollo 11").
            capital = bool(word) and _NAME_WORD.fullmatch(word) is not None and (bool(run) or word[0].isupper())
            opener = not run and word.casefold() in _QUESTION_OPENERS and (i == 0 or word[:1].islower())
            joiner = bool(run) and raw == word and word.casefold() in _NAME_JOINERS and i + 1 < len(words) \
                and words[i + 1][:1].isupper()
            if (capital and not opener) or joiner:
                run.append(word)
            else:
                _add_name(run, names)
            if raw[-1:] in _PUNCTUATION:  # so does a comma or a closing bracket end one
                _add_name(run, names)
        _add_name(run, names)
    return tuple(names[:MAX_NAME_QUERIES]) + (question,)


_PUNCTUATION = "\"“”‘,;:!?()[]"


def _add_name(run: list[str], names: list[str]) -> None:
    """Add the name ``run`` spells to ``names`` (once, and not a lone question word), and empty ``run``."""
    name = " ".join(run).rstrip(".'’")
    if name and name.casefold() not in _QUESTION_OPENERS and name not in names:
        names.append(name)
    run.clear()


def default_split(task_id: str) -> str:
    """``"test"`` for about ``TEST_FRACTION`` of task ids, ``"train"`` for the rest; fixed for an id.

    >>> default_split("t1")
    'train'
    """
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % 100 < TEST_FRACTION * 100 else "train"


def task_record(task: Task) -> dict[str, Any]:
    """``task`` as one line of ``tasks.jsonl`` (what :func:`load_corpus` reads back).

    >>> task_record(Task("t1", "Who?", "Edra Vane"))["answer"]
    'Edra Vane'
    """
    return {
        "id": task.id,
        "question": task.question,
        "answer": task.answer,
        "aliases": list(task.aliases),
        "hops": task.hops,
        "family": task.family,
        "answer_kind": task.answer_kind,
        "split": task.split,
        "search_queries": list(task.search_queries),
        **_gold_doc_lists(task),
    }


def _gold_doc_lists(task: Task) -> dict[str, list[str]]:
    """The pages ``task``'s gold path opens, as the ``evidence_docs`` and ``gold_docs`` that give it back: a page
    it reads on to the answer in is a gold document, any other an evidence document."""
    answers = {task.answer, *task.aliases}
    steps = task.gold_path
    lists: dict[str, list[str]] = {key: [] for key in GOLD_DOC_KEYS}
    for i, step in enumerate(steps):
        if step.tool == "open":
            states = any(s.tool == "scroll" and s.expect in answers for s in steps[i + 1: i + 2])
            key = "gold_docs" if states else "evidence_docs"
            if step.arg not in lists[key]:
                lists[key].append(step.arg)
    return {key: paths for key, paths in lists.items() if paths}


def write_tasks(tasks: Sequence[Task], file: str | os.PathLike) -> None:
    """Write ``tasks`` as ``tasks.jsonl``, one :func:`task_record` a line."""
    with open(file, "w", encoding="utf-8") as out:
        for task in tasks:
            out.write(json.dumps(task_record(task), ensure_ascii=False) + "\n")


# --- reading and checking JSONL -----------------------------------------------------------------------


def _records(file: Path, example: str) -> Iterator[tuple[int, dict[str, Any]]]:
    # Bytes, decoded line by line, so that a line which is not UTF-8 is named like any other bad line.
    with open(file, "rb") as lines:
        for line_no, raw in enumerate(lines, start=1):
            where = f"{file.name} line {line_no}"
            try:
                # utf-8-sig: a byte order mark (as some Windows editors write) is not part of the first line.
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise CorpusError(
                    f"{where}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); save the file "
                    f"as UTF-8; a valid line: {example}"
                ) from None
            if not line.strip():
                continue
            record = _parse(line, where, example)
            if not isinstance(record, dict):
                raise CorpusError(f"{where}: expected a JSON object; a valid line: {example}")
            yield line_no, record


def _parse(line: str, where: str, example: str) -> Any:
    try:
        value = json.loads(line)
        if "\\u" in line:
            # An escape can spell half of a UTF-16 pair ("\ud800"): a string no page or reply can encode.
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as err:
        raise CorpusError(f"{where}: not valid JSON ({err.msg}, column {err.colno}); a valid line: {example}") from None
    except UnicodeEncodeError:
        raise CorpusError(
            f"{where}: a \\u escape that is half of a UTF-16 surrogate pair, not a character; a valid line: {example}"
        ) from None
    except ValueError:  # json's only other ValueError: an integer past Python's digit limit
        raise CorpusError(
            f"{where}: a number longer than {sys.get_int_max_str_digits()} digits; write it as a string; "
            f"a valid line: {example}"
        ) from None
    except RecursionError:
        raise CorpusError(f"{where}: JSON nested too deeply to read; a valid line: {example}") from None
    return value


def _canonical(record: dict[str, Any], aliases: dict[str, str], where: str) -> dict[str, Any]:
    """``record`` with each alias key renamed to ours; both spellings in one record is an error."""
    if not any(alias in record for alias in aliases):
        return record
    out = dict(record)
    for alias, key in aliases.items():
        if alias in out:
            if key in out:
                raise CorpusError(f'{where}: both "{alias}" and "{key}" are given; they mean the same, keep one')
            out[key] = out.pop(alias)
    return out


_FENCE = re.compile(r"^\s*-{3,}\s*$")
_FRONT_MATTER_FIELD = re.compile(r"^\s*[\w-]+\s*:")


def _title_from_text(text: str, doc_id: str) -> tuple[str, bool, str]:
    """The title a document without one gets from its ``text``, whether the page shows it as a heading, and the
    text the page shows, so that the title is shown once.

    A ``title:`` line (in a ``---`` front-matter block of ``key: value`` lines, or the first line) is the title,
    shown as the heading; that line and the block are not shown. Otherwise the first non-empty line is the title
    and stays the first line of the text, with no heading above it. A title is cut to :data:`TITLE_CHARS`; a text with no line
    gets ``Document <id>``.

    >>> _title_from_text("---\\ntitle: Edra Vane\\nsource: web\\n---\\nEdra Vane was a painter.", "d1")
    ('Edra Vane', True, 'Edra Vane was a painter.')
    >>> _title_from_text("Oskarde\\nA port.", "d2")
    ('Oskarde', False, 'Oskarde\\nA port.')
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip()), None)
    if start is not None and _FENCE.match(lines[start]):
        close = next((i for i in range(start + 1, len(lines)) if _FENCE.match(lines[i])), None)
        block = lines[start + 1: close] if close is not None else []
        if close is not None and all(_FRONT_MATTER_FIELD.match(line) or not line.strip() for line in block):
            lines = lines[close + 1:]
            titled = [line.split(":", 1)[1].strip() for line in block if line.strip().lower().startswith("title:")]
            if titled and titled[0]:
                return _cut_title(titled[0]), True, "\n".join(lines).strip("\n")
    first = next((i for i, line in enumerate(lines) if line.strip() and not _FENCE.match(line)), None)
    if first is None:
        return f"Document {doc_id}", True, "\n".join(lines).strip("\n")
    line = lines[first].strip()
    if not line.lower().startswith("title:") or not line[len("title:"):].strip():
        return _cut_title(line), False, "\n".join(lines[first:])
    rest = lines[first + 1:]
    if rest and _FENCE.match(rest[0]):  # the end of a front-matter block that holds only the title
        rest = rest[1:]
    return _cut_title(line[len("title:"):].strip()), True, "\n".join(rest).strip("\n")


def _cut_title(line: str) -> str:
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 3].rstrip() + "..."


def _check_keys(record: dict[str, Any], known: tuple[str, ...], where: str, example: str) -> None:
    unknown = [key for key in record if key not in known]
    if unknown:
        raise CorpusError(
            f"{where}: unknown key {shown(unknown[0])} (known keys: {', '.join(known)}); a valid line: {example}"
        )


def _id(record: dict[str, Any], where: str, example: str, spelled: str = "id") -> str:
    """The record's id as a string; ``spelled`` is the key the line gave it under (``docid``, ``query_id``)."""
    if "id" not in record:
        raise CorpusError(f'{where}: missing "id" (a string or an integer); a valid line: {example}')
    value = record["id"]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value:
        return value
    got = "an empty string" if value == "" else "null" if value is None else f"{type(value).__name__} {shown(value)}"
    raise CorpusError(f'{where}: "{spelled}" must be a string or integer, got {got}; a valid line: {example}')


def _spelling(record: dict[str, Any], aliases: dict[str, str], key: str) -> str:
    """How a record spells ``key``: the alias it uses for it, else ``key`` itself."""
    return next((alias for alias, ours in aliases.items() if ours == key and alias in record), key)


_NO_DEFAULT = object()


def _string(
    record: dict[str, Any], key: str, where: str, example: str, default: Any = _NO_DEFAULT, empty: bool = False
) -> str:
    if key not in record and default is not _NO_DEFAULT:
        return default
    value = record.get(key)
    if value is None:
        raise CorpusError(f'{where}: missing "{key}"; a valid line: {example}')
    if not isinstance(value, str) or not (value.strip() or empty):
        kind = "a string" if empty else "a non-empty string"
        raise CorpusError(f'{where}: "{key}" must be {kind}, not {shown(value)}; a valid line: {example}')
    return value
