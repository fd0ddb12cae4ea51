"""A user's own corpus as a :class:`~envs.web.site.Site`: a folder of HTML files, or JSONL documents.

Two layouts load, each with an optional ``tasks.jsonl`` beside the pages:

- **A folder of HTML files.** ``a/b.html`` is served at ``/a/b`` (and at ``/a/b.html``); ``a/index.html``
  at ``/a/`` (and ``/a``, ``/a/index.html``); ``index.html`` is the home page ``/``. A page's title is its
  ``<title>``, else its first ``<h1>``, else its file name. ``mosaic site build`` writes this layout.
- **JSONL documents** (the shape BrowseComp-Plus uses): a folder with ``documents.jsonl``, or the path of
  any ``.jsonl`` documents file, with ``tasks.jsonl`` beside it. One document a line::

      {"id": "d1", "url": "/wiki/Edra_Vane", "title": "Edra Vane", "text": "Edra Vane was a painter."}

  with ``"html"`` instead of ``"text"`` for HTML documents (text is shown as simple paragraphs). The page
  path is ``url`` when it is a site path (``wiki/X`` counts as ``/wiki/X``), ``/<host><path>`` for an
  absolute URL, and ``/doc/<id>`` when ``url`` is absent or its path is already taken.

**BrowseComp-Plus field names** load as they are: a document's ``docid`` is its ``id`` and its ``title``
may be left out (the text's first line stands in); a query's ``query_id`` and ``query`` are a task's ``id`` and
``question``, and its ``gold_docs``, ``negative_docs`` and ``evidence_docs`` are ignored. Save the queries as
``tasks.jsonl`` beside ``documents.jsonl``.

The search index over the pages is saved beside them, in the hidden folder ``.mosaic-index/``, and mapped by
every later process (:mod:`envs.web.bm25`); it is rebuilt when a corpus file's size or modification time changes.

``tasks.jsonl`` holds one task a line::

    {"id": "t1", "question": "Who ...?", "answer": "Edra Vane", "aliases": ["Vane"]}

with optional ``hops`` (int, default 1), ``family`` (default ``"corpus"``), ``answer_kind`` (default
``"text"``) and ``split`` (``"train"``/``"test"``; by default a fixed hash of the id puts about 20% in test).
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

from ..checks import shown
from .browser import html_text, html_title
from .site import Site
from .types import Document, Task

TASKS_FILE = "tasks.jsonl"
DOCUMENTS_FILE = "documents.jsonl"
TEST_FRACTION = 0.2
HTML_SUFFIXES = (".html", ".htm")
SPLITS = ("train", "test")

_DOCUMENT_EXAMPLE = '{"id": "d1", "url": "/wiki/Edra_Vane", "title": "Edra Vane", "text": "Edra Vane was a painter."}'
TASK_EXAMPLE = '{"id": "t1", "question": "Who ...?", "answer": "Edra Vane", "aliases": ["Vane"]}'
_DOCUMENT_KEYS = ("id", "url", "title", "text", "html")
_TASK_KEYS = ("id", "question", "answer", "aliases", "hops", "family", "answer_kind", "split")
#: The field names of BrowseComp-Plus (and of most retrieval corpora), read as ours: a document's ``docid`` is
#: its ``id``; a query's ``query_id`` and ``query`` are a task's ``id`` and ``question``.
DOCUMENT_KEY_ALIASES = {"docid": "id"}
TASK_KEY_ALIASES = {"query_id": "id", "query": "question"}
#: BrowseComp-Plus query fields that a task does not use (the documents they list are in the corpus already).
TASK_KEYS_IGNORED = ("gold_docs", "negative_docs", "evidence_docs")
TITLE_CHARS = 120
#: The search index is saved here, beside the pages (a hidden folder: never read as part of the corpus).
INDEX_FOLDER = ".mosaic-index"
#: Bumped when how files become documents changes: indexes saved before are then rebuilt.
INDEX_FORMAT = 1


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
    """

    path: str
    source: str | Path | None
    title: str = ""
    text: str | None = None
    aliases: tuple[str, ...] = ()


class CorpusSite(Site):
    """A :class:`Site` over a fixed list of pages and tasks (see :func:`load_corpus`).

    Example:
        >>> site = CorpusSite("demo", [CorpusPage("/", "<title>Home</title><p>Hello.</p>")])
        >>> [d.title for d in site.documents()], site.page_html("/missing")
        (['Home'], None)
    """

    def __init__(self, name: str, pages: Sequence[CorpusPage], tasks: Sequence[Task] = (),
                 index_folder: Path | None = None, files: Sequence[Path] = (), root: Path | None = None):
        """``index_folder``: where the search index is saved (``None``: in memory only); ``files``: what the
        pages are read from, whose sizes and times say whether a saved index is still this corpus's;
        ``root``: the folder a page's file must really be in (links resolved, as it is when read) to be
        read, so that a page swapped for a link to ``tasks.jsonl`` after loading shows nothing."""
        self.name = name
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
        page = self._routes.get(path)
        return None if page is None else self._read(page)

    def _read(self, page: CorpusPage) -> str | None:
        """The page's HTML; ``None`` when its file may not be read (see :func:`page_target`) or is gone."""
        if page.source is None:
            return text_to_html(page.title, page.text or "")
        if not isinstance(page.source, Path):
            return page.source
        file = page.source if self.root is None else page_target(page.source, self.root)
        if file is None:
            return None
        try:
            return file.read_text(encoding="utf-8", errors="replace")
        except OSError:  # removed or made unreadable since the corpus loaded: no such page
            return None

    def index_location(self) -> tuple[Path, str] | None:
        if self._index_folder is None:
            return None
        files = self._files or [p.source for p in self.pages if isinstance(p.source, Path)]
        stats = [(str(f), *_stat(f)) for f in files]
        return self._index_folder, _fingerprint([INDEX_FORMAT, len(self.pages), stats])

    def _document(self, page: CorpusPage) -> Document:
        html = (self._read(page) or "") if not page.title or page.text is None else ""
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


def load_corpus(path: str | os.PathLike) -> CorpusSite:
    """Load the corpus at ``path``: a folder of HTML files, a folder with ``documents.jsonl``, or a JSONL
    documents file; ``tasks.jsonl`` beside the pages is read when present.

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
        return _jsonl_site(root)
    if (root / DOCUMENTS_FILE).is_file():
        return _jsonl_site(root / DOCUMENTS_FILE)
    pages = _html_pages(root)
    if not pages:
        raise CorpusError(
            f"no corpus in {root}: it holds neither .html files nor {DOCUMENTS_FILE} "
            f"(one JSON object a line: {_DOCUMENT_EXAMPLE})"
        )
    top = root.resolve()
    return CorpusSite(top.name, pages, _load_tasks(root / TASKS_FILE), index_folder=top / INDEX_FOLDER / "html",
                      root=top)


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


def _jsonl_site(file: Path) -> CorpusSite:
    pages: list[CorpusPage] = []
    taken: set[str] = set()
    ids: set[str] = set()
    for line_no, record in _records(file, _DOCUMENT_EXAMPLE):
        where = f"{file.name} line {line_no}"
        spelled = _spelling(record, DOCUMENT_KEY_ALIASES, "id")
        record = _canonical(record, DOCUMENT_KEY_ALIASES, where)
        _check_keys(record, _DOCUMENT_KEYS, where, _DOCUMENT_EXAMPLE)
        doc_id = _id(record, where, _DOCUMENT_EXAMPLE, spelled)
        if doc_id in ids:
            raise CorpusError(f"{where}: the id {shown(doc_id)} is used twice; every document needs its own id")
        ids.add(doc_id)
        if "title" in record or "text" not in record:
            title = _string(record, "title", where, _DOCUMENT_EXAMPLE)
        else:  # BrowseComp-Plus documents have none: the text's first line stands in
            title = _title_from_text(_string(record, "text", where, _DOCUMENT_EXAMPLE, empty=True), doc_id)
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
            pages.append(CorpusPage(path, None, title, text))
    if not pages:
        raise CorpusError(f"{file} holds no documents (one JSON object a line: {_DOCUMENT_EXAMPLE})")
    name = file.parent.resolve().name if file.name == DOCUMENTS_FILE else file.stem
    index_folder = file.parent.resolve() / INDEX_FOLDER / file.stem
    return CorpusSite(name, pages, _load_tasks(file.parent / TASKS_FILE), index_folder=index_folder,
                      files=[file.resolve()])


def _document_path(url: str) -> str:
    """The site path of a document's url (unquoted, as :meth:`Site.render` looks pages up); ``""`` for none."""
    parts = urllib.parse.urlsplit(url)
    if parts.netloc:
        return "/" + parts.netloc.lower() + urllib.parse.unquote(parts.path or "/")
    return "/" + urllib.parse.unquote(parts.path).lstrip("/") if parts.path else ""


def text_to_html(title: str, text: str) -> str:
    """A plain-text document as a simple HTML page: its title as a heading, blank lines between paragraphs.

    >>> text_to_html("Oskarde", "A port.\\n\\nOn the coast.").split("<body>")[1]
    '<h1>Oskarde</h1><p>A port.</p><p>On the coast.</p></body></html>'
    """
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    body = "".join("<p>" + html_lib.escape(p).replace("\n", "<br>") + "</p>" for p in paragraphs)
    t = html_lib.escape(title)
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{t}</title></head>'
        f"<body><h1>{t}</h1>{body}</body></html>"
    )


# --- tasks --------------------------------------------------------------------------------------------


def _load_tasks(file: Path) -> tuple[Task, ...]:
    if not file.is_file():
        return ()
    tasks: list[Task] = []
    ids: set[str] = set()
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
        tasks.append(
            Task(
                id=task_id,
                question=_string(record, "question", where, TASK_EXAMPLE),
                answer=_string(record, "answer", where, TASK_EXAMPLE),
                aliases=tuple(aliases),
                family=_string(record, "family", where, TASK_EXAMPLE, default="corpus"),
                hops=hops,
                split=split,
                answer_kind=_string(record, "answer_kind", where, TASK_EXAMPLE, default="text"),
            )
        )
    return tuple(tasks)


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
    }


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


def _title_from_text(text: str, doc_id: str) -> str:
    """The first non-empty line of ``text`` (a leading ``title:`` dropped), cut to :data:`TITLE_CHARS`; else the id.

    >>> _title_from_text("---\\ntitle: Edra Vane\\nEdra Vane was a painter.", "d1")
    'Edra Vane'
    """
    for line in text.splitlines():
        line = line.strip().strip("-").strip()
        if line:
            line = line[len("title:"):].strip() if line.lower().startswith("title:") else line
            if line:
                return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 3].rstrip() + "..."
    return f"Document {doc_id}"


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
