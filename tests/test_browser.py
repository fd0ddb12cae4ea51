"""The page view: visible text, numbered links resolved to site paths, chunks, find."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.web.tokens import approx_tokens
from envs.web.browser import CHUNK_TOKENS, Link, html_text, html_title, html_to_view

FIXTURE = Path(__file__).parent / "fixtures" / "corpus_html"


def page(body: str, head: str = "<title>T</title>") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


def test_only_visible_text_is_shown():
    html = page(
        "<p>Shown.</p><script>alert('script')</script><style>p {color: red}</style>"
        "<noscript>noscript</noscript><p hidden>hidden attr</p><p style='display: none'>display none</p>"
        "<div style='visibility:hidden'>invisible</div><span aria-hidden='true'>aria</span>"
        "<form><input name='q' value='input value'><textarea>textarea</textarea>"
        "<select><option>option</option></select><button>button</button></form><!-- a comment -->",
        head="<title>Title</title><meta name='description' content='meta'>",
    )
    view = html_to_view(html, "/p")
    assert view.chunks == ("Shown.",)


def test_blocks_get_their_own_lines_and_whitespace_folds():
    html = page("<h1>Oskarde</h1><p>A   port\n  town.</p><ul><li>one</li><li>two <b>bold</b></li></ul>x<br>y")
    assert html_to_view(html, "/").chunks == ("Oskarde\nA port town.\none\ntwo bold\nx\ny",)


def test_table_cells_are_separated_on_one_line_per_row():
    html = page("<table><tr><th>Born</th><td>1887</td></tr><tr><th>City</th><td>Oskarde</td></tr></table>")
    assert html_to_view(html, "/").chunks == ("Born | 1887\nCity | Oskarde",)


def test_links_are_numbered_page_wide_and_resolved_against_the_page_url():
    html = page(
        '<p><a href="/">Home</a> and <a href="Oskarde">Oskarde</a></p>'
        '<p>See <a href="../category/Ports?page=2#top">ports</a>, <a href="https://example.org/x#y">elsewhere</a>,'
        ' <a href="#section">in-page</a>, <a href="javascript:void(0)">script</a>, <a>no href</a>,'
        ' <a href="/wiki/Empty"></a> and <a href="/wiki/Edra_Vane"><b>Edra</b> Vane</a>.</p>'
    )
    view = html_to_view(html, "/wiki/Vane")
    assert view.links == (
        Link(1, "Home", "/"),
        Link(2, "Oskarde", "/wiki/Oskarde"),
        Link(3, "ports", "/category/Ports?page=2"),
        Link(4, "elsewhere", "https://example.org/x"),
        Link(5, "Edra Vane", "/wiki/Edra_Vane"),
    )
    assert view.chunks[0].splitlines() == [
        "[1] Home and [2] Oskarde",
        "See [3] ports, [4] elsewhere, in-page, script, no href, and [5] Edra Vane.",
    ]


def test_links_on_an_absolute_page_url_stay_on_the_site():
    view = html_to_view(page('<a href="/wiki/X">x</a> <a href="http://other.org/">o</a>'), "http://127.0.0.1:8000/a")
    assert [link.url for link in view.links] == ["/wiki/X", "http://other.org/"]


def test_search_results_are_the_page_links_in_order():
    from envs.web.corpus import load_corpus

    site = load_corpus(FIXTURE)
    url = site.search_url("Tarvel Observatory")
    view = html_to_view(site.render(url), url)
    assert [link.url for link in view.links] == [r.path for r in site.search("Tarvel Observatory")]
    assert view.chunks[0].splitlines()[1] == "[1] Tarvel Observatory"


def test_title_falls_back_to_h1_then_url():
    assert html_to_view("<html><head><title> A  B </title></head><body><h1>C</h1></body></html>", "/u").title == "A B"
    assert html_to_view("<html><body><h1>C <i>D</i></h1></body></html>", "/u").title == "C D"
    assert html_to_view("<p>nothing</p>", "/u").title == "/u"
    assert html_title("<p>nothing</p>") == ""


def test_empty_and_odd_documents_give_one_empty_chunk_without_errors():
    for html in ("", "   ", "<!-- only a comment -->", "<script>x()</script>"):
        view = html_to_view(html, "/e")
        assert view.chunks == ("",)
        assert view.links == ()
    xml_declared = '<?xml version="1.0" encoding="utf-8"?><html><body><p>Café</p></body></html>'
    assert html_to_view(xml_declared, "/x").chunks == ("Café",)


def test_pre_keeps_its_lines():
    assert html_to_view(page("<pre>a  b\nc\n\nd</pre>"), "/").chunks == ("a b\nc\nd",)


def test_chunks_break_at_lines_and_stay_near_the_token_size():
    paragraphs = [f"<p>Paragraph {i}: " + "word " * 40 + "end.</p>" for i in range(60)]
    view = html_to_view(page("".join(paragraphs)), "/long")
    assert len(view.chunks) > 5
    for chunk in view.chunks:
        assert approx_tokens(chunk) <= CHUNK_TOKENS
        assert chunk.startswith("Paragraph ") and chunk.endswith("end.")  # whole lines only
    assert "\n".join(view.chunks).count("Paragraph") == 60
    fewer = html_to_view(page("".join(paragraphs)), "/long", chunk_tokens=1024)
    assert len(fewer.chunks) < len(view.chunks)


def test_a_line_longer_than_a_chunk_is_cut_at_sentences_then_words():
    sentences = " ".join(f"Sentence number {i} says something rather ordinary." for i in range(100))
    view = html_to_view(page(f"<p>{sentences}</p>"), "/s", chunk_tokens=64)
    assert all(approx_tokens(c) <= 64 for c in view.chunks)
    assert all(c.endswith("ordinary.") for c in view.chunks)
    assert " ".join(view.chunks) == sentences
    words = html_to_view(page("<p>" + "x" * 10 + " y" * 2000 + "</p>"), "/w", chunk_tokens=64)
    assert all(approx_tokens(c) <= 64 for c in words.chunks)


def test_find_returns_matching_passages_case_insensitively():
    long_line = "Edra Vane painted harbours. " * 10 + "She was born in Oskarde in 1887. " + "She died young. " * 10
    html = page(f"<p>Oskarde is a port.</p><p>{long_line}</p><p>oskarde again</p><p>Oskarde is a port.</p>")
    view = html_to_view(html, "/f")
    assert view.find("OSKARDE") == ["Oskarde is a port.", "She was born in Oskarde in 1887.", "oskarde again"]
    assert view.find("born  in") == ["She was born in Oskarde in 1887."]
    assert view.find("1887. She died") == [long_line.strip()]  # spans sentences: the whole line
    assert view.find("nowhere") == []
    assert view.find("   ") == []


def test_same_html_gives_the_same_view():
    html = (FIXTURE / "wiki" / "Mira_Esk.html").read_text()
    assert html_to_view(html, "/wiki/Mira_Esk") == html_to_view(html, "/wiki/Mira_Esk")


def test_html_text_has_no_link_numbers():
    html = (FIXTURE / "wiki" / "Mira_Esk.html").read_text()
    text = html_text(html)
    assert "In 1889 Esk founded the Tarvel Observatory" in text
    assert "[" not in text and "bornIn" not in text and "Vell" not in text


@pytest.mark.parametrize("tokens", [16, 256])
def test_text_survives_chunking(tokens):
    html = (FIXTURE / "wiki" / "Tarvel_Observatory.html").read_text()
    one = html_to_view(html, "/wiki/Tarvel_Observatory", chunk_tokens=10_000).chunks
    assert len(one) == 1
    assert "\n".join(html_to_view(html, "/wiki/Tarvel_Observatory", chunk_tokens=tokens).chunks).replace(
        "\n", " "
    ) == one[0].replace("\n", " ")
