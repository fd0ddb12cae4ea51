"""``mosaic view``: a page that shows a run's trajectory logs (:mod:`algos.logs`), served or written to a file.

The page is one static HTML file (``viewer.html`` beside this module) with a little vanilla JavaScript: no
build step, no CDN, so it works offline. The run's data goes into it as JSON inside
``<script type="application/json">`` elements, with ``<``, ``>`` and ``&`` written as ``\\u`` escapes so no
text can close the element; the script puts every text on screen as text nodes, never as markup; and a
Content-Security-Policy lets only the page's own script (by its hash) run. A page a corpus served, or a
model's output, shows as the characters it holds.

- :func:`write_html` writes one self-contained file, every trajectory in it (streamed from the logs, one
  record at a time), that can be shared.
- :func:`serve` serves the page on 127.0.0.1: the list is in the page, and a trajectory is read from its log
  when it is clicked (``GET /trajectory/N``), so a large run costs the server only its index.

Example:
    >>> import tempfile
    >>> page = render_page(tempfile.mkdtemp())  # an empty folder: a page with no trajectories
    >>> '"trajectories":[]' in page
    True
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import itertools
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from algos import logs

TEMPLATE = Path(__file__).with_name("viewer.html")
_DATA_MARK = "<!--DATA-->"
_CSP_MARK = "__CSP__"


@dataclass(frozen=True)
class Entry:
    """Where trajectory ``n`` of a run lies: its log and its line (from 0), and its summary for the list."""

    n: int
    log: Path
    line: int
    summary: dict[str, Any]


def json_for_html(data: Any) -> str:
    """JSON that is safe inside a ``<script type="application/json">`` element: ``<``, ``>`` and ``&`` are
    ``\\u`` escapes (so ``</script>`` or ``<!--`` in any text cannot end or alter the element), and every
    non-ASCII character too. ``JSON.parse`` of the element's text gives the data back exactly.

    Example:
        >>> json_for_html({"text": "</script><b>"})
        '{"text":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}'
    """
    text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def summary(record: dict[str, Any], n: int, log: str) -> dict[str, Any]:
    """What the list shows of a record (and filters on): the full record is loaded only when it is opened."""
    return {"n": n, "log": log, "source": record["source"], "iteration": record["iteration"],
            "group": record["group"], "task_id": record["task_id"], "question": record["question"],
            "success": record["success"], "reward": record["reward"], "num_sessions": len(record["sessions"]),
            "kinds": [s["kind"] for s in record["sessions"]], "steps_used": record["steps_used"],
            "budget": record["budget"], "end": record["end"]}


def index(run_dir: str | Path) -> Iterator[tuple[Entry, dict[str, Any]]]:
    """Every trajectory under ``run_dir`` with its full record, one at a time, numbered from 0 in log order."""
    root = Path(run_dir)
    n = 0
    for path in logs.find_logs(root):
        name = str(path.relative_to(root)) if path != root else path.name
        for line, record in enumerate(logs.read(path)):
            yield Entry(n, path, line, summary(record, n, name)), record
            n += 1


def run_overview(run_dir: str | Path) -> dict[str, Any]:
    """The run's curves (every ``metrics.jsonl`` under it: success, sessions and steps by iteration) and its
    Pass@(K,T) tables (every ``passkt.json``)."""
    root = Path(run_dir)
    if root.is_file():
        return {"curves": [], "heatmaps": []}
    curves = []
    for path in sorted(root.rglob("metrics.jsonl")):
        points = []
        for line in path.read_text().splitlines():
            if line.strip():
                m = json.loads(line)
                points.append({k: m.get(k) for k in ("iteration", "success", "sessions", "steps")})
        if points:
            curves.append({"run": str(path.parent.relative_to(root)) or ".", "points": points})
    heatmaps = []
    for path in sorted(root.rglob("passkt.json")):
        table = json.loads(path.read_text())
        heatmaps.append({"path": str(path.relative_to(root)), "ks": table["ks"], "ts": table["ts"],
                         "table": table["table"],
                         "title": f"Pass@(K,T), {table['protocol']}, n={table['n']}, {len(table['task_ids'])} tasks"})
    return {"curves": curves, "heatmaps": heatmaps}


def _template() -> tuple[str, str]:
    """The page before and after its data, with a Content-Security-Policy naming its own style and script by
    hash: no other script (an injected one included) may run, and the page may fetch only from its origin."""
    page = TEMPLATE.read_text(encoding="utf-8")

    def digest(tag: str) -> str:
        body = re.search(rf"<{tag}>(.*?)</{tag}>", page, re.S)
        if body is None:
            raise RuntimeError(f"{TEMPLATE} has no <{tag}> element")
        return "'sha256-" + base64.b64encode(hashlib.sha256(body.group(1).encode()).digest()).decode() + "'"

    csp = (f"default-src 'none'; script-src {digest('script')}; style-src {digest('style')}; "
           "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'")
    before, after = page.replace(_CSP_MARK, csp).split(_DATA_MARK)
    return before, after


def _write_page(out: IO[str], run_dir: Path, embed: bool, entries: list[Entry] | None = None) -> None:
    before, after = _template()
    out.write(before)
    summaries = []
    for entry, record in index(run_dir):
        summaries.append(entry.summary)
        if entries is not None:
            entries.append(entry)
        if embed:
            out.write(f'<script type="application/json" id="traj-{entry.n}">{json_for_html(record)}</script>\n')
    run = {"name": run_dir.resolve().name, "logs": [str(p.relative_to(run_dir)) if p != run_dir else p.name
                                                    for p in logs.find_logs(run_dir)],
           "trajectories": summaries, **run_overview(run_dir)}
    out.write(f'<script type="application/json" id="run-data">{json_for_html(run)}</script>\n')
    out.write(after)


def render_page(run_dir: str | Path, embed: bool = True) -> str:
    """The page as a string (every trajectory in it when ``embed``); :func:`write_html` streams it instead."""
    buffer = io.StringIO()
    _write_page(buffer, _check_dir(run_dir), embed)
    return buffer.getvalue()


def write_html(run_dir: str | Path, out: str | Path) -> Path:
    """Write one self-contained HTML file of the run, every trajectory in it, to ``out``; returns ``out``.

    The logs are read one record at a time and written as they are read.
    """
    root = _check_dir(run_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="ascii") as f:
        _write_page(f, root, embed=True)
    return out


def _check_dir(run_dir: str | Path) -> Path:
    root = Path(run_dir)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such run folder (give a folder written by mosaic rollout/eval/train "
                                f"--out, or a {logs.SUFFIX} file)")
    return root


class ViewerServer(http.server.ThreadingHTTPServer):
    """The page of one run on 127.0.0.1; ``GET /`` is the page, ``GET /trajectory/N`` one record as JSON."""

    daemon_threads = True

    def __init__(self, run_dir: str | Path, port: int = 0, host: str = "127.0.0.1"):
        self.run_dir = _check_dir(run_dir)
        buffer = io.StringIO()
        self.entries: list[Entry] = []
        _write_page(buffer, self.run_dir, embed=False, entries=self.entries)
        self.page = buffer.getvalue().encode("ascii")
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def record(self, n: int) -> dict[str, Any] | None:
        """Trajectory ``n`` read from its log (the log is read up to it, one record at a time)."""
        if not 0 <= n < len(self.entries):
            return None
        entry = self.entries[n]
        return next(itertools.islice(logs.read(entry.log), entry.line, None), None)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ViewerServer

    def do_GET(self) -> None:  # noqa: N802  (the name http.server calls)
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", self.server.page)
            return
        found = re.fullmatch(r"/trajectory/(\d{1,9})", path)
        record = self.server.record(int(found.group(1))) if found else None
        if record is None:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")
            return
        self._send(200, "application/json", json_for_html(record).encode("ascii"))

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (http.server's signature)
        pass  # quiet: the command prints the address once


def serve_in_thread(run_dir: str | Path, port: int = 0) -> tuple[ViewerServer, threading.Thread]:
    """A :class:`ViewerServer` answering in a daemon thread (tests, the screenshot); ``shutdown()`` stops it."""
    server = ViewerServer(run_dir, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def browser_args() -> list[str]:
    """Chromium's switches for looking at the viewer: the env backend's (:data:`envs.playwright_backend.
    CHROMIUM_ARGS`: no background networking, no name resolution), with 127.0.0.1 let through to the viewer."""
    from envs.playwright_backend import CHROMIUM_ARGS

    rule = "--host-resolver-rules="
    return [arg + ", EXCLUDE 127.0.0.1" if arg.startswith(rule) else arg for arg in CHROMIUM_ARGS]


def launch_browser() -> Any:
    """A headless Chromium (the env's, :func:`envs.playwright_backend.chromium_path`) with
    :func:`browser_args`, on this process's Playwright (:func:`envs.playwright_backend.shared_playwright`);
    the caller closes it."""
    from envs.playwright_backend import chromium_path, shared_playwright

    return shared_playwright().chromium.launch(executable_path=chromium_path(), headless=True, args=browser_args())


def screenshot(run_dir: str | Path, png: str | Path, trajectory: int | None = None, session: int | None = None,
               width: int = 1400, height: int = 900) -> Path:
    """A PNG of the served page (Playwright, the env's Chromium): trajectory ``trajectory`` opened (default:
    the one with the most sessions) and, if given, its session ``session`` selected."""
    server, _ = serve_in_thread(run_dir)
    try:
        if trajectory is None:
            if not server.entries:
                raise ValueError(f"{run_dir} holds no trajectory log to show")
            trajectory = max(server.entries, key=lambda e: (e.summary["num_sessions"], -e.n)).n
        browser = launch_browser()
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(server.url)
            page.click(f'tr.traj-row[data-n="{trajectory}"]')
            page.wait_for_selector(f'#detail[data-n="{trajectory}"]')
            if session is not None:
                page.click(f'button.node[data-session="{session}"]')
            page.wait_for_selector("#session .step")
            png = Path(png)
            png.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(png), full_page=True)
        finally:
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return png
