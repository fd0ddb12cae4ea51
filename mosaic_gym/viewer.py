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
import gzip
import hashlib
import http.server
import io
import json
import math
import re
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from algos import logs
from algos.credit.compare import TOL

TEMPLATE = Path(__file__).with_name("viewer.html")
_DATA_MARK = "<!--DATA-->"
_CSP_MARK = "__CSP__"


@dataclass(frozen=True)
class Entry:
    """Where trajectory ``n`` of a run lies: its log and its line (from 1), and its summary for the list."""

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


MAX_LINE_BYTES = 16 * 2**20
"""The longest log line (one record) the viewer reads; a longer one is reported and skipped, never loaded."""

MAX_DEPTH = 32
"""The deepest nesting of lists and objects a record may have (a real one has 4, meta included)."""

MAX_FORK_NESTING = 200
"""The deepest chain of forks within forks a record may have (the page draws each level inside the last)."""

MAX_PROBLEMS = 100
"""Problems kept word for word; past them, only their number."""

_CHUNK = 2**20  # what an over-long line is skipped by, a piece at a time
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_SESSION_KINDS = ("root", "compact", "fork")


class Problems:
    """What could not be read, one line each (``file:line: what``): the page and the command show them, and
    render everything else. The first :data:`MAX_PROBLEMS` are kept; the rest are counted."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def add(self, line: str) -> None:
        self.count += 1
        if len(self.lines) < MAX_PROBLEMS:
            self.lines.append(line)

    def report(self) -> list[str]:
        """The kept lines, and one more saying how many were left out."""
        more = self.count - len(self.lines)
        return self.lines + ([f"... and {more} more problems"] if more else [])


def _lines(f: io.BufferedIOBase, name: str, problems: Problems, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """The lines of a binary file with their numbers (from 1), each at most ``max_line_bytes`` long: a longer one
    is reported and skipped a piece at a time, so it is never held whole. A last line without its newline (a
    write cut off) is reported and dropped."""
    number = 0
    while True:
        line = f.readline(max_line_bytes + 1)
        if not line:
            return
        number += 1
        if line.endswith(b"\n"):
            yield number, line
            continue
        if len(line) <= max_line_bytes:
            problems.add(f"{name}:{number}: the last line is cut off (the run that wrote it was probably killed)")
            return
        while line and not line.endswith(b"\n"):
            line = f.readline(_CHUNK)
        problems.add(f"{name}:{number}: line longer than {max_line_bytes} bytes: skipped")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_line(line: bytes) -> tuple[Any, str | None]:
    """One line as JSON, or the reason it is not: bad bytes (with their column), nesting deeper than
    :data:`MAX_DEPTH` (checked before parsing, so no recursion), NaN or infinity, or malformed JSON."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, f"byte 0x{line[err.start]:02x} at column {err.start + 1} is not UTF-8 text"
    brackets = np.frombuffer(_STRING.sub(b"", line).translate(None, _NOT_BRACKET), np.uint8)
    if brackets.size:
        depth = int(np.cumsum(np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)).max())
        if depth > MAX_DEPTH:
            return None, f"nested {depth} deep (at most {MAX_DEPTH})"
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant), None
    except json.JSONDecodeError as err:
        return None, f"not JSON ({err.msg} at column {err.colno})"
    except (ValueError, RecursionError) as err:
        return None, f"not JSON ({err})"


# What the page reads of a record, field by field (docs/logs.md): a record that differs is reported and skipped.
_NUMBER, _INT, _TEXT, _FLAG, _NULL = "a number", "an integer", "text", "true or false", "null"
_RECORD_FIELDS = {"source": (_TEXT,), "iteration": (_INT, _NULL), "group": (_INT, _NULL), "task_id": (_TEXT,),
                  "question": (_TEXT,), "budget": (_INT,), "reward": (_NUMBER,), "success": (_FLAG,),
                  "answer": (_TEXT, _NULL), "gold_answer": (_TEXT, _NULL), "steps_used": (_INT,),
                  "end": (_TEXT, _NULL), "credit": (_TEXT, _NULL), "sessions": ("a list",), "steps": ("a list",)}
_SESSION_FIELDS = {"id": (_INT,), "parent": (_INT, _NULL), "kind": (_TEXT,), "depth": (_INT,), "task": (_TEXT, _NULL),
                   "steps": (_INT,), "tokens_in": (_INT,), "tokens_out": (_INT,), "context_tokens": (_INT,),
                   "handoff": (_TEXT, _NULL), "credit_advantage": (_NUMBER, _NULL),
                   "credit_broadcast": (_NUMBER, _NULL), "credit_mosaic": (_NUMBER, _NULL),
                   "credit_contribution": (_NUMBER, _NULL)}
_STEP_FIELDS = {"session": (_INT,), "next_session": (_INT,), "tool": (_TEXT, _NULL), "action": (_TEXT,),
                "error": (_TEXT, _NULL), "shown": (_TEXT,), "gold": (_FLAG,), "off_path": (_FLAG,)}


def _is(value: Any, kind: str) -> bool:
    if kind == _NULL:
        return value is None
    if kind == _FLAG:
        return type(value) is bool
    if kind == _INT:
        return type(value) is int
    if kind == _NUMBER:
        return type(value) in (int, float)
    if kind == _TEXT:
        return type(value) is str
    return type(value) is list


def _fields(holder: Any, spec: dict[str, tuple[str, ...]], where: str) -> str | None:
    if not isinstance(holder, dict):
        return f"{where} is not an object"
    for key, kinds in spec.items():
        if key not in holder:
            return f"{where} has no {key!r}"
        if not any(_is(holder[key], kind) for kind in kinds):
            return f"{where}'s {key!r} is {_shown(holder[key])}, not {' or '.join(kinds)}"
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_record(record: Any) -> str | None:
    """Why the page cannot show ``record`` (a field missing or of the wrong type, an unknown format_version,
    session ids that are not 0..n-1 in order, a tree whose parents do not come first, steps naming no session),
    or None when it can."""
    if not isinstance(record, dict):
        return f"a record is an object, not {type(record).__name__}"
    version = record.get("format_version", "missing")
    if type(version) is not int or version != logs.FORMAT_VERSION:
        newer = type(version) is int and version > logs.FORMAT_VERSION
        return (f"format_version {_shown(version)} is not {logs.FORMAT_VERSION}"
                + (": upgrade mosaic-gym" if newer else " (is this a trajectory log?)"))
    problem = _fields(record, _RECORD_FIELDS, "the record")
    if problem:
        return problem
    sessions, steps = record["sessions"], record["steps"]
    if not sessions:
        return "the record has no sessions"
    nesting: list[int] = []
    for i, s in enumerate(sessions):
        problem = _fields(s, _SESSION_FIELDS, f"session {i}")
        if problem:
            return problem
        if s["id"] != i:
            return f"session {i} has id {s['id']}: ids must be 0..{len(sessions) - 1} in order"
        if s["kind"] not in _SESSION_KINDS:
            return f"session {i} is of kind {_shown(s['kind'])}, not one of {', '.join(_SESSION_KINDS)}"
        if (s["kind"] == "root") != (i == 0) or (s["parent"] is None) != (i == 0):
            return f"session {i}: only session 0 is the root, with no parent"
        if i and not 0 <= s["parent"] < i:
            return f"session {i} has parent {s['parent']}: a parent comes before its child"
        nesting.append(0 if i == 0 else nesting[s["parent"]] + (s["kind"] == "fork"))
        if nesting[-1] > MAX_FORK_NESTING:
            return f"session {i} is a fork nested {nesting[-1]} deep (at most {MAX_FORK_NESTING})"
    for k, step in enumerate(steps):
        problem = _fields(step, _STEP_FIELDS, f"step {k + 1}")
        if problem:
            return problem
        for key in ("session", "next_session"):
            if not 0 <= step[key] < len(sessions):
                return f"step {k + 1}'s {key} is {step[key]}, not a session id (0..{len(sessions) - 1})"
    return None


def read_log(path: Path, problems: Problems, name: str | None = None,
             max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of a log the page can show, with their line numbers (from 1). Every other line is reported
    to ``problems`` as ``name:line: why`` and skipped: too long (never loaded), not UTF-8, not JSON, nested too
    deep, or not a record (:func:`check_record`). A file that is not gzip, or is cut off, is reported too."""
    name = name or str(path)
    try:
        with gzip.open(path, "rb") as f:
            for number, line in _lines(f, name, problems, max_line_bytes):
                record, why = parse_line(line)
                why = why or check_record(record)
                if why:
                    problems.add(f"{name}:{number}: {why}: skipped")
                else:
                    yield number, record
    except (EOFError, zlib.error) as err:
        problems.add(f"{name}: the log is cut off ({err}): the records before the cut are shown")
    except (gzip.BadGzipFile, OSError) as err:
        problems.add(f"{name}: not a gzip trajectory log ({err}): skipped")


def credit_difference(record: dict[str, Any]) -> float | None:
    """The largest gap between a session's Mosaic and broadcast advantages in ``record``; None without both."""
    gaps = [abs(s["credit_mosaic"] - s["credit_broadcast"]) for s in record["sessions"]
            if s["credit_mosaic"] is not None and s["credit_broadcast"] is not None]
    return max(gaps) if gaps else None


def summary(record: dict[str, Any], n: int, log: str) -> dict[str, Any]:
    """What the list, the group view and the filters show of a record (checked by :func:`check_record`): the
    session tree with each session's credit, not its steps; the full record is loaded when it is opened."""
    group = None if record["group"] is None else f"{log}|{record['iteration']}|{record['group']}"
    return {"n": n, "log": log, "source": record["source"], "iteration": record["iteration"],
            "group": record["group"], "group_key": group, "task_id": record["task_id"],
            "question": record["question"], "success": record["success"], "reward": record["reward"],
            "num_sessions": len(record["sessions"]), "kinds": [s["kind"] for s in record["sessions"]],
            "steps_used": record["steps_used"], "budget": record["budget"], "end": record["end"],
            "credit": record["credit"], "credit_diff": credit_difference(record),
            "tree": [{"id": s["id"], "parent": s["parent"], "kind": s["kind"], "steps": s["steps"],
                      "advantage": s["credit_advantage"], "broadcast": s["credit_broadcast"],
                      "mosaic": s["credit_mosaic"], "contribution": s["credit_contribution"]}
                     for s in record["sessions"]]}


def groups(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's groups (a training iteration's trajectories of one task; an evaluation's samples of one task), in
    log order: their members, how many solved it, and the largest gap between Mosaic's and broadcast's credit of
    a session (None where the records carry no credit)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for t in summaries:
        if t["group_key"] is not None:
            by_key.setdefault(t["group_key"], []).append(t)
    out = []
    for key, members in by_key.items():
        gaps = [t["credit_diff"] for t in members if t["credit_diff"] is not None]
        first = members[0]
        out.append({"key": key, "log": first["log"], "iteration": first["iteration"], "group": first["group"],
                    "task_id": first["task_id"], "members": [t["n"] for t in members],
                    "solved": sum(t["success"] for t in members), "credit": first["credit"],
                    "credit_diff": max(gaps) if gaps else None})
    return out


def most_different(run_groups: list[dict[str, Any]], count: int = 10) -> list[str]:
    """The keys of the ``count`` groups whose credits differ most (by more than :data:`algos.credit.compare.TOL`),
    the largest gap first, log order among equals."""
    differ = [g for g in run_groups if g["credit_diff"] is not None and g["credit_diff"] > TOL]
    return [g["key"] for g in sorted(differ, key=lambda g: -g["credit_diff"])[:count]]


def index(run_dir: str | Path, problems: Problems | None = None) -> Iterator[tuple[Entry, dict[str, Any]]]:
    """Every trajectory under ``run_dir`` the page can show, with its full record, one at a time, numbered from 0
    in log order; what cannot be shown goes to ``problems``."""
    root = Path(run_dir)
    problems = problems if problems is not None else Problems()
    n = 0
    for path in logs.find_logs(root):
        name = _name(root, path)
        for line, record in read_log(path, problems, name):
            yield Entry(n, path, line, summary(record, n, name)), record
            n += 1


def _name(root: Path, path: Path) -> str:
    return str(path.relative_to(root)) if path != root else path.name


CURVES = ("success", "sessions", "steps", "kl_after", "entropy", "clip_fraction_after", "unequal_groups")
"""The metrics the page plots by iteration when ``metrics.jsonl`` has them, and every ``probe_*`` metric."""

MAX_SIDE_FILE_BYTES = 64 * 2**20
"""The largest ``summary.json`` or ``passkt.json`` read; a larger one is reported and skipped."""


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _curve_key(key: str) -> bool:
    return key in CURVES or key.startswith("probe_")


def _json_file(path: Path, name: str, problems: Problems) -> Any:
    if path.stat().st_size > MAX_SIDE_FILE_BYTES:
        problems.add(f"{name}: larger than {MAX_SIDE_FILE_BYTES} bytes: skipped")
        return None
    data, why = parse_line(path.read_bytes())
    if why:
        problems.add(f"{name}: {why}: skipped")
    return data


def _metrics(path: Path, name: str, problems: Problems) -> list[dict[str, Any]]:
    points = []
    with path.open("rb") as f:
        for number, line in _lines(f, name, problems, MAX_LINE_BYTES):
            if not line.strip():
                continue
            m, why = parse_line(line)
            if why is None and not (isinstance(m, dict) and type(m.get("iteration")) is int):
                why = "not an object with an integer iteration"
            if why:
                problems.add(f"{name}:{number}: {why}: skipped")
                continue
            points.append({k: v for k, v in m.items() if k == "iteration" or (_curve_key(k) and _number(v))})
    return points


def _heldout(path: Path, name: str, points: list[dict[str, Any]], problems: Problems) -> dict[str, Any]:
    """Held-out success before and after RL (a training run's ``summary.json``), at iterations 0 and its last,
    and the study's probe metrics (``probe_*`` numbers) of the summary."""
    data = _json_file(path, name, problems)
    if not isinstance(data, dict):
        if data is not None:
            problems.add(f"{name}: not a JSON object: skipped")
        return {"heldout": [], "probes": {}}
    last = data.get("iterations") if type(data.get("iterations")) is int else \
        max((p["iteration"] + 1 for p in points), default=0)
    heldout = []
    for iteration, key in ((0, "success_warm_start"), (last, "success_final")):
        stage = data.get(key)
        if isinstance(stage, dict) and _number(stage.get("success")):
            heldout.append({"iteration": iteration, "value": stage["success"]})
    return {"heldout": heldout, "probes": {k: v for k, v in data.items() if k.startswith("probe_") and _number(v)}}


def run_overview(run_dir: str | Path, problems: Problems | None = None) -> dict[str, Any]:
    """The run's curves (every ``metrics.jsonl`` under it: success, sessions, steps and, when logged, KL,
    entropy, clip fraction, unequal groups and ``probe_*`` metrics by iteration; held-out success before and
    after RL from the ``summary.json`` beside it, with its ``probe_*`` numbers) and its Pass@(K,T) tables
    (every ``passkt.json``). A file that cannot be read is reported to ``problems`` and skipped."""
    root = Path(run_dir)
    problems = problems if problems is not None else Problems()
    if root.is_file():
        return {"curves": [], "heatmaps": []}
    curves = []
    for path in sorted(root.rglob("metrics.jsonl")):
        points = _metrics(path, _name(root, path), problems)
        side = path.with_name("summary.json")
        extra = _heldout(side, _name(root, side), points, problems) if side.is_file() else \
            {"heldout": [], "probes": {}}
        if points or extra["heldout"]:
            folder = path.parent.relative_to(root)
            curves.append({"run": root.resolve().name if folder == Path(".") else str(folder), "points": points,
                           **extra})
    heatmaps = []
    for path in sorted(root.rglob("passkt.json")):
        name = _name(root, path)
        table = _json_file(path, name, problems)
        why = _passkt_problem(table)
        if table is not None and why:
            problems.add(f"{name}: {why}: skipped")
        if table is None or why:
            continue
        heatmaps.append({"path": name, "ks": table["ks"], "ts": table["ts"], "table": table["table"],
                         "title": f"Pass@(K,T), {table['protocol']}, n={table['n']}, {len(table['task_ids'])} tasks"})
    return {"curves": curves, "heatmaps": heatmaps}


def _passkt_problem(table: Any) -> str | None:
    if not isinstance(table, dict):
        return "not a JSON object"
    for key in ("ks", "ts", "table", "protocol", "n", "task_ids"):
        if key not in table:
            return f"has no {key!r}"
    ks, ts, rows = table["ks"], table["ts"], table["table"]
    if not (isinstance(ks, list) and isinstance(ts, list) and isinstance(rows, list) and len(rows) == len(ks)
            and all(isinstance(r, list) and len(r) == len(ts) and all(_number(v) for v in r) for r in rows)):
        return "its table is not one number per K and T"
    if not isinstance(table["task_ids"], list):
        return "its task_ids is not a list"
    return None


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


def _write_page(out: IO[str], run_dir: Path, embed: bool, problems: Problems,
                entries: list[Entry] | None = None) -> None:
    before, after = _template()
    out.write(before)
    summaries = []
    for entry, record in index(run_dir, problems):
        summaries.append(entry.summary)
        if entries is not None:
            entries.append(entry)
        if embed:
            out.write(f'<script type="application/json" id="traj-{entry.n}">{json_for_html(record)}</script>\n')
    run_groups = groups(summaries)
    overview = run_overview(run_dir, problems)
    scale = max((abs(s[k]) for t in summaries for s in t["tree"] for k in ("advantage", "broadcast", "mosaic")
                 if s[k] is not None), default=0.0)
    run = {"name": run_dir.resolve().name, "logs": [_name(run_dir, p) for p in logs.find_logs(run_dir)],
           "trajectories": summaries, "groups": run_groups, "most_different": most_different(run_groups),
           "credit_scale": scale, **overview, "problems": problems.report()}
    out.write(f'<script type="application/json" id="run-data">{json_for_html(run)}</script>\n')
    out.write(after)


def render_page(run_dir: str | Path, embed: bool = True) -> str:
    """The page as a string (every trajectory in it when ``embed``); :func:`write_html` streams it instead."""
    buffer = io.StringIO()
    _write_page(buffer, _check_dir(run_dir), embed, Problems())
    return buffer.getvalue()


def write_html(run_dir: str | Path, out: str | Path, problems: Problems | None = None) -> Path:
    """Write one self-contained HTML file of the run, every trajectory in it, to ``out``; returns ``out``. What
    could not be read is listed on the page and added to ``problems`` when given.

    The logs are read one record at a time and written as they are read.
    """
    root = _check_dir(run_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="ascii") as f:
        _write_page(f, root, True, problems if problems is not None else Problems())
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
        self.problems = Problems()
        _write_page(buffer, self.run_dir, False, self.problems, self.entries)
        self.page = buffer.getvalue().encode("ascii")
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        if not isinstance(host, str):  # an AF_INET(6) socket's address is text; typeshed allows bytes for others
            host = host.decode()
        return f"http://{host}:{port}/"

    def record(self, n: int) -> dict[str, Any] | None:
        """Trajectory ``n`` read from its log (the log is read up to its line, one record at a time)."""
        if not 0 <= n < len(self.entries):
            return None
        entry = self.entries[n]
        return next((record for line, record in read_log(entry.log, Problems()) if line == entry.line), None)


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


def _css_string(text: str) -> str:
    """``text`` for a double-quoted CSS string (an attribute selector's value)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def pick_for_screenshot(server: ViewerServer) -> tuple[str, str]:
    """What a screenshot opens: the group whose credits differ most (``("group", key)``) or, in a run without
    credit, the trajectory with the most sessions (``("trajectory", n)``)."""
    if not server.entries:
        raise ValueError(f"{server.run_dir} holds no trajectory the viewer can show")
    top = most_different(groups([e.summary for e in server.entries]), count=1)
    if top:
        return "group", top[0]
    return "trajectory", str(max(server.entries, key=lambda e: (e.summary["num_sessions"], -e.n)).n)


def screenshot(run_dir: str | Path, png: str | Path, trajectory: int | None = None, session: int | None = None,
               width: int = 1400, height: int = 900) -> Path:
    """A PNG of the served page (Playwright, the env's Chromium) with, unless ``trajectory`` is given, the group
    whose credits differ most opened (:func:`pick_for_screenshot`); else trajectory ``trajectory`` and, if
    given, its session ``session`` selected."""
    server, _ = serve_in_thread(run_dir)
    try:
        kind, which = ("trajectory", str(trajectory)) if trajectory is not None else pick_for_screenshot(server)
        browser = launch_browser()
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(server.url)
            if kind == "group":
                page.select_option("#f-group", which)
                page.wait_for_selector(f'#detail[data-group="{_css_string(which)}"]')
            else:
                page.click(f'tr.traj-row[data-n="{which}"]')
                page.wait_for_selector(f'#detail[data-n="{which}"]')
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
