"""``mosaic view`` reads hostile logs without falling over: a line too long is skipped without being loaded,
nesting too deep, an unknown ``format_version``, a missing or mistyped field, session ids that are not 0..n-1,
bad bytes, a damaged gzip, each is one line naming ``file:line``, and every other record is shown. The run's
side files (``metrics.jsonl``, ``summary.json``, ``passkt.json``) are read the same way."""

from __future__ import annotations

import copy
import gzip
import json
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algos import logs
from mosaic_gym import viewer
from mosaic_gym.cli import main
from test_logs import oracle_records


@pytest.fixture(scope="module")
def good():
    """A real record with a fork and a compaction (an oracle episode)."""
    [record] = [r for r in oracle_records(1, families="compare", session_max_tokens=1500)]
    assert {s["kind"] for s in record["sessions"]} == {"root", "compact", "fork"}
    return record


def _line(record) -> bytes:
    return (json.dumps(record) + "\n").encode()


def _with(record, path, value):
    """``record`` with the field at ``path`` (keys and indices) set to ``value``, or removed for ``...``."""
    out = copy.deepcopy(record)
    holder = out
    for key in path[:-1]:
        holder = holder[key]
    if value is ...:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return out


def _read(tmp_path, lines, max_line_bytes=viewer.MAX_LINE_BYTES, raw=None):
    path = tmp_path / ("run" + logs.SUFFIX)
    path.write_bytes(raw if raw is not None else gzip.compress(b"".join(lines)))
    problems = viewer.Problems()
    records = list(viewer.read_log(path, problems, "run.log", max_line_bytes))
    return records, problems.report()


def _nested(record, depth):
    """``record``'s line with its meta a list nested ``depth`` deep (too deep for json.dumps to write)."""
    return _line(_with(record, ["meta"], "HERE")).replace(b'"HERE"', b"[" * depth + b"]" * depth)


# (what is wrong, the bad line built from a good record, what the problem line says)
BAD_LINES = [
    ("format_version true", lambda r: _line(_with(r, ["format_version"], True)), "format_version true is not 1"),
    ("format_version 0", lambda r: _line(_with(r, ["format_version"], 0)), "format_version 0 is not 1"),
    ("format_version a string", lambda r: _line(_with(r, ["format_version"], "1")), 'format_version "1" is not 1'),
    ("format_version 1.0", lambda r: _line(_with(r, ["format_version"], 1.0)), "format_version 1.0 is not 1"),
    ("a future format_version", lambda r: _line(_with(r, ["format_version"], 2)), "upgrade mosaic-gym"),
    ("no format_version", lambda r: _line(_with(r, ["format_version"], ...)), 'format_version "missing"'),
    ("no sessions", lambda r: _line(_with(r, ["sessions"], ...)), "the record has no 'sessions'"),
    ("no source", lambda r: _line(_with(r, ["source"], ...)), "the record has no 'source'"),
    ("no steps", lambda r: _line(_with(r, ["steps"], ...)), "the record has no 'steps'"),
    ("sessions as text", lambda r: _line(_with(r, ["sessions"], "abc")), "'sessions' is \"abc\", not a list"),
    ("a reward as text", lambda r: _line(_with(r, ["reward"], "1")), "'reward' is \"1\", not a number"),
    ("success as 1", lambda r: _line(_with(r, ["success"], 1)), "'success' is 1, not true or false"),
    ("no sessions at all", lambda r: _line(_with(r, ["sessions"], [])), "has no sessions"),
    ("a session not an object", lambda r: _line(_with(r, ["sessions", 1], 7)), "session 1 is not an object"),
    ("a session without a kind", lambda r: _line(_with(r, ["sessions", 1, "kind"], ...)), "session 1 has no 'kind'"),
    ("session ids from 1", lambda r: _line(_with(r, ["sessions", 0, "id"], 1)), "session 0 has id 1"),
    ("a repeated session id", lambda r: _line(_with(r, ["sessions", 2, "id"], 1)), "session 2 has id 1"),
    ("an unknown kind", lambda r: _line(_with(r, ["sessions", 1, "kind"], "<b>zzz</b>")), "of kind \"<b>zzz</b>\""),
    ("a second root", lambda r: _line(_with(r, ["sessions", 1, "kind"], "root")), "only session 0 is the root"),
    ("a parent after its child", lambda r: _line(_with(r, ["sessions", 1, "parent"], 5)), "has parent 5"),
    ("a step of no session", lambda r: _line(_with(r, ["steps", 0, "session"], 99)), "step 1's session is 99"),
    ("a step without its action", lambda r: _line(_with(r, ["steps", 0, "action"], ...)), "step 1 has no 'action'"),
    ("a list, not a record", lambda r: b"[1, 2]\n", "a record is an object, not list"),
    ("not JSON", lambda r: b"{not json\n", "not JSON"),
    ("NaN", lambda r: _line(r).replace(b'"reward": 1.0', b'"reward": NaN'), "NaN is not a JSON number"),
    ("a number out of range", lambda r: _line(r).replace(b'"reward": 1.0', b'"reward": 1e400'), "out of range"),
    ("an integer of 5000 digits", lambda r: _line(r).replace(b'"reward": 1.0', b'"reward": ' + b"9" * 5000),
     "not JSON"),
    ("nested 100,000 deep", lambda r: _nested(r, 100_000), "nested 100001 deep"),
    ("nested 33 deep", lambda r: _nested(r, 32), "nested 33 deep"),
    ("a bad byte", lambda r: _line(r).replace(b'"question": "', b'"question": "\xff'), "byte 0xff at column"),
    ("a lone continuation byte", lambda r: b'{"a": "\x80"}\n', "byte 0x80 at column 8"),
]


@pytest.mark.parametrize("case,bad,says", BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_a_bad_line_is_named_by_its_line_and_the_others_are_read(tmp_path, good, case, bad, says):
    records, problems = _read(tmp_path, [_line(good), bad(good), _line(good)])
    assert [line for line, _ in records] == [1, 3] and all(r == good for _, r in records)
    assert len(problems) == 1 and problems[0].startswith("run.log:2: ") and says in problems[0], problems


def test_a_record_the_reader_keeps_is_what_the_writer_wrote(tmp_path, good):
    path = tmp_path / ("run" + logs.SUFFIX)
    with logs.TrajectoryLog(path) as log:
        log.write(good)
    problems = viewer.Problems()
    assert list(viewer.read_log(path, problems)) == [(1, good)] and problems.report() == []


@pytest.mark.parametrize("past", [1, 5_000, 3 * 2**20])
def test_a_line_longer_than_the_cap_is_skipped_by_pieces(tmp_path, good, past):
    cap = len(_line(good))
    records, problems = _read(tmp_path, [_line(good), b"x" * (cap + past) + b"\n", _line(good)], max_line_bytes=cap)
    assert [line for line, _ in records] == [1, 3]
    assert problems == [f"run.log:2: line longer than {cap} bytes: skipped"]


def test_a_line_at_the_cap_is_read(tmp_path, good):
    line = _line(good)
    records, problems = _read(tmp_path, [line, line], max_line_bytes=len(line) - 1)
    assert records == [(1, good), (2, good)] and problems == []
    records, problems = _read(tmp_path, [line, line], max_line_bytes=len(line) - 2)
    assert records == [] and problems == [f"run.log:{n}: line longer than {len(line) - 2} bytes: skipped"
                                          for n in (1, 2)]


def test_a_line_far_past_the_cap_is_never_held_whole(tmp_path, good):
    """A gzip of a few hundred kB can hold a line of a hundred MB: the reader's memory stays near the cap (one
    line of it, and the gzip reader's own copy), whatever the line's length."""
    big = 8 * viewer.MAX_LINE_BYTES
    path = tmp_path / ("big" + logs.SUFFIX)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(_line(good))
        for _ in range(big // 2**20):
            f.write(b"[" * 2**20)
        f.write(b"\n" + _line(good))
    tracemalloc.start()
    try:
        problems = viewer.Problems()
        records = list(viewer.read_log(path, problems, "big"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [line for line, _ in records] == [1, 3]
    assert problems.report() == [f"big:2: line longer than {viewer.MAX_LINE_BYTES} bytes: skipped"]
    assert peak < 2.5 * viewer.MAX_LINE_BYTES, f"peak {peak / 2**20:.0f} MiB reading a {big / 2**20:.0f} MiB line"


# (what is wrong with the file, its bytes from the good line, what the problem line says)
BAD_FILES = [
    ("not gzip", lambda line: line, "run.log: not a gzip trajectory log"),
    ("cut off inside the gzip stream", lambda line: gzip.compress(line * 3)[:-30], "run.log: the log is cut off"),
    ("a last line without its newline", lambda line: gzip.compress(line * 2 + line[:-5]),
     "run.log:3: the last line is cut off"),
]


@pytest.mark.parametrize("case,raw,says", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_a_damaged_file_is_one_line_and_what_it_holds_before_is_read(tmp_path, good, case, raw, says):
    records, problems = _read(tmp_path, [], raw=raw(_line(good)))
    assert len(problems) == 1 and problems[0].startswith(says), problems
    assert all(r == good for _, r in records)


def test_problems_past_the_cap_are_counted(tmp_path, good):
    records, problems = _read(tmp_path, [b"{\n"] * (viewer.MAX_PROBLEMS + 7) + [_line(good)])
    assert records == [(viewer.MAX_PROBLEMS + 8, good)]
    assert len(problems) == viewer.MAX_PROBLEMS + 1 and problems[-1] == "... and 7 more problems"


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


def _paths(record):
    """Every field of a record a mutation may hit: top level, a session's, a step's."""
    return ([[k] for k in record] + [["sessions", i, k] for i, s in enumerate(record["sessions"]) for k in s]
            + [["steps", i, k] for i, s in enumerate(record["steps"]) for k in s])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), value=JSON | st.just(...))
def test_any_field_of_any_value_is_shown_or_named(tmp_path, good, data, value):
    """A record with any field set to any JSON value (or removed) is either kept, and then the page's data
    is built from it, or skipped with one line naming its line."""
    path = data.draw(st.sampled_from(_paths(good)))
    bad = _with(good, path, value)
    records, problems = _read(tmp_path, [_line(good), _line(bad)])
    assert records[0] == (1, good)
    if len(records) == 2:
        assert problems == [] and viewer.check_record(bad) is None
        viewer.json_for_html(viewer.summary(bad, 1, "run.log"))
    else:
        assert len(problems) == 1 and problems[0].startswith("run.log:2: ")


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.binary(max_size=60), max_size=5))
def test_any_bytes_never_raise(lines):
    """Each line of any bytes is a record or one problem; nothing raises."""
    problems = viewer.Problems()
    content = b"\n".join(lines) + b"\n"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("x" + logs.SUFFIX)
        path.write_bytes(gzip.compress(content))
        records = list(viewer.read_log(path, problems, "x"))
    assert len(records) + problems.count == content.count(b"\n")


# ---- the run's side files --------------------------------------------------------------------------------

METRICS = [
    ("not JSON", b"{oops\n", "not JSON"),
    ("no iteration", b'{"success": 0.5}\n', "not an object with an integer iteration"),
    ("iteration as text", b'{"iteration": "1", "success": 0.5}\n', "integer iteration"),
    ("a list", b"[1]\n", "integer iteration"),
    ("nested deep", b'{"iteration": 1, "x": ' + b"[" * 50 + b"]" * 50 + b"}\n", "nested 51 deep"),
]


@pytest.mark.parametrize("case,bad,says", METRICS, ids=[c[0] for c in METRICS])
def test_a_bad_metrics_line_is_named_and_the_curve_keeps_the_rest(tmp_path, case, bad, says):
    (tmp_path / "metrics.jsonl").write_bytes(b'{"iteration": 0, "success": 0.25, "entropy": 1.5, "loss": 3}\n' + bad
                                             + b'{"iteration": 2, "success": 0.75, "kl_after": "high"}\n')
    problems = viewer.Problems()
    [curve] = viewer.run_overview(tmp_path, problems)["curves"]
    assert problems.count == 1 and problems.report()[0].startswith("metrics.jsonl:2: ")
    assert says in problems.report()[0]
    # the curve keys it knows, numbers only: "loss" is no curve, "high" no number
    assert curve["points"] == [{"iteration": 0, "success": 0.25, "entropy": 1.5}, {"iteration": 2, "success": 0.75}]
    assert curve["run"] == tmp_path.name  # the folder's name, not "."


PASSKT = {"ks": [1, 2], "ts": [4, 8], "table": [[0.1, 0.2], [0.3, 0.4]], "protocol": "fixed", "n": 4,
          "task_ids": ["a", "b"]}
BAD_PASSKT = [
    ("no ts", {k: v for k, v in PASSKT.items() if k != "ts"}, "has no 'ts'"),
    ("no ks", {k: v for k, v in PASSKT.items() if k != "ks"}, "has no 'ks'"),
    ("a short row", {**PASSKT, "table": [[0.1], [0.3, 0.4]]}, "its table is not one number per K and T"),
    ("text in the table", {**PASSKT, "table": [["x", 0.2], [0.3, 0.4]]}, "its table is not one number per K and T"),
    ("a list", [1], "not a JSON object"),
]


@pytest.mark.parametrize("case,table,says", BAD_PASSKT, ids=[c[0] for c in BAD_PASSKT])
def test_a_bad_passkt_table_is_named_and_skipped(tmp_path, case, table, says):
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "passkt.json").write_text(json.dumps(PASSKT))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "passkt.json").write_text(json.dumps(table))
    problems = viewer.Problems()
    heatmaps = viewer.run_overview(tmp_path, problems)["heatmaps"]
    assert [h["path"] for h in heatmaps] == ["good/passkt.json"]
    assert problems.report() == [f"bad/passkt.json: {says}: skipped"]


def test_summary_gives_held_out_success_and_probe_numbers(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "success": i / 4}) + "\n"
                                                    for i in range(3)))
    (tmp_path / "summary.json").write_text(json.dumps({
        "iterations": 3, "success_warm_start": {"success": 0.4}, "success_final": {"success": 0.55},
        "probe_recall": 0.7, "probe_text": "x", "other": 1}))
    [curve] = viewer.run_overview(tmp_path)["curves"]
    assert curve["heldout"] == [{"iteration": 0, "value": 0.4}, {"iteration": 3, "value": 0.55}]
    assert curve["probes"] == {"probe_recall": 0.7}


def test_the_command_names_each_bad_line_on_one_line_and_writes_the_rest(tmp_path, good, capsys):
    path = tmp_path / "run" / ("a" + logs.SUFFIX)
    path.parent.mkdir()
    path.write_bytes(gzip.compress(_line(good) + b"\xff\n" + _line(_with(good, ["sessions", 0, "id"], 3))
                                   + _line(good)))
    assert main(["view", str(tmp_path / "run"), "--html", str(tmp_path / "page.html")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 2)[1] for line in err] == ["a.traj.jsonl.gz:2", "a.traj.jsonl.gz:3"]
    assert not any("Traceback" in line for line in err)
    page = (tmp_path / "page.html").read_text()
    assert page.count('<script type="application/json" id="traj-') == 2 and "a.traj.jsonl.gz:3: session 0 has id 3" in page


def test_the_server_opens_a_record_by_its_line_past_skipped_ones(tmp_path, good):
    path = tmp_path / ("a" + logs.SUFFIX)
    second = _with(good, ["question"], "the second")
    path.write_bytes(gzip.compress(_line(good) + b"{bad\n" + _line(second)))
    server = viewer.ViewerServer(tmp_path)
    try:
        assert [e.line for e in server.entries] == [1, 3]
        assert server.record(1) == second and server.record(0) == good and server.record(2) is None
        assert server.problems.report() == ["a.traj.jsonl.gz:2: not JSON (Expecting property name enclosed in "
                                            "double quotes at column 2): skipped"]
    finally:
        server.server_close()
