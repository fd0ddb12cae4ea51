"""Bad constructor arguments and bad corpora (issue 13, section 6): each is refused at construction with one
line that names the argument, or the file and line, and what is wrong; nothing raw leaks from deep inside."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs  # noqa: F401  (registers the ids)
from envs.web.checks import shown
from envs.prompts import ROLE_TAG
from envs.web.corpus import CorpusError, CorpusWarning, load_corpus

from helpers import SITE_SIZE

DOC = {"id": "d1", "url": "/wiki/Edra_Vane", "title": "Edra Vane", "text": "Edra Vane was a painter."}
TASK = {"id": "t1", "question": "Who painted?", "answer": "Edra Vane", "split": "train"}
DIGITS = sys.get_int_max_str_digits()


def make(**kwargs):
    return gym.make("mosaic/WebQA-v0", **{"site_size": SITE_SIZE, **kwargs})


def line(record: dict) -> bytes:
    return json.dumps(record).encode("utf-8") + b"\n"


def one_clear_line(err: BaseException) -> str:
    message = str(err)
    assert "\n" not in message and len(message) < 600, message
    return message


# --- constructor arguments ----------------------------------------------------------------------------

BAD_KWARGS = [
    (dict(site=123), "site must be 'builtin', the path of a corpus"),
    (dict(site=None), "site must be 'builtin', the path of a corpus"),
    (dict(site=""), "site must be 'builtin', the path of a corpus"),
    (dict(site="  "), "site must be 'builtin', the path of a corpus"),
    (dict(site_size="big"), "site_size must be a whole number >= 60"),
    (dict(site_size=1.5), "site_size must be a whole number >= 60"),
    (dict(site_size=True), "site_size must be a whole number >= 60"),
    (dict(site_size=10), "site_size must be a whole number >= 60"),
    (dict(site_seed="0"), "site_seed must be a whole number >= 0"),
    (dict(site_seed=-1), "site_seed must be a whole number >= 0"),
    (dict(token_counter=5), "token_counter must be a function"),
    (dict(token_counter="len"), "token_counter must be a function"),
    (dict(session_max_tokens=True), "session_max_tokens must be a whole number >= 1 (an int, not a bool), got True"),
    (dict(session_max_tokens=4096.0), "session_max_tokens must be a whole number >= 1"),
    (dict(max_sessions=False), "max_sessions must be a whole number >= 1"),
    (dict(chunk_tokens="400"), "chunk_tokens must be a whole number >= 1"),
    (dict(max_fork_depth=True), "max_fork_depth must be a whole number >= 0"),
    (dict(max_steps=True), "max_steps must be an int"),
    (dict(max_steps=(True, 8)), "max_steps must be an int"),
    (dict(max_steps=[4, True]), "max_steps must be an int"),
    (dict(max_steps=10**5000), None),  # accepted: a huge budget is a budget
    (dict(hops=(1, 2, 3)), "hops must be None, a whole number >= 1 or a (lo, hi) range"),
    (dict(hops=(3, 1)), "hops must be None"),
    (dict(hops=True), "hops must be None"),
    (dict(hops="2"), "hops must be None"),
    (dict(hops=0), "hops must be None"),
    (dict(hops=-(10**5000)), "got an int of about 5001 digits"),
    (dict(show_budget="no"), "show_budget must be True or False, got 'no'"),
    (dict(candidates="yes"), "candidates must be True or False, got 'yes'"),
    (dict(allow_compact=1), "allow_compact must be True or False"),
    (dict(allow_fork=None), "allow_fork must be True or False"),
    (dict(split=None), "split=None is unknown"),
    (dict(overflow=["truncate"]), "overflow=['truncate'] is unknown"),
]


@pytest.mark.parametrize("kwargs, fragment", BAD_KWARGS, ids=[f"{k}={shown(v)[:30]}" for (k, v), in (
    tuple(kwargs.items()) for kwargs, _ in BAD_KWARGS)])
def test_a_bad_argument_is_refused_at_construction_by_name(kwargs, fragment):
    if fragment is None:
        make(**kwargs).close()
        return
    with pytest.raises(ValueError) as err:
        make(**kwargs)
    assert fragment in one_clear_line(err.value)


@pytest.mark.parametrize("returned", [-1, 2.5, None, True, "3", [1]])
def test_a_token_counter_that_returns_no_count_is_named_where_it_is_used(returned):
    env = make(token_counter=lambda text: returned)
    with pytest.raises(ValueError) as err:
        env.reset(seed=0)
    message = one_clear_line(err.value)
    assert message.startswith("token_counter returned ") and "whole number >= 0" in message


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.integers(max_value=-1), st.floats(), st.text(max_size=5), st.none(), st.booleans()))
def test_any_count_that_is_not_a_whole_number_is_refused(returned):
    env = make(token_counter=lambda text: returned)
    with pytest.raises(ValueError, match="^token_counter returned "):
        env.reset(seed=0)


def test_a_good_token_counter_still_counts():
    env = make(token_counter=lambda text: len(text.split()))
    obs, info = env.reset(seed=0)
    pieces = [f"{ROLE_TAG[m['role']]}\n{m['content']}\n" for m in info["messages"]]
    assert info["context_tokens"] == sum(len(piece.split()) for piece in pieces) > 0


# --- corpora ------------------------------------------------------------------------------------------

NESTED = b"[" * 100_000 + b"]" * 100_000
BAD_CORPORA = [
    # (file, its second line, what the error names)
    ("documents.jsonl", b'{"id": "d2", "title": "Caf\xe9", "text": "x"}', "documents.jsonl line 2: not UTF-8 (byte 0xe9"),
    ("tasks.jsonl", b'{"id": "t2", "question": "\xff\xfe?", "answer": "x"}', "tasks.jsonl line 2: not UTF-8 (byte 0xff"),
    ("documents.jsonl", b'{"id": ' + b"7" * 4400 + b"}", f"documents.jsonl line 2: a number longer than {DIGITS} digits"),
    ("tasks.jsonl", b'{"id": "t2", "hops": ' + b"1" * 4400 + b"}", f"tasks.jsonl line 2: a number longer than {DIGITS}"),
    ("documents.jsonl", NESTED, "documents.jsonl line 2: JSON nested too deeply"),
    ("tasks.jsonl", b'{"id": "t2", "aliases": ' + NESTED + b"}", "tasks.jsonl line 2: JSON nested too deeply"),
    ("documents.jsonl", b'{"id": "d2", "title": "\\ud800", "text": "x"}', "documents.jsonl line 2: a \\u escape that is half"),
    ("tasks.jsonl", b'{"id": "t2", "question": "?", "answer": "\\uDFFF"}', "tasks.jsonl line 2: a \\u escape"),
    ("documents.jsonl", b'{"id": "d2", "url": "http://[oops", "title": "T", "text": "x"}',
     'documents.jsonl line 2: "url" is not a URL'),
    ("tasks.jsonl", b'{"id": "t2", "question": "?", "answer": "x", "split": {"a": 1}}',
     'tasks.jsonl line 2: "split" must be "train" or "test", not {\'a\': 1}'),
    ("tasks.jsonl", b'{"id": "t2", "question": "?", "answer": "x", "split": ["' + b"s" * 5000 + b'"]}',
     'tasks.jsonl line 2: "split" must be "train" or "test", not [\'sss'),
]


def write_corpus(root: Path, documents: bytes, tasks: bytes | None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "documents.jsonl").write_bytes(documents)
    if tasks is not None:
        (root / "tasks.jsonl").write_bytes(tasks)
    return root


@pytest.mark.parametrize("file, bad, fragment", BAD_CORPORA, ids=[f"{f}:{b[:24]!r}" for f, b, _ in BAD_CORPORA])
def test_a_bad_corpus_line_is_named_by_file_and_line(tmp_path, file, bad, fragment):
    good = {"documents.jsonl": line(DOC), "tasks.jsonl": line(TASK)}
    good[file] += bad + b"\n"
    root = write_corpus(tmp_path / "corpus", good["documents.jsonl"], good["tasks.jsonl"])
    with pytest.raises(CorpusError) as err:
        make(site=str(root))
    assert fragment in one_clear_line(err.value)


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path):
    root = write_corpus(tmp_path / "corpus", b"\xef\xbb\xbf" + line(DOC), b"\xef\xbb\xbf" + line(TASK))
    site = load_corpus(root)
    assert [d.title for d in site.documents()] == ["Edra Vane"] and site.tasks[0].id == "t1"


def test_a_corpus_without_tasks_says_how_to_add_them(tmp_path):
    root = write_corpus(tmp_path / "notasks", line(DOC), None)
    with pytest.raises(ValueError) as err:
        make(site=str(root), split="all")
    message = one_clear_line(err.value)
    assert "site 'notasks' has no tasks to ask: add a tasks.jsonl beside its pages" in message
    assert '"question"' in message and "available hops" not in message


def test_a_corpus_without_tasks_of_the_split_names_the_splits_it_has(tmp_path):
    root = write_corpus(tmp_path / "trainonly", line(DOC), line(TASK))
    with pytest.raises(ValueError) as err:
        make(site=str(root), split="test")
    assert "has no 'test' tasks (its 1 tasks are train): use split='all'" in one_clear_line(err.value)
    assert make(site=str(root), split="all").unwrapped.tasks[0].id == "t1"


def test_a_symlink_loop_is_skipped_with_a_warning_and_the_rest_loads(tmp_path):
    root = tmp_path / "html"
    (root / "wiki").mkdir(parents=True)
    (root / "wiki" / "Edra_Vane.html").write_text("<title>Edra Vane</title><p>Edra Vane was a painter.</p>")
    os.symlink("loop_b.html", root / "loop_a.html")
    os.symlink("loop_a.html", root / "loop_b.html")
    os.symlink("self.html", root / "wiki" / "self.html")
    os.symlink("missing.html", root / "gone.html")
    (root / "tasks.jsonl").write_bytes(line(TASK))
    with pytest.warns(CorpusWarning) as caught:
        env = make(site=str(root), split="all")
    message = str(caught[0].message)
    assert "skipped 4 file(s)" in message and "loop_a.html (a symbolic link loop)" in message
    assert "wiki/self.html (a symbolic link loop)" in message and "gone.html (a link to a missing file)" in message
    assert [d.path for d in env.unwrapped.site.documents()] == ["/wiki/Edra_Vane"]


# --- hypothesis: any corrupted line gives a CorpusError naming file:line, or a usable site ---------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats()
    | st.text(st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
DOCUMENT_KEYS = ("id", "url", "title", "text", "html")
TASK_KEYS = ("id", "question", "answer", "aliases", "hops", "family", "answer_kind", "split")


def records(keys: tuple[str, ...]):
    """Objects with the file's own keys (so that checks past the JSON parse are reached), values of any kind,
    surrogate halves included; json.dumps escapes them as \\udxxx."""
    field = st.one_of(json_values, st.text(max_size=20), st.integers(-3, 3))
    return st.fixed_dictionaries({}, optional={k: field for k in keys}).map(lambda r: json.dumps(r).encode())


def mutations(good: bytes):
    """``good`` with a few bytes put in or over it at one place."""
    return st.tuples(st.integers(0, len(good)), st.integers(0, 3), st.binary(min_size=1, max_size=4)).map(
        lambda m: good[: m[0]] + m[2] + good[m[0] + m[1]:]
    )


def corrupt_lines(keys: tuple[str, ...], good: bytes):
    return st.one_of(
        st.binary(max_size=120),
        json_values.map(lambda v: json.dumps(v).encode()),
        records(keys),
        mutations(good),
        st.integers(DIGITS - 2, DIGITS + 200).map(lambda n: b'{"id": ' + b"9" * n + b"}"),
        st.integers(1, 5000).map(lambda n: b'{"id": "x", "hops": ' + b"[" * n + b"]" * n + b"}"),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    file=st.sampled_from(["documents.jsonl", "tasks.jsonl"]),
    good_lines=st.integers(1, 3),
)
def test_any_corrupted_line_is_a_corpus_error_at_its_line_or_loads(data, file, good_lines):
    docs = [dict(DOC, id=f"good{k}", url=f"/wiki/Good_{k}") for k in range(good_lines)]
    tasks = [dict(TASK, id=f"good{k}") for k in range(good_lines)]
    content = {"documents.jsonl": b"".join(map(line, docs)), "tasks.jsonl": b"".join(map(line, tasks))}
    keys, good = (DOCUMENT_KEYS, line(docs[0])) if file == "documents.jsonl" else (TASK_KEYS, line(tasks[0]))
    bad = data.draw(corrupt_lines(keys, good.rstrip(b"\n")), label="bad line")
    content[file] += bad + b"\n"
    with tempfile.TemporaryDirectory() as folder:
        root = write_corpus(Path(folder), content["documents.jsonl"], content["tasks.jsonl"])
        try:
            site = load_corpus(root)
        except CorpusError as err:  # any other exception fails the test: nothing raw may leak
            match = re.match(rf"{re.escape(file)} line (\d+): ", one_clear_line(err))
            assert match, str(err)
            first = good_lines + 1
            assert first <= int(match.group(1)) <= first + bad.count(b"\n"), str(err)
            return
    # What loads must be usable: every page renders and encodes, search runs, tasks are whole.
    for doc in site.documents():
        site.render(doc.path).encode("utf-8")
    site.search_page_html("good").encode("utf-8")
    for task in site.tasks:
        assert isinstance(task.question, str) and isinstance(task.hops, int) and task.split in ("train", "test")
        json.dumps([task.question, task.answer, *task.aliases], ensure_ascii=False).encode("utf-8")


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from("abcde"), st.sampled_from("abcdefz"), min_size=1))
def test_any_graph_of_links_loads_the_real_pages_and_names_the_broken_links(links):
    """Files a..e: each is a link to another (f, z: to a missing file) or, when not in ``links``, a real page."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name in "abcde":
            if name in links:
                os.symlink(f"{links[name]}.html", root / f"{name}.html")
            else:
                (root / f"{name}.html").write_text(f"<title>Page {name}</title>")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                site, error = load_corpus(root), None
            except CorpusError as err:
                site, error = None, err
        broken = {n for n in links if not _reaches_a_page(n, links)}
        pages = [f"/{n}" for n in "abcde" if n not in broken]
        messages = [str(w.message) for w in caught if issubclass(w.category, CorpusWarning)]
        assert len(messages) == (1 if broken else 0)
        assert all(f" {n}.html (a " in messages[0] for n in broken)
        if pages:
            assert sorted(d.path for d in site.documents()) == pages
        else:
            assert "no corpus in" in str(error)


def _reaches_a_page(name: str, links: dict[str, str]) -> bool:
    seen = set()
    while name in links and name not in seen:
        seen.add(name)
        name = links[name]
    return name in "abcde" and name not in links


@pytest.mark.parametrize("target", ["http://[bad", "https://[::1", "http://[", "//[x]y/", "https://a]b[/"])
def test_an_unparseable_url_is_an_action_error_not_a_crash(target):
    import gymnasium as gym

    env = gym.make("mosaic/WebQA-v0", site_size=120, max_steps=4)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(f'open("{target}")')
    assert info["action_error"] and not terminated and not truncated
