"""A user's corpus: HTML folders and JSONL documents load as sites; malformed input fails clearly."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from envs.web import Site, normalize_answer
from envs.web.browser import html_to_view
from envs.web.clean import clean_html
from envs.web.corpus import (
    CorpusError,
    CorpusPage,
    CorpusSite,
    CorpusWarning,
    default_split,
    load_corpus,
    page_file,
    task_record,
    write_tasks,
)

FIXTURES = Path(__file__).parent / "fixtures"
HTML = FIXTURES / "corpus_html"
JSONL = FIXTURES / "corpus_jsonl"

GOOD_DOC = {"id": "d1", "url": "/wiki/A", "title": "A", "text": "About A."}
GOOD_TASK = {"id": "t1", "question": "What?", "answer": "A"}


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# --- HTML folders -------------------------------------------------------------------------------------


def test_html_folder_serves_pages_by_path_and_by_file_name():
    site = load_corpus(HTML)
    assert isinstance(site, Site) and site.name == "corpus_html"
    mira = (HTML / "wiki" / "Mira_Esk.html").read_text()
    assert site.page_html("/wiki/Mira_Esk") == site.page_html("/wiki/Mira_Esk.html") == mira
    # Served cleaned (tests/test_clean_html.py); as written with clean=False.
    assert site.render("/wiki/Mira_Esk?x=1") == clean_html(mira) != mira
    assert load_corpus(HTML, clean=False).render("/wiki/Mira_Esk?x=1") == mira
    home = (HTML / "index.html").read_text()
    assert site.page_html("/") == site.page_html("/index.html") == home
    folder = (HTML / "wiki" / "Lunder_Archipelago" / "index.html").read_text()
    for path in ("/wiki/Lunder_Archipelago/", "/wiki/Lunder_Archipelago", "/wiki/Lunder_Archipelago/index.html"):
        assert site.page_html(path) == folder
    assert site.page_html("/wiki/Nowhere") is None
    assert site.page_html("/tasks.jsonl") is None


def test_html_folder_documents_have_titles_and_visible_text():
    docs = {d.path: d for d in load_corpus(HTML).documents()}
    assert len(docs) == 13
    assert "/wiki/Lunder_Archipelago/" in docs and "/wiki/Lunder_Archipelago/index.html" not in docs
    mira = docs["/wiki/Mira_Esk"]
    assert mira.title == "Mira Esk"
    assert "founded the Tarvel Observatory" in mira.text
    assert "Vell" not in mira.text and "bornIn" not in mira.text  # hidden and script text stay out


def test_title_falls_back_to_h1_then_file_name(tmp_path):
    (tmp_path / "a.html").write_text("<html><body><h1>Heading A</h1></body></html>")
    (tmp_path / "Plain_Page.html").write_text("<p>no title at all</p>")
    titles = {d.path: d.title for d in load_corpus(tmp_path).documents()}
    assert titles == {"/Plain_Page": "Plain Page", "/a": "Heading A"}


def test_relative_links_of_an_html_folder_resolve_to_served_pages():
    site = load_corpus(HTML)
    for doc in site.documents():
        view = html_to_view(site.page_html(doc.path), doc.path)
        for link in view.links:
            if link.url.startswith("/"):
                assert site.render(link.url) is not None, f"dead link {link.url} on {doc.path}"


def test_fixture_tasks_are_answerable_from_the_pages():
    for folder in (HTML, JSONL):
        site = load_corpus(folder)
        text = " ".join(normalize_answer(d.text) for d in site.documents())
        assert site.tasks
        for task in site.tasks:
            assert normalize_answer(task.answer) in text, task.id


def test_links_that_leave_the_folder_and_hidden_files_are_not_pages(tmp_path):
    outside = tmp_path / "outside.html"
    outside.write_text("<title>Secret</title>")
    root = tmp_path / "site"
    shutil.copytree(HTML, root)
    os.symlink(outside, root / "leak.html")
    os.symlink(tmp_path, root / "up")
    os.symlink(root / "wiki" / "Vell.html", root / "Vell_again.html")
    (root / ".hidden.html").write_text("<title>Hidden</title>")
    site = load_corpus(root)
    paths = {d.path for d in site.documents()}
    assert "/leak" not in paths and "/up/outside" not in paths and "/.hidden" not in paths
    assert site.page_html("/leak") is None and site.page_html("/up/outside") is None
    assert site.page_html("/Vell_again") == (root / "wiki" / "Vell.html").read_text()


# --- JSONL documents ----------------------------------------------------------------------------------


def test_jsonl_folder_and_jsonl_file_load_the_same_site():
    folder, file = load_corpus(JSONL), load_corpus(JSONL / "documents.jsonl")
    assert list(folder.documents()) == list(file.documents())
    assert folder.tasks == file.tasks


def test_jsonl_page_paths_come_from_urls():
    site = load_corpus(JSONL)
    paths = [d.path for d in site.documents()]
    assert paths[0] == "/wiki/Anselm_Rook"
    assert "/example.org/people/benno-hale" in paths  # absolute url: host and path
    assert "/doc/d08" in paths  # no url
    assert all(site.page_html(p) is not None for p in paths)


def test_text_documents_render_as_paragraphs_and_keep_their_text():
    site = load_corpus(JSONL)
    doc = next(d for d in site.documents() if d.path == "/wiki/Drennick")
    assert doc.text.startswith("Drennick is a river town")
    view = html_to_view(site.page_html("/wiki/Drennick"), "/wiki/Drennick")
    assert view.title == "Drennick"
    assert view.chunks[0].splitlines()[0] == "Drennick"
    assert len(view.chunks[0].splitlines()) == 3


def test_html_documents_link_to_each_other():
    site = load_corpus(JSONL)
    view = html_to_view(site.page_html("/wiki/Livia_Marr"), "/wiki/Livia_Marr")
    assert [link.url for link in view.links] == ["/wiki/Caswick", "/wiki/Anselm_Rook", "/doc/d11"]
    assert all(site.render(link.url) for link in view.links)


def test_search_finds_the_evidence():
    site = load_corpus(JSONL)
    assert site.search("Halvard Theatre architect")[0].path == "/wiki/Halvard_Theatre"


def test_a_taken_url_falls_back_to_the_id_path(tmp_path):
    docs = [
        GOOD_DOC,
        dict(GOOD_DOC, id="d2", title="A again"),
        dict(GOOD_DOC, id="my doc?", url="wiki/B"),
        dict(GOOD_DOC, id="d4", url="wiki/B"),
    ]
    site = load_corpus(write_jsonl(tmp_path / "docs.jsonl", docs))
    assert [d.path for d in site.documents()] == ["/wiki/A", "/doc/d2", "/wiki/B", "/doc/d4"]
    assert site.render("/doc/d2") is not None and site.render("/wiki/B") is not None
    assert site.name == "docs" and site.tasks == ()
    clash = [dict(GOOD_DOC, url="/doc/d2"), dict(GOOD_DOC, id="d2", url="/doc/d2")]
    with pytest.raises(CorpusError, match="line 2: document 'd2' has no path of its own"):
        load_corpus(write_jsonl(tmp_path / "clash.jsonl", clash))


def test_an_id_path_is_served_under_its_quoted_url(tmp_path):
    site = load_corpus(write_jsonl(tmp_path / "docs.jsonl", [dict(GOOD_DOC, id="my doc?", url="")]))
    assert [d.path for d in site.documents()] == ["/doc/my doc?"]
    assert site.render("/doc/my%20doc%3F") == site.page_html("/doc/my doc?") is not None


# --- tasks --------------------------------------------------------------------------------------------


def test_tasks_load_with_defaults_and_explicit_splits():
    tasks = {t.id: t for t in load_corpus(HTML).tasks}
    assert tasks["lunder-1"].aliases == ("Tarrow",) and tasks["lunder-1"].hops == 2
    assert tasks["lunder-2"].split == "test" and tasks["lunder-4"].split == "train"
    assert tasks["lunder-3"].aliases == () and tasks["lunder-3"].family == "corpus"
    assert tasks["lunder-3"].split == default_split("lunder-3")
    assert tasks["lunder-5"].hops == 1 and tasks["lunder-5"].answer_kind == "number"


def test_default_split_is_fixed_and_near_one_fifth_test():
    splits = [default_split(f"task-{i}") for i in range(2000)]
    assert splits == [default_split(f"task-{i}") for i in range(2000)]
    assert 0.17 < splits.count("test") / len(splits) < 0.23


def test_tasks_round_trip_through_tasks_jsonl(tmp_path):
    tasks = load_corpus(HTML).tasks
    shutil.copytree(HTML, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".mosaic-index", "tasks.jsonl"))
    write_tasks(tasks, tmp_path / "tasks.jsonl")
    assert load_corpus(tmp_path).tasks == tasks and all(t.gold_path for t in tasks)
    assert task_record(tasks[0])["id"] == "lunder-1"


# --- errors -------------------------------------------------------------------------------------------


def test_a_missing_or_empty_corpus_says_what_it_expected(tmp_path):
    with pytest.raises(CorpusError, match="no such file or folder"):
        load_corpus(tmp_path / "nope")
    with pytest.raises(CorpusError, match="neither .html files nor documents.jsonl"):
        load_corpus(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CorpusError, match="not a .jsonl documents file"):
        load_corpus(tmp_path / "notes.txt")
    with pytest.raises(CorpusError, match="holds no documents"):
        load_corpus(write_jsonl(tmp_path / "empty.jsonl", []))


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"id": "d1", "url": "/a", "html": "<p>x</p>"}, 'missing "title"'),
        ({"url": "/a", "title": "A", "text": "x"}, 'missing "id"'),
        ({"id": "d1", "title": "A"}, 'give exactly one of "text" or "html"'),
        ({"id": "d1", "title": "A", "text": "x", "html": "<p>x</p>"}, 'give exactly one of "text" or "html"'),
        ({"id": "d1", "title": 5, "text": "x"}, '"title" must be a non-empty string'),
        ({"id": "d1", "title": "A", "text": "x", "url": 3}, '"url" must be a string'),
        ({"id": "d1", "title": "A", "body": "x"}, "unknown key 'body'"),
        ('{"id": "d1", "title": "A", "text": "x"', "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_a_malformed_document_line_names_file_line_and_a_valid_example(tmp_path, bad, message):
    file = write_jsonl(tmp_path / "docs.jsonl", [dict(GOOD_DOC, id="d0"), bad])
    with pytest.raises(CorpusError) as err:
        load_corpus(file)
    assert str(err.value).startswith("docs.jsonl line 2: ")
    assert message in str(err.value)
    assert 'a valid line: {"id": "d1", "url": "/wiki/Edra_Vane"' in str(err.value)


def test_duplicate_ids_are_refused(tmp_path):
    with pytest.raises(CorpusError, match="docs.jsonl line 2: the id 'd1' is used twice"):
        load_corpus(write_jsonl(tmp_path / "docs.jsonl", [GOOD_DOC, GOOD_DOC]))


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"id": "t2", "question": "Q?"}, 'tasks.jsonl line 2: missing "answer"'),
        ({"id": "t2", "answer": "A"}, 'tasks.jsonl line 2: missing "question"'),
        (dict(GOOD_TASK, id="t2", answer=""), '"answer" must be a non-empty string'),
        (dict(GOOD_TASK, id="t2", aliases="A"), '"aliases" must be a list of strings'),
        (dict(GOOD_TASK, id="t2", hops=0), '"hops" must be a whole number'),
        (dict(GOOD_TASK, id="t2", split="dev"), '"split" must be "train" or "test"'),
        (dict(GOOD_TASK, id="t2", alias=["A"]), "unknown key 'alias'"),
        (GOOD_TASK, "tasks.jsonl line 2: the id 't1' is used twice"),
    ],
)
def test_a_malformed_task_line_names_file_and_line(tmp_path, bad, message):
    write_jsonl(tmp_path / "documents.jsonl", [GOOD_DOC])
    write_jsonl(tmp_path / "tasks.jsonl", [GOOD_TASK, bad])
    with pytest.raises(CorpusError) as err:
        load_corpus(tmp_path)
    assert message in str(err.value)


def test_numeric_ids_and_blank_lines_are_fine(tmp_path):
    write_jsonl(tmp_path / "documents.jsonl", [dict(GOOD_DOC, id=7), ""])
    write_jsonl(tmp_path / "tasks.jsonl", [dict(GOOD_TASK, id=3)])
    site = load_corpus(tmp_path)
    assert site.tasks[0].id == "3" and site.task("3").answer == "A"


# --- building blocks ----------------------------------------------------------------------------------


def test_page_file_maps_site_paths_to_files_and_refuses_climbing():
    assert page_file("/") == "index.html"
    assert page_file("/wiki/X") == "wiki/X.html"
    assert page_file("/wiki/X.html") == "wiki/X.html"
    assert page_file("/wiki/") == "wiki/index.html"
    for bad in ("/../etc/passwd", "/a/../../b", "wiki/X", "/a\\b", "/./a"):
        with pytest.raises(ValueError, match="not a plain site path"):
            page_file(bad)


def test_corpus_site_from_pages_in_memory():
    site = CorpusSite("mem", [CorpusPage("/a", "<title>A</title><p>alpha</p>", aliases=("/alpha",))])
    assert site.page_html("/alpha") == site.page_html("/a")
    assert [d.title for d in site.documents()] == ["A"]
    assert site.search("alpha")[0].path == "/a"


def test_browsecomp_plus_field_names_load(tmp_path):
    """BrowseComp-Plus's own names: docid/text/url for documents, query_id/query/answer (and its doc lists)
    for queries."""
    docs = [{"docid": "101", "url": "https://en.example.org/wiki/Edra_Vane",
             "text": "---\ntitle: Edra Vane\n---\nEdra Vane was a painter born in Oskarde."},
            {"docid": 102, "text": "Oskarde is a town on the river Lem."}]
    queries = [{"query_id": "q1", "query": "Which painter was born in Oskarde?", "answer": "Edra Vane",
                "gold_docs": [{"docid": "101", "text": "..."}], "negative_docs": [], "evidence_docs": []}]
    (tmp_path / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    site = load_corpus(tmp_path)
    by_path = {d.path: d for d in site.documents()}
    assert by_path["/en.example.org/wiki/Edra_Vane"].title == "Edra Vane"
    assert by_path["/doc/102"].title == "Oskarde is a town on the river Lem."
    task = site.tasks[0]
    assert (task.id, task.question, task.answer) == ("q1", "Which painter was born in Oskarde?", "Edra Vane")
    assert site.search("painter Oskarde")[0].path == "/en.example.org/wiki/Edra_Vane"


@pytest.mark.parametrize("file, record, fragment", [
    ("documents.jsonl", {"docid": "1", "id": "1", "text": "x"}, 'both "docid" and "id" are given'),
    ("tasks.jsonl", {"query_id": "q", "id": "q", "question": "?", "answer": "a"}, 'both "query_id" and "id"'),
    ("tasks.jsonl", {"id": "q", "query": "?", "question": "?", "answer": "a"}, 'both "query" and "question"'),
])
def test_an_alias_beside_its_own_name_is_refused(tmp_path, file, record, fragment):
    good = {"documents.jsonl": {"id": "d1", "title": "T", "text": "x"},
            "tasks.jsonl": {"id": "t1", "question": "?", "answer": "a"}}
    for name, line in good.items():
        (tmp_path / name).write_text(json.dumps(line) + "\n" + (json.dumps(record) + "\n" if name == file else ""))
    with pytest.raises(CorpusError, match=f"{file} line 2: {re.escape(fragment)}"):
        load_corpus(tmp_path)


# An id of the wrong type is reported as what it is, under the name the line gave it (docid, query_id, id).
WRONG_IDS = [
    (1.5, "float 1.5"),
    ([1], "list [1]"),
    (True, "bool True"),
    (False, "bool False"),
    ({}, "dict {}"),
    ({"id": 1}, "dict {'id': 1}"),
    (None, "null"),
    ("", "an empty string"),
    (1e20, "float 1e+20"),
]


@pytest.mark.parametrize("file, key", [("documents.jsonl", "docid"), ("documents.jsonl", "id"),
                                       ("tasks.jsonl", "query_id"), ("tasks.jsonl", "id")])
@pytest.mark.parametrize("value, shown_as", WRONG_IDS, ids=[shown for _, shown in WRONG_IDS])
def test_an_id_of_the_wrong_type_is_named_with_its_type(tmp_path, file, key, value, shown_as):
    good = {"documents.jsonl": {"id": "d1", "title": "T", "text": "x"},
            "tasks.jsonl": {"id": "t1", "question": "?", "answer": "a"}}
    bad = {**{k: v for k, v in good[file].items() if k != "id"}, key: value}
    for name, line in good.items():
        (tmp_path / name).write_text(json.dumps(line) + "\n\n" + (json.dumps(bad) + "\n" if name == file else ""))
    with pytest.raises(CorpusError) as err:
        load_corpus(tmp_path)
    assert str(err.value).startswith(f'{file} line 3: "{key}" must be a string or integer, got {shown_as}; ')
    assert "missing" not in str(err.value)


@pytest.mark.parametrize("file", ["documents.jsonl", "tasks.jsonl"])
def test_a_line_without_an_id_says_it_is_missing(tmp_path, file):
    good = {"documents.jsonl": {"id": "d1", "title": "T", "text": "x"},
            "tasks.jsonl": {"id": "t1", "question": "?", "answer": "a"}}
    for name, line in good.items():
        without = {k: v for k, v in line.items() if k != "id"}
        (tmp_path / name).write_text(json.dumps(line) + "\n" + (json.dumps(without) + "\n" if name == file else ""))
    with pytest.raises(CorpusError, match=f'{file} line 2: missing "id" \\(a string or an integer\\)'):
        load_corpus(tmp_path)


# A page file that links elsewhere is a page only when the file it links to is an HTML page of the site.
PAGE_LINKS = [  # (the link's target, relative to the site folder's parent; is it a page?)
    ("site/tasks.jsonl", False),
    ("site/.hidden/answers.html", False),
    ("site/notes.txt", False),
    ("outside.html", False),  # left out without a warning, as every link leading outside is
    ("site/wiki/Vell.html", True),
]


@pytest.mark.parametrize("target, is_page", PAGE_LINKS, ids=[t for t, _ in PAGE_LINKS])
@pytest.mark.parametrize("when", ["before-load", "after-load"])
def test_a_page_is_read_only_from_an_html_file_inside_the_site(tmp_path, target, is_page, when):
    warned = when == "before-load" and not is_page and target.startswith("site/")
    root = tmp_path / "site"
    shutil.copytree(HTML, root)
    (root / "tasks.jsonl").write_text('{"id": "t1", "question": "Q?", "answer": "Secret Answer"}\n')
    (root / ".hidden").mkdir()
    for file in ("site/.hidden/answers.html", "site/notes.txt", "outside.html"):
        (tmp_path / file).write_text("<title>Secret Answer</title>")
    link = root / "tlink.html"
    if when == "before-load":
        link.symlink_to(tmp_path / target)
    else:  # a real page when the corpus loads, swapped for the link afterwards
        link.write_text("<title>Fine</title>")
    with pytest.warns(CorpusWarning, match="tlink.html") if warned else contextlib.nullcontext():
        site = load_corpus(root)
    if when == "after-load":
        link.unlink()
        link.symlink_to(tmp_path / target)
    for path in ("/tlink", "/tlink.html"):
        html = site.render(path)
        assert (html is not None) == is_page and "Secret Answer" not in (html or ""), path
    if when == "before-load":
        assert ("/tlink" in {d.path for d in site.documents()}) == is_page
    assert not any("Secret Answer" in d.text or "Secret Answer" in d.title for d in site.documents())
