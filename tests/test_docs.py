"""The README and the pages under docs/: a short README whose commands are CI's, links that lead somewhere, run
outputs in results/ (within its size budget) rather than in docs/, and docs/study.md's tables as the script
builds them from results/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import load_module

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "results" / "README.md", *(ROOT / "docs").glob("*.md")])
RESULTS_BUDGET_BYTES = 3_000_000
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text())) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_to_a_file_and_heading_that_exist(page):
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
        if anchor:
            assert dest.suffix == ".md" and anchor in anchors(dest), \
                f"{page.relative_to(ROOT)} links to {target}: no such heading in {dest.relative_to(ROOT)}"


def test_the_readme_is_short_and_shows_every_command_ci_runs():
    text = README.read_text()
    assert len(text.splitlines()) <= 400
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line and not line.startswith(("#", "set ", "cd "))]
    assert ci, ".ci/run runs no command"
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in quickstart.splitlines()]
    for command in ci:
        assert command in commands, f"the README's Quickstart does not show {command!r} as a command"


def test_every_section_a_user_needs_is_one_click_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    for page in (ROOT / "docs").glob("*.md"):
        assert page.resolve() in linked, f"the README links no {page.relative_to(ROOT)}"


def test_docs_hold_prose_and_the_images_it_shows():
    shown = {(page.parent / t.partition("#")[0]).resolve() for page in PAGES for t in links(page)}
    for file in (ROOT / "docs").rglob("*"):
        if file.is_dir():
            continue
        assert file.suffix in (".md", ".png"), f"{file.relative_to(ROOT)} is a run output: it belongs in results/"
        if file.suffix == ".png":
            assert file.resolve() in shown, f"no page shows {file.relative_to(ROOT)}"


def test_results_stay_within_their_budget_and_each_plot_and_folder_is_cited():
    files = [f for f in (ROOT / "results").rglob("*") if f.is_file()]
    assert sum(f.stat().st_size for f in files) < RESULTS_BUDGET_BYTES
    shown = {(page.parent / t.partition("#")[0]).resolve() for page in PAGES for t in links(page)}
    docs = "\n".join(page.read_text() for page in PAGES if page.parent.name == "docs" or page == README)
    for file in files:
        if file.suffix == ".png":
            assert file.resolve() in shown, f"no page shows {file.relative_to(ROOT)}"
    for folder in (ROOT / "results").iterdir():
        if folder.is_dir():
            assert f"results/{folder.name}/" in docs, f"no page under docs/ cites results/{folder.name}/"


def test_the_study_page_holds_the_tables_the_script_builds_from_results():
    script = load_module(ROOT / "scripts" / "study_readme.py", "study_readme")
    page = (ROOT / script.PAGE).read_text()
    built = page.split(script.START, 1)[1].split(script.END, 1)[0].strip()
    assert built == script.block()
