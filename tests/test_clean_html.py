"""A user corpus's HTML, cleaned (envs/web/clean.py): main text, title and links come through; boilerplate,
scripts and embedded content do not; hostile or broken markup never raises, runs, redirects or grows.

The pages are the messy fixture of mosaic_gym/bench/messy_pages.py, each with what a reader should get; they
are checked through the cleaner alone and through a corpus folder loaded as a site, as the env reads it.
"""

from __future__ import annotations

import codecs
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.backends import TextBackend
from envs.web.browser import html_text, html_title, html_to_view
from envs.web.builtin import BuiltinSite
from envs.web.clean import _HEAD, MAX_HTML_CHARS, clean_html, decode_html
from envs.web.corpus import load_corpus
from envs.web.pages import HOME_TITLE
from helpers import SITE_SIZE
from mosaic_gym.bench.messy_pages import PAGES, MessyPage


def assert_reads_as_expected(page: MessyPage, title: str, text: str, urls: set[str]) -> None:
    assert title == page.title
    assert [m for m in page.main if m not in text] == []
    assert [c for c in page.chrome if c in text] == []
    assert [u for u in page.links if u not in urls] == []
    assert [u for u in page.not_links if u in urls] == []


@pytest.mark.parametrize("page", PAGES, ids=[p.file for p in PAGES])
def test_a_messy_page_gives_its_main_text_title_and_links_and_no_boilerplate(page):
    cleaned = clean_html(decode_html(page.data))
    view = html_to_view(cleaned, page.path)
    assert_reads_as_expected(page, html_title(cleaned), html_text(cleaned), {link.url for link in view.links})
    # Nothing that could run, load or redirect is left in what is served.
    assert not re.search(r"<(script|style|meta|base|link|iframe|object|embed|svg|form|input|img)\b", cleaned[len(_HEAD):])
    assert not re.search(r"\son\w+\s*=|javascript:|vbscript:|data:", cleaned, re.IGNORECASE)
    # Cleaning what is clean changes nothing that is read.
    again = clean_html(cleaned)
    assert html_text(again) == html_text(cleaned) and html_title(again) == html_title(cleaned)


@pytest.fixture(scope="module")
def messy_corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("messy")
    for page in PAGES:
        (folder / page.file).parent.mkdir(parents=True, exist_ok=True)
        (folder / page.file).write_bytes(page.data)
    (folder / "tasks.jsonl").write_text('{"id": "t1", "question": "When was the Vell lighthouse lit?", '
                                        '"answer": "1867"}\n')
    return folder


@pytest.mark.parametrize("page", PAGES, ids=[p.file for p in PAGES])
def test_a_messy_corpus_is_served_and_indexed_cleaned(messy_corpus, page):
    site = load_corpus(messy_corpus)
    doc = site.page_document(page.path)
    view = TextBackend(site).view(page.path)
    chunks = "\n".join(view.chunks)
    # The index reads the text without link numbers; the agent's view has them, and the same links.
    assert_reads_as_expected(page, doc.title, doc.text, {link.url for link in view.links})
    assert view.title == page.title
    assert [c for c in page.chrome if c in chunks] == []
    # page_html stays the file as written (what `mosaic site build` copies); clean=False serves it so.
    raw = decode_html(page.data)
    assert site.page_html(page.path) == raw and site.render(page.path) == clean_html(raw)
    assert load_corpus(messy_corpus, clean=False).render(page.path) == raw


def test_a_corpus_page_with_only_markup_takes_its_file_name_as_title(tmp_path):
    (tmp_path / "Edra_Vane.html").write_text("<html><body><script>x()</script><nav>Home</nav></body></html>")
    doc = load_corpus(tmp_path).page_document("/Edra_Vane")
    assert (doc.title, doc.text) == ("Edra Vane", "")


def test_a_page_file_is_read_up_to_its_limit(tmp_path):
    (tmp_path / "big.html").write_text("<p>start " + "x " * (MAX_HTML_CHARS // 2) + "</p><p>PAST THE LIMIT</p>")
    site = load_corpus(tmp_path)
    assert len(site.page_html("/big")) == MAX_HTML_CHARS
    text = site.page_document("/big").text
    assert text.startswith("start x x") and "PAST THE LIMIT" not in text


def test_builtin_pages_lose_only_their_page_footer():
    site = BuiltinSite(seed=0, size=SITE_SIZE)
    for doc in list(site.documents())[:: 7]:
        html = site.page_html(doc.path)
        lines = html_text(html).split("\n")
        assert lines[-1] == HOME_TITLE  # the footer's link to the main page
        cleaned = clean_html(html)
        assert html_text(cleaned).split("\n") == lines[:-1] and html_title(cleaned) == html_title(html)
        kept = [link.url for link in html_to_view(cleaned, doc.path).links]
        assert kept == [link.url for link in html_to_view(html, doc.path).links][:-1]


@pytest.mark.parametrize("data, text", [
    (codecs.BOM_UTF8 + "<p>café</p>".encode(), "<p>café</p>"),
    (codecs.BOM_UTF16_LE + "<p>café</p>".encode("utf-16-le"), "<p>café</p>"),
    ('<meta charset="utf-8"><p>café</p>'.encode(), '<meta charset="utf-8"><p>café</p>'),
    ('<meta charset="windows-1252"><p>café – €</p>'.encode("cp1252"), '<meta charset="windows-1252"><p>café – €</p>'),
    ('<meta charset="iso-8859-1"><p>café – €</p>'.encode("cp1252"), '<meta charset="iso-8859-1"><p>café – €</p>'),
    ('<meta http-equiv="content-type" content="text/html; charset=KOI8-R"><p>Привет</p>'.encode("koi8-r"),
     '<meta http-equiv="content-type" content="text/html; charset=KOI8-R"><p>Привет</p>'),
    ("<p>café, no charset</p>".encode("cp1252"), "<p>café, no charset</p>"),
    ('<meta charset="no-such-charset"><p>café</p>'.encode("cp1252"), '<meta charset="no-such-charset"><p>café</p>'),
    ('<meta charset="utf-8"><p>caf\xe9</p>'.encode("latin-1"), '<meta charset="utf-8"><p>caf\ufffd</p>'),
])
def test_a_page_file_is_decoded_by_its_bom_utf8_its_charset_or_windows_1252(data, text):
    assert decode_html(data) == text


# --- arbitrary markup ------------------------------------------------------------------------------------------

MARK = "ZQXSECRET"
# No "<": a word ending in "<a" would open a tag that takes the next element's "<script" as its attribute.
_words = st.text(alphabet="abc >&;/='\"!-#\n\t\x00é€", max_size=12)
_attrs = st.lists(st.tuples(st.sampled_from(["href", "onclick", "style", "class", "id", "hidden", "role", "src"]),
                            st.sampled_from(["", "x", "nav", "main", "display:none", "javascript:" + MARK,
                                             "/a/b", "../c", "http://e.example/d", "data:text/html," + MARK])),
                  max_size=3)
_tags = st.sampled_from("p div span a b table tr td ul li h1 h2 nav header footer main article aside form section "
                        "br hr img embed source iframe object svg pre blockquote body html".split())
_hiding = st.sampled_from(["script", "style", "noscript", "template", "textarea", "select", "svg", "iframe"])


def _attr_text(attrs: list[tuple[str, str]]) -> str:
    return "".join(f' {name}="{value}"' for name, value in attrs)


@st.composite
def markup(draw, depth: int = 0) -> str:
    """Tags nested, unclosed and misnested, with text, entities, comments and attributes, and elements whose
    content is never to be shown (scripts and the like), each holding :data:`MARK`."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 5 if depth < 4 else 2))
        if kind == 0:
            parts.append(draw(_words))
        elif kind == 1:
            parts.append(draw(st.sampled_from(["&amp;", "&lt;", "&nbsp;", "&#8212;", "&#x0;", "&bogus;", "<!--",
                                               "-->", "</p>", "</div></td>", "<![CDATA[x]]>", "<?x ?>", "<!DOCTYPE x>"])))
        elif kind == 2:
            tag = draw(_hiding)
            parts.append(f"<{tag}{_attr_text(draw(_attrs))}>{MARK} {draw(_words).replace('<', '')}"
                         + (f"</{tag}>" if draw(st.booleans()) or tag == "textarea" else ""))
        else:
            tag = draw(_tags)
            inner = draw(markup(depth + 1))
            close = f"</{tag}>" if draw(st.booleans()) else ""
            parts.append(f"<{tag}{_attr_text(draw(_attrs))}>{inner}{close}")
    return "".join(parts)


@st.composite
def pages(draw) -> str:
    head = draw(st.sampled_from(["", "<title>T</title>", f'<meta http-equiv="refresh" content="0;url=/{MARK}">',
                                 f'<base href="http://{MARK}.example/">']))
    return f"<html><head>{head}</head>{draw(markup())}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pages())
def test_arbitrary_markup_never_raises_and_shows_no_script_content(html):
    cleaned = clean_html(html)
    # Never what a script, style, hidden form control, meta refresh or base, or a javascript:/data: link held.
    assert MARK not in cleaned
    assert not re.search(r"<(script|style|meta http|base|iframe|object|embed|svg|img|input)\b", cleaned[len(_HEAD):])
    assert not re.search(r"\son\w+\s*=|javascript:", cleaned, re.IGNORECASE)
    # Bounded: its text is never longer than the page's, the HTML at most escaping's growth.
    text = html_text(cleaned)
    assert len(text) <= len(html)
    assert len(cleaned) <= 5 * len(html) + 200
    # Deterministic, and cleaning it again changes nothing that is read.
    assert clean_html(html) == cleaned
    assert html_text(clean_html(cleaned)) == text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_cleans_without_raising(html):
    cleaned = clean_html(html)
    assert cleaned.startswith(_HEAD) and len(html_text(cleaned)) <= len(html)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_decode_without_raising(data):
    text = decode_html(data)
    assert isinstance(text, str) and len(text) <= len(data)
    clean_html(text)


def test_pathological_pages_stay_bounded():
    deep = "<div>" * 50_000 + "<p>deep</p>"
    wide = "<p>" + "<b>x</b>" * 50_000
    # libxml2 alone takes minutes on this one (its time grows with the square of a tag's attributes).
    attributes = "<p " + " ".join(f"a{i}='{i}'" for i in range(100_000)) + ">after many attributes</p>"
    laughs = ('<!DOCTYPE html [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
              '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><p>&c;&c;&c;&c;</p>')
    for html in (deep, wide, attributes, laughs):
        cleaned = clean_html(html)
        assert len(cleaned) <= 5 * len(html) + 200
    assert "after many attributes" in html_text(clean_html(attributes))
    assert "aaaaaaaaaa" not in clean_html(laughs)  # entities the page declares are not expanded


@pytest.mark.timeout(120)
def test_a_hostile_corpus_page_in_chromium_with_scripts_on_tries_nothing(messy_corpus):
    """Served cleaned, the hostile page holds nothing that could run, load or redirect: even with page scripts on,
    Chromium makes no request past the page itself, and shows the page's main text."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers the environments)
    from mosaic_gym.bench.messy_pages import HOSTILE

    env = gym.make("mosaic/WebQA-v0", site=str(messy_corpus), split="all", backend="playwright",
                   browser_javascript=True, max_steps=20, session_max_tokens=200_000)
    try:
        env.reset(seed=0)
        obs, _, _, _, info = env.step(f'open("{HOSTILE.path}")')
        assert info["action_error"] is None
        page = obs.rsplit("[Page: ", 1)[1]
        assert page.startswith(f"{HOSTILE.title} | {HOSTILE.path} |")
        assert "Visible paragraph one." in page and "After the huge attribute." in page
        assert [c for c in HOSTILE.chrome if c in page] == []
        assert env.unwrapped.backend.blocked_requests == []
    finally:
        env.close()
