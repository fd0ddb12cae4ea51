"""The search index of a corpus is saved beside it and memory-mapped after (issue 15): the same results as an
index built in memory, rebuilt when the corpus changes, and never a broken env when the saved files are stale,
corrupt, crafted or cannot be written."""

from __future__ import annotations

import json
import os
import random
import sys
import warnings
from pathlib import Path

import bm25s
import numpy as np
import pytest

from envs.web import bm25
from envs.web.corpus import INDEX_FOLDER, load_corpus
from envs.web.search import SearchIndex, terms

WORDS = [f"w{i}x" for i in range(200)] + ["lighthouse", "painter", "oskarde"]


def write_corpus(folder, docs: int = 60, seed: int = 0):
    """A corpus in the BrowseComp-Plus shape (docid, url, text; no title), small enough for a test."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "documents.jsonl", "w") as out:
        for i in range(docs):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
            out.write(json.dumps({"docid": str(i), "url": f"https://example.org/d/{i}", "text": text}) + "\n")
    return folder


QUERIES = ["lighthouse", "painter oskarde", "w1x w2x w3x", "W17X, lighthouse!", "nothing-here", "w199x w0x"]


def results(index: SearchIndex) -> list:
    index.cache_clear()
    return [index.search(q, k=20) for q in QUERIES]


def saved_folder(root):
    return root / INDEX_FOLDER / "documents"


def test_scores_are_bm25s_own_bit_for_bit():
    rng = random.Random(3)
    corpus = [[rng.choice(WORDS) for _ in range(rng.randint(0, 50))] for _ in range(300)]
    ours = bm25.build(corpus)
    ref = bm25s.BM25()
    ref.index(corpus, show_progress=False)
    index = bm25s.BM25()
    index.nonoccurrence_array = None
    index.scores = {"data": ours.data, "indices": ours.indices, "indptr": ours.indptr, "num_docs": ours.n_docs}
    for _ in range(100):
        query = sorted(set(rng.sample(WORDS, 4)))
        mine = [i for i in map(ours.vocab.lookup, query) if i is not None]
        assert np.array_equal(index.get_scores_from_ids(mine), ref.get_scores_from_ids(ref.get_tokens_ids(query)))


def test_a_saved_index_is_mapped_by_the_next_load_and_ranks_the_same(tmp_path):
    root = write_corpus(tmp_path / "c")
    first = load_corpus(root)
    built = results(first.index)
    assert (saved_folder(root) / "meta.json").is_file()
    again = load_corpus(root)  # as another process would: a new site, the saved files
    assert isinstance(again.index._bm25.scores["data"], np.memmap)
    in_memory = SearchIndex(list(again.documents()))
    assert results(again.index) == built == results(in_memory)
    assert any(built)


def test_a_changed_corpus_is_reindexed(tmp_path):
    root = write_corpus(tmp_path / "c")
    assert load_corpus(root).search("zebra") == []
    with open(root / "documents.jsonl", "a") as out:
        out.write(json.dumps({"docid": "new", "text": "A zebra crossed the road."}) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stale index is rebuilt quietly: the corpus changed, nothing is wrong
        site = load_corpus(root)
        assert [r.path for r in site.search("zebra")] == ["/doc/new"]
    assert results(site.index) == results(SearchIndex(list(site.documents())))


def _pickled(path):
    np.save(path, np.array([{"evil": 1}], dtype=object), allow_pickle=True)


def _json(text):
    return lambda path: path.write_text(text)


CORRUPTIONS = [
    ("data.npy", lambda p: p.write_bytes(b"not an array")),
    ("data.npy", lambda p: p.write_bytes(p.read_bytes()[:200])),  # truncated
    ("indices.npy", _pickled),  # an object array: loading it would unpickle
    ("indices.npy", lambda p: np.save(p, np.full(5, 10**6, dtype=np.int32))),  # documents that do not exist
    ("indptr.npy", lambda p: np.save(p, np.arange(5, dtype=np.int64)[::-1].copy())),
    ("vocab_offsets.npy", lambda p: np.save(p, np.zeros(3, dtype=np.float64))),
    ("meta.json", _json("[1, 2]")),
    ("meta.json", _json("{not json")),
    ("meta.json", None),  # n_docs replaced below
    ("vocab.npy", lambda p: p.unlink()),
]


@pytest.mark.parametrize("name, corrupt", CORRUPTIONS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRUPTIONS)])
def test_a_corrupt_or_crafted_index_warns_and_is_rebuilt(tmp_path, name, corrupt):
    root = write_corpus(tmp_path / "c")
    want = results(load_corpus(root).index)
    target = saved_folder(root) / name
    if corrupt is None:
        meta = json.loads(target.read_text())
        target.write_text(json.dumps({**meta, "n_docs": "many"}))
    else:
        corrupt(target)
    with pytest.warns(bm25.IndexWarning, match="unreadable"):
        site = load_corpus(root)
        assert results(site.index) == want
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebuilt and saved: the next load is clean
        assert results(load_corpus(root).index) == want


def test_an_unwritable_index_location_builds_in_memory(tmp_path):
    root = write_corpus(tmp_path / "c")
    (root / INDEX_FOLDER).write_text("a file where the index folder would go")
    with pytest.warns(bm25.IndexWarning, match="cannot write the search index"):
        site = load_corpus(root)
        got = results(site.index)
    assert got == results(SearchIndex(list(site.documents())))


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root writes through permissions")
def test_a_read_only_corpus_folder_builds_in_memory(tmp_path):
    root = write_corpus(tmp_path / "c")
    root.chmod(0o555)
    try:
        with pytest.warns(bm25.IndexWarning, match="cannot write the search index"):
            assert load_corpus(root).search("lighthouse")
    finally:
        root.chmod(0o755)


def test_envs_in_one_process_share_one_index(tmp_path):
    import gymnasium as gym

    import envs  # noqa: F401  (registers the ids)

    root = write_corpus(tmp_path / "c")
    (root / "tasks.jsonl").write_text(json.dumps({"id": "t1", "question": "Which?", "answer": "lighthouse"}) + "\n")
    a = gym.make("mosaic/WebQA-v0", site=str(root), split="all")
    b = gym.make("mosaic/WebQA-v0", site=str(root), split="all")
    try:
        assert a.unwrapped.site.index is b.unwrapped.site.index
    finally:
        a.close()
        b.close()


def test_a_large_corpus_shows_progress_unless_tqdm_is_disabled(monkeypatch, capsys):
    corpus = [terms("a lighthouse keeper"), terms("a painter")] * 5
    # `mosaic eval --no-progress` run in this process (tests/test_cli_errors.py) sets it for the whole process.
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(bm25, "PROGRESS_MIN_DOCS", 4)
    bm25.build(iter(corpus), total=len(corpus))
    assert "indexing" in capsys.readouterr().err
    monkeypatch.setenv("TQDM_DISABLE", "1")
    bm25.build(iter(corpus), total=len(corpus))
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("TQDM_DISABLE")
    monkeypatch.setattr(bm25, "PROGRESS_MIN_DOCS", 100)
    bm25.build(iter(corpus), total=len(corpus))
    assert capsys.readouterr().err == ""


def test_vocabulary_finds_every_term_and_nothing_else():
    words = sorted({"b", "a", "ünïcode", "zz", "ab", "日本"})
    vocab = bm25.Vocabulary.of(words)
    assert [vocab.lookup(w) for w in words] == list(range(len(words)))
    assert [vocab.lookup(w) for w in ("", "aa", "zzz", "c")] == [None] * 4


def test_processes_started_together_agree_and_leave_one_clean_index(tmp_path):
    """Three processes load a corpus with no index at once: one builds under the lock, the others map its
    index; all rank alike, and none warns (no half-written index is ever read)."""
    import subprocess

    root = write_corpus(tmp_path / "c", docs=200)
    script = ("import json, sys, warnings; warnings.simplefilter('error'); from envs.web.corpus import load_corpus; "
              "s = load_corpus(sys.argv[1]); "
              f"print(json.dumps([[r.path for r in s.search(q, k=20)] for q in {QUERIES!r}]))")
    repo = str(Path(__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    want = [[r.path for r in hits] for hits in results(SearchIndex(list(load_corpus(root).documents())))]
    assert [json.loads(out) for out, _ in outs] == [want] * 3
    assert [p.name for p in (root / INDEX_FOLDER).iterdir() if not p.name.endswith(".lock")] == ["documents"]
