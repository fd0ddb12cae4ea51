"""BM25 search: ranking, title weight, ties, snippets, caching, junk queries."""

from __future__ import annotations

import threading

import pytest

from envs.web import Document, SearchResult
from envs.web.search import SNIPPET_WORDS, SearchIndex, snippet, terms

DOCS = [
    Document("/wiki/Edra_Vane", "Edra Vane", "Edra Vane was a painter. She was born in Oskarde in 1887."),
    Document("/wiki/Oskarde", "Oskarde", "Oskarde is a port city on the west coast. It was founded in 1120."),
    Document("/wiki/Tolis_Marr", "Tolis Marr", "Tolis Marr was a sculptor who lived in Oskarde and knew Edra Vane."),
    Document("/wiki/Varnholt", "Varnholt Institute", "The Varnholt Institute is a school of painting."),
]


@pytest.fixture(scope="module")
def index():
    return SearchIndex(DOCS)


def test_the_page_about_a_name_ranks_first(index):
    assert [r.path for r in index.search("Oskarde")][:1] == ["/wiki/Oskarde"]
    assert [r.path for r in index.search("Edra Vane")][:1] == ["/wiki/Edra_Vane"]


def test_title_counts_more_than_a_mention():
    docs = [Document("/a", "Other", "Oskarde Oskarde is mentioned here."), Document("/b", "Oskarde", "A town.")]
    assert [r.path for r in SearchIndex(docs).search("Oskarde")] == ["/b", "/a"]


def test_results_carry_title_path_and_the_best_sentence(index):
    result = index.search("painter born 1887")[0]
    assert result == SearchResult("Edra Vane", "/wiki/Edra_Vane", "She was born in Oskarde in 1887.")


def test_k_limits_results_and_only_matching_pages_come_back(index):
    assert len(index.search("Oskarde", k=2)) == 2
    assert {r.path for r in index.search("sculptor")} == {"/wiki/Tolis_Marr"}


def test_ties_keep_document_order():
    docs = [Document(f"/d{i}", f"Page {i}", "identical text about lighthouses") for i in range(30)]
    assert [r.path for r in SearchIndex(docs).search("lighthouses", k=30)] == [f"/d{i}" for i in range(30)]


@pytest.mark.parametrize("query", ["", "   ", "the of and", "!!! ???", "zzzqqq", "a", "\x00\ufffd", "%s {} [0]"])
def test_junk_queries_return_nothing(index, query):
    assert index.search(query) == []


def test_an_empty_index_finds_nothing():
    assert SearchIndex([]).search("anything") == []
    assert SearchIndex([Document("/a", "", ""), Document("/b", "!", "?")]).search("anything") == []


def test_case_punctuation_and_order_do_not_matter(index):
    assert index.search("vane, EDRA!") == index.search("Edra Vane")


def test_results_are_cached_and_callers_cannot_corrupt_the_cache(index):
    first = index.search("Oskarde port")
    first.clear()
    again = index.search("Oskarde port")
    assert again and again == SearchIndex(DOCS).search("Oskarde port")
    assert index.search("Oskarde port") is not again  # a fresh list each time


def test_identical_indexes_rank_identically():
    queries = ["Oskarde", "painter", "Edra Vane Oskarde", "school of painting"]
    a, b = SearchIndex(DOCS), SearchIndex(list(DOCS))
    assert [a.search(q) for q in queries] == [b.search(q) for q in queries]


def test_concurrent_searches_agree(index):
    expected = {q: index.search(q) for q in ("Oskarde", "Vane", "painting")}
    failures = []

    def worker() -> None:
        for _ in range(50):
            for q, want in expected.items():
                if index.search(q) != want:
                    failures.append(q)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_terms_drop_stopwords_and_single_letters():
    assert terms("Who was the teacher of A. Vane?") == ["who", "teacher", "vane"]


def test_snippet_prefers_query_terms_beyond_the_title_and_cuts_long_sentences():
    text = "Oskarde\nOskarde is a port. Its population was 4,300 in 1900."
    assert snippet(text, {"oskarde", "population"}, "Oskarde") == "Its population was 4,300 in 1900."
    long = " ".join(f"w{i}" for i in range(100)) + " needle " + " ".join(f"v{i}" for i in range(100))
    cut = snippet(long, {"needle"})
    assert "needle" in cut and cut.startswith("… ") and cut.endswith(" …")
    assert len(cut.split()) == SNIPPET_WORDS + 2
    assert snippet("No match here at all today. Second one.", {"zzz"}) == "No match here at all today."
