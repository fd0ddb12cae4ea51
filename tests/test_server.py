"""The site server: pages and live search, loopback only, nothing outside the folder, no answers."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import urllib.parse
from pathlib import Path

import pytest

from envs.web.server import serve

FIXTURE = Path(__file__).parent / "fixtures" / "corpus_html"
SECRET = "TOP-SECRET-CONTENT"


@pytest.fixture(scope="module")
def top(tmp_path_factory):
    """A folder holding secrets, with the site folder inside it."""
    return tmp_path_factory.mktemp("serve")


@pytest.fixture(scope="module")
def server(top):
    (top / "secret.txt").write_text(SECRET)
    (top / "secret.html").write_text(f"<title>{SECRET}</title>")
    root = top / "site"
    shutil.copytree(FIXTURE, root)
    (root / "style.css").write_text("body { color: black }")
    (root / ".env").write_text(SECRET)
    (root / "wiki" / "answers.jsonl").write_text(SECRET)
    os.symlink(top / "secret.txt", root / "leak.txt")
    os.symlink(top / "secret.html", root / "leak.html")
    os.symlink(top, root / "up")
    running = serve(root)
    yield running
    running.shutdown()


def get(server, raw_path: str, method: str = "GET") -> tuple[int, str, str]:
    """Send ``raw_path`` exactly as written (no client-side normalising)."""
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, raw_path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode("utf-8", "replace")
    finally:
        conn.close()


def test_url_is_loopback(server):
    assert server.url.startswith("http://127.0.0.1:")
    assert server.server_address[0] == "127.0.0.1"


@pytest.mark.parametrize(
    "path, file",
    [
        ("/", "index.html"),
        ("/wiki/Mira_Esk", "wiki/Mira_Esk.html"),
        ("/wiki/Mira_Esk.html", "wiki/Mira_Esk.html"),
        ("/wiki/Mira_Esk?from=search#career", "wiki/Mira_Esk.html"),
        ("/wiki/Lunder_Archipelago", "wiki/Lunder_Archipelago/index.html"),
        ("/wiki/Lunder_Archipelago/", "wiki/Lunder_Archipelago/index.html"),
    ],
)
def test_pages_are_served_by_site_path(server, path, file):
    status, kind, body = get(server, path)
    assert (status, kind) == (200, "text/html; charset=utf-8")
    assert body == (FIXTURE / file).read_text()


def test_other_files_of_the_folder_are_served_as_they_are(server):
    assert get(server, "/style.css")[:2] == (200, "text/css")


def test_search_page_is_rendered_live(server):
    status, _, body = get(server, "/search?" + urllib.parse.urlencode({"q": "Tarvel Observatory founder"}))
    assert status == 200
    assert '<a href="/wiki/Tarvel_Observatory">Tarvel Observatory</a>' in body
    assert "Search: Tarvel Observatory founder" in body


def test_head_has_no_body(server):
    status, _, body = get(server, "/wiki/Mira_Esk", method="HEAD")
    assert (status, body) == (200, "")


@pytest.mark.parametrize(
    "path",
    [
        "/../secret.txt",
        "/wiki/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.html",
        "/wiki/%2e%2e/%2e%2e/secret.txt",
        "/%252e%252e/secret.txt",
        "/%252e%252e%252fsecret.txt",
        "/..%2fsecret.txt",
        "/..%5csecret.txt",
        "/..\\secret.txt",
        "/wiki\\..\\..\\secret.txt",
        "//secret.txt",
        "//../secret.txt",
        "/leak.txt",
        "/leak.html",
        "/leak",
        "/up/secret.txt",
        "/up/secret",
        "/.env",
        "/tasks.jsonl",
        "/wiki/answers.jsonl",
        "/wiki/Nowhere",
        "/%00",
    ],
)
def test_nothing_outside_the_folder_and_no_answers_are_served(server, path):
    status, _, body = get(server, path)
    assert status == 404
    assert SECRET not in body and "Port Tarrow" not in body


def test_absolute_file_paths_are_not_served(server, top):
    for path in (f"/{top}/secret.txt", f"/{top}/site/index.html", f"file://{top}/secret.txt"):
        assert get(server, path)[0] == 404


def test_other_hosts_are_refused():
    for host in ("0.0.0.0", "192.168.1.5", "::", ""):
        with pytest.raises(ValueError, match="binds to 127.0.0.1 only"):
            serve(FIXTURE, host=host)


def test_localhost_and_context_manager():
    with serve(FIXTURE, host="localhost") as running:
        assert get(running, "/wiki/Vell")[0] == 200


# Every spelling of the answers file, and data, backup and hidden files: an allow-list refuses them all.
NEVER_SERVED = ["tasks.jsonl~", "TASKS.JSONL", ".tasks.jsonl.swp", "tasks.jsonl.bak", "tasks.jsonl.orig", "#tasks.jsonl#",
                "tasks.json", "tasks.csv", "notes.txt", "data.tsv", "dump.sql", "style.css~", "style.css.bak", ".hidden.css",
                "archive.zip", "page.html.bak", "logo.png.old"]


@pytest.mark.parametrize("name", NEVER_SERVED)
def test_answers_data_backup_and_hidden_files_are_never_served(tmp_path, name):
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text("<title>Home</title>")
    (root / name).write_text(SECRET)
    (root / "linked.css").symlink_to(root / name)  # an asset's name linking to a data file
    running = serve(root)
    try:
        for path in ("/" + urllib.parse.quote(name), "/linked.css"):
            status, _, body = get(running, path)
            assert status == 404 and SECRET not in body, path
        assert get(running, "/index.html")[0] == 200
    finally:
        running.shutdown()


@pytest.mark.parametrize("name", ["style.css", "app.js", "logo.PNG", "font.woff2", "clip.mp4"])
def test_what_a_page_needs_is_served(tmp_path, name):
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text("<title>Home</title>")
    (root / name).write_bytes(b"asset")
    running = serve(root)
    try:
        status, _, body = get(running, "/" + name)
        assert status == 200 and body == "asset"
    finally:
        running.shutdown()


# A page by its name that is another file by what it links to: served by the file it really is.
LINKED_PAGES = [  # (the link's target, relative to the site folder's parent; is it a page?)
    ("site/tasks.jsonl", False),
    ("site/.hidden/answers.html", False),
    ("site/notes.txt", False),
    ("secret.html", False),  # outside the site
    ("site/wiki/Vell.html", True),  # another page of the site: fine
]


@pytest.mark.parametrize("target, is_page", LINKED_PAGES, ids=[t for t, _ in LINKED_PAGES])
@pytest.mark.parametrize("when", ["before-start", "after-start"])
def test_a_page_linking_to_a_file_that_is_no_page_is_not_served(tmp_path, target, is_page, when):
    root = tmp_path / "site"
    shutil.copytree(FIXTURE, root)
    (root / "tasks.jsonl").write_text(f'{{"id": "t1", "question": "Q?", "answer": "{SECRET}"}}\n')
    (root / ".hidden").mkdir()
    for file in ("site/.hidden/answers.html", "site/notes.txt", "secret.html"):
        (tmp_path / file).write_text(f"<title>{SECRET}</title>")
    link = root / "wiki" / "tlink.html"
    if when == "before-start":
        link.symlink_to(tmp_path / target)
    else:  # a real page when the server starts, swapped for the link while it runs
        link.write_text("<title>Fine</title>")
    warned = when == "before-start" and not is_page and target.startswith("site/")  # outside: left out silently
    with pytest.warns(UserWarning, match="tlink.html") if warned else contextlib.nullcontext():
        running = serve(root)
    try:
        if when == "after-start":
            link.unlink()
            link.symlink_to(tmp_path / target)
        for path in ("/wiki/tlink", "/wiki/tlink.html"):
            status, _, body = get(running, path)
            assert (status == 200) == is_page and SECRET not in body, path
        assert get(running, "/wiki/Vell")[0] == 200
    finally:
        running.shutdown()


def test_an_asset_swapped_for_a_link_to_the_answers_is_not_served(tmp_path):
    root = tmp_path / "site"
    shutil.copytree(FIXTURE, root)
    (root / "tasks.jsonl").write_text(f'{{"id": "t1", "question": "Q?", "answer": "{SECRET}"}}\n')
    (root / "style.css").write_text("body { color: black }")
    running = serve(root)
    try:
        assert get(running, "/style.css")[0] == 200
        (root / "style.css").unlink()
        (root / "style.css").symlink_to(root / "tasks.jsonl")
        status, _, body = get(running, "/style.css")
        assert status == 404 and SECRET not in body
    finally:
        running.shutdown()
