"""A loopback-only web server for a site folder (``mosaic site serve``), to browse a site in a real browser.

Pages are served the way :func:`~envs.web.corpus.load_corpus` reads the folder (``/wiki/X`` from
``wiki/X.html`` or ``wiki/X/index.html``), the search page ``/search?q=...`` is rendered live, and other
files a page needs (stylesheets, scripts, images, fonts, media: :data:`ASSET_SUFFIXES`) are served as they
are. Nothing else is: not ``tasks.jsonl`` in any spelling (``tasks.jsonl~``, ``TASKS.JSONL``,
``.tasks.jsonl.swp``, ``tasks.jsonl.bak``), nor other data, backup or hidden files, since any of them may hold
the answers. An allow-list, not a deny-list: a new way to spell a backup cannot slip through. Only what the
folder holds is served: ``..``, encoded or not, backslashes, absolute paths and links leading outside all get
404. Pages and assets alike count by the file they really are, links resolved when served: ``tlink.html``
linking to ``tasks.jsonl``, or to a hidden file, is not served.

Example:
    >>> import urllib.request
    >>> server = serve("tests/fixtures/corpus_html")
    >>> urllib.request.urlopen(server.url + "/wiki/Mira_Esk").status
    200
    >>> server.shutdown()
"""

from __future__ import annotations

import html as html_lib
import http.server
import logging
import mimetypes
import os
import threading
import urllib.parse
from pathlib import Path

from .corpus import CorpusSite, iter_files, load_corpus

LOOPBACK = ("127.0.0.1", "localhost")
# The only files served besides pages: what a page needs to look right. A name counts by its last suffix, so
# "tasks.jsonl~" (".jsonl~"), "style.css.bak" (".bak") and "#style.css#" (".css#") are all left out.
ASSET_SUFFIXES = frozenset({
    ".css", ".js", ".mjs",
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".avif", ".ico", ".bmp",
    ".woff", ".woff2", ".ttf", ".otf",
    ".mp3", ".ogg", ".wav", ".mp4", ".webm",
})

log = logging.getLogger(__name__)


class SiteServer(http.server.ThreadingHTTPServer):
    """A threaded HTTP server for one site folder, bound to 127.0.0.1.

    Attributes:
        site: the folder loaded as a corpus site.
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
    """

    daemon_threads = True

    def __init__(self, folder: str | os.PathLike, port: int = 0, host: str = "127.0.0.1"):
        if host not in LOOPBACK:
            raise ValueError(
                f"refusing to serve on {host!r}: the site server binds to 127.0.0.1 only, so that nothing "
                "beyond this machine can read the corpus. Use host='127.0.0.1' (or 'localhost')."
            )
        # Pages as written (with the assets they need), not cut down for an agent: a person reads them here.
        self.site: CorpusSite = load_corpus(folder, clean=False)
        root = self.root = Path(folder).resolve()
        self.files = {"/" + name: root / name for name in iter_files(root) if is_asset(root / name)}
        # Build the search index now, not on the first request, where two threads could both build it.
        _ = self.site.index
        super().__init__(("127.0.0.1", port), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread: threading.Thread | None = None

    def asset(self, path: str) -> Path | None:
        """The file to send for the asset at site path ``path``, read where its link leads now: ``None`` unless
        it is still an asset file inside the folder (a link changed since the server started counts as it is)."""
        file = self.files.get(path)
        if file is None:
            return None
        try:
            real = file.resolve(strict=True)
        except (OSError, RuntimeError):  # gone, or a link loop (RuntimeError on Python 3.11)
            return None
        if not real.is_relative_to(self.root) or any(p.startswith(".") for p in real.relative_to(self.root).parts):
            return None
        return real if real.is_file() and is_asset(file) else None

    def start(self) -> "SiteServer":
        """Serve in a background thread; returns ``self``."""
        # A short poll keeps shutdown() quick; the loop is idle between polls.
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.1}, name="mosaic-site-server", daemon=True
        )
        self._thread.start()
        return self

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises ``KeyboardInterrupt`` here)."""
        if self._thread is not None:
            self._thread.join()

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            super().shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()

    def __enter__(self) -> "SiteServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def serve(folder: str | os.PathLike, port: int = 0, host: str = "127.0.0.1") -> SiteServer:
    """Start serving ``folder`` at ``http://127.0.0.1:<port>`` in a background thread (``port=0``: any free
    port; read it from ``.url``). Stop it with ``.shutdown()``.

    Raises:
        ValueError: ``host`` is not the loopback address.
        CorpusError: the folder holds no site.
    """
    return SiteServer(folder, port, host).start()


def is_asset(file: Path) -> bool:
    """Whether the server may hand ``file`` out: a stylesheet, script, image, font or media file by its name,
    and by the name of the file it links to (so ``style.css`` linking to ``tasks.jsonl`` is refused).

    >>> [is_asset(Path(name)) for name in ("style.css", "logo.PNG", "tasks.jsonl~", "notes.txt")]
    [True, True, False, False]
    """
    names = (file.name, file.resolve().name)
    return all(not name.startswith(".") and Path(name).suffix.lower() in ASSET_SUFFIXES for name in names)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SiteServer
    server_version = "mosaic-site"

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def _respond(self, send_body: bool) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        page = self.server.site.render(self.path)
        if page is not None:
            body, kind = page.encode("utf-8"), "text/html; charset=utf-8"
            status = 200
        elif (file := self.server.asset(path)) is not None:
            body = file.read_bytes()
            kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
            status = 200
        else:
            message = html_lib.escape(path)
            body = f"<!DOCTYPE html><title>Not found</title><h1>Not found</h1><p>{message}</p>".encode("utf-8")
            kind, status = "text/html; charset=utf-8", 404
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s %s", self.address_string(), format % args)
