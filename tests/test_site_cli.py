"""``mosaic site build`` writes a folder that loads back as the same site; ``serve`` serves it."""

from __future__ import annotations

import dataclasses
import urllib.request
from pathlib import Path

import pytest

from mosaic_gym.cli import main
from envs.web import Site, load_site
from envs.web.corpus import load_corpus
from envs.web.server import SiteServer

FIXTURES = Path(__file__).parent / "fixtures"


def assert_same_site(built: Site, original: Site) -> None:
    paths = [d.path for d in original.documents()]
    assert {d.path for d in built.documents()} >= set(paths)
    for path in paths:
        assert built.page_html(path) == original.page_html(path), path
    # The corpus format keeps what any corpus task has, its search queries and the pages its gold path opens (a
    # corpus task's gold path exactly); sub-questions and the builtin's steps within a page are its oracle's.
    assert len(built.tasks) == len(original.tasks)
    for b, o in zip(built.tasks, original.tasks):
        assert b == dataclasses.replace(o, gold_path=b.gold_path, subtasks=())
        assert {s.arg for s in b.gold_path if s.tool == "open"} == {s.arg for s in o.gold_path if s.tool == "open"}
        assert b.gold_path == o.gold_path or o.family != "corpus"


def test_builtin_site_round_trips(tmp_path, capsys):
    out = tmp_path / "site"
    assert main(["site", "build", "--out", str(out), "--site-seed", "3", "--site-size", "120"]) == 0
    assert "tasks to" in capsys.readouterr().out
    assert (out / "index.html").is_file() and (out / "tasks.jsonl").is_file()
    original = load_site("builtin", site_seed=3, site_size=120)
    built = load_corpus(out)
    assert_same_site(built, original)
    assert built.page_html("/") == original.page_html("/")
    assert built.tasks_for("test") and built.tasks_for("train")


@pytest.mark.parametrize("corpus", ["corpus_html", "corpus_jsonl"])
def test_a_corpus_round_trips(tmp_path, corpus):
    out = tmp_path / "site"
    assert main(["site", "build", "--out", str(out), "--site", str(FIXTURES / corpus)]) == 0
    assert_same_site(load_corpus(out), load_corpus(FIXTURES / corpus))


def test_build_refuses_a_folder_in_use_and_a_missing_corpus(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["site", "build", "--out", str(tmp_path), "--site", str(FIXTURES / "corpus_html")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["site", "build", "--out", str(tmp_path), "--site", str(FIXTURES / "corpus_html"), "--force"]) == 0
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert main(["site", "build", "--out", str(tmp_path / "new"), "--site", str(tmp_path / "missing")]) == 2
    assert "no corpus at" in capsys.readouterr().err


def test_help_explains_both_subcommands(capsys):
    for argv in (["site", "--help"], ["site", "build", "--help"], ["site", "serve", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
    text = capsys.readouterr().out
    assert "--out DIR" in text and "--site-size N" in text and "127.0.0.1" in text and "--port N" in text


def test_serve_prints_its_url_serves_and_stops_on_ctrl_c(monkeypatch, capsys):
    statuses = []

    def wait(server: SiteServer) -> None:
        with urllib.request.urlopen(server.url + "/wiki/Vell", timeout=10) as response:
            statuses.append(response.status)
        raise KeyboardInterrupt  # what Ctrl-C does to the main thread waiting here

    monkeypatch.setattr(SiteServer, "wait", wait)
    assert main(["site", "serve", str(FIXTURES / "corpus_html"), "--port", "0"]) == 0
    out = capsys.readouterr().out
    assert statuses == [200]
    assert "at http://127.0.0.1:" in out and out.rstrip().endswith("stopped")
