"""The builtin site: determinism, a consistent world, pages the browser reads as written, and tasks whose gold
paths replay through the real search and browser without the first search giving the answer away."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

from envs.web.tokens import approx_tokens
from envs.web import Task, normalize_answer
from envs.web.browser import html_text, html_title, html_to_view
from envs.web.builtin import BuiltinSite
from envs.web.pages import HOME_PATH, filler_words
from envs.web.search import terms
from envs.web.tasks import FAMILIES, HOPS, LONG_EVIDENCE_TOKENS
from envs.web.world import (
    EVENT,
    EVENT_KINDS,
    OCCUPATIONS,
    ORGANISATION,
    ORGANISATION_KINDS,
    PERSON,
    WORK,
    WORK_ADJECTIVES,
    WORK_NOUNS,
    World,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FINGERPRINT = """
import hashlib
from envs.web.builtin import BuiltinSite
site = BuiltinSite(seed={seed}, size={size})
h = hashlib.sha256()
for doc in site.documents():
    h.update(repr(doc).encode())
    h.update(site.page_html(doc.path).encode())
h.update(repr(site.tasks).encode())
print(h.hexdigest())
"""


def fingerprints(seed: int, hash_seeds: tuple[str, ...], size: int = 120) -> list[str]:
    """The hash of every page (text and HTML) and every task, computed in fresh processes (run side by side)
    whose ``str`` hashes are salted with each of ``hash_seeds``."""
    code = [sys.executable, "-c", FINGERPRINT.format(seed=seed, size=size)]
    runs = [subprocess.Popen(code, cwd=REPO, env={**os.environ, "PYTHONHASHSEED": h}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for h in hash_seeds]
    outs = [run.communicate() for run in runs]
    assert all(run.returncode == 0 for run in runs), [err for _, err in outs]
    return [out.strip() for out, _ in outs]


def every_task(site: BuiltinSite) -> list[Task]:
    return [t for task in site.tasks for t in (task, *task.subtasks)]


def replay(site: BuiltinSite, task: Task) -> list[str]:
    """Follow ``task``'s gold path through the real search and browser, checking each step; the chunks shown."""
    shown: list[str] = []
    view, chunk, results = None, 0, None
    for step in task.gold_path:
        if step.tool == "search":
            url = site.search_url(step.arg)
            view, chunk = html_to_view(site.render(url), url), 0
            results = [r.path for r in site.search(step.arg)]
        elif step.tool == "open":
            if results is not None:
                assert step.arg in results, f"{task.id}: {step.arg} is not in the top 10 for {results}"
                results = None
            html = site.render(step.arg)
            assert html is not None, f"{task.id}: dead link {step.arg}"
            view, chunk = html_to_view(html, step.arg), 0
        else:
            assert step.tool == "scroll" and step.arg == "down", step
            # Scroll until the fact shows (not at all when the screen shows it already).
            while step.expect not in view.chunks[chunk]:
                chunk += 1
                assert chunk < len(view.chunks), f"{task.id}: {step.expect!r} never shows on {view.url}"
                shown.append(view.chunks[chunk])
            continue
        shown.append(view.chunks[chunk])
        assert step.expect in view.chunks[chunk], f"{task.id}: {step.expect!r} not on screen after {step}"
    return shown


# --- determinism ------------------------------------------------------------------------------------------
def test_same_seed_gives_byte_identical_pages_and_tasks_across_processes():
    first, second = fingerprints(seed=5, hash_seeds=("1", "2"))
    assert first and first == second


def test_different_seeds_give_different_sites():
    a, b = BuiltinSite(seed=5, size=120), BuiltinSite(seed=6, size=120)
    assert {e.name for e in a.world.entities}.isdisjoint(e.name for e in b.world.entities)
    assert {t.question for t in a.tasks}.isdisjoint(t.question for t in b.tasks)


def test_a_pickled_site_comes_back_whole(small_site):
    copy = pickle.loads(pickle.dumps(small_site))
    assert copy.tasks == small_site.tasks and copy.page_html("/") == small_site.page_html("/")


def test_too_small_a_world_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="size >= 60"):
        BuiltinSite(seed=0, size=20)


# --- the world --------------------------------------------------------------------------------------------
def test_world_facts_are_consistent():
    world = World(seed=3, size=400)
    target = world.target
    for p in world.of_kind(PERSON):
        born, died = p.years["born"], p.years["died"]
        assert born + 30 <= died
        assert target(p, "birthplace").years["founded"] < born
        if "teacher" in p.links:
            teacher = target(p, "teacher")
            assert 15 <= born - teacher.years["born"] <= 45 and teacher.years["died"] >= born + 15
        if "employer" in p.links:
            assert target(p, "employer").years["founded"] <= min(born + 30, died - 5)
    for o in world.of_kind(ORGANISATION):
        founder = target(o, "founder")
        assert founder.years["born"] + 25 <= o.years["founded"] <= founder.years["died"]
        assert target(o, "city").years["founded"] < o.years["founded"]
    for w in world.of_kind(WORK):
        creator = target(w, "creator")
        assert creator.years["born"] + 18 <= w.years["year"] <= creator.years["died"]
    for v in world.of_kind(EVENT):
        assert target(v, "venue").years["founded"] < v.years["year"]
        for p in (world.entities[i] for i in v.participants):
            assert p.years["born"] + 18 <= v.years["year"] <= p.years["died"]


def test_names_collide_on_purpose_and_get_a_disambiguation_page(small_site):
    assert small_site.world.collisions
    for ids in small_site.world.collisions:
        a, b = (small_site.world.entities[i] for i in ids)
        assert a.name == b.name and a.title != b.title
        page = small_site.page_html("/disambiguation/" + a.name.replace(" ", "_"))
        assert a.path in page and b.path in page
        assert "/disambiguation/" in small_site.page_html(a.path)


def test_every_other_name_token_belongs_to_one_entity(small_site):
    owners: dict[str, set[str]] = {}
    invented = {t.casefold() for t in WORK_NOUNS + WORK_ADJECTIVES}
    invented |= {w for kind in ORGANISATION_KINDS.values() for p in kind[1] for w in terms(p.format(w=""))}
    invented |= {w for kind in EVENT_KINDS.values() for p in kind[1] for w in terms(p.format(w=""))}
    for e in small_site.world.entities:
        for word in set(terms(e.name)) - invented:
            owners.setdefault(word, set()).add(e.name)
    assert all(len(names) == 1 for names in owners.values())


# --- pages ------------------------------------------------------------------------------------------------
def test_documents_are_the_pages_as_the_browser_reads_them(small_site):
    paths = [d.path for d in small_site.documents()]
    assert len(paths) == len(set(paths)) == len(small_site.pages.paths)
    assert HOME_PATH in paths and any(p.startswith("/category/") for p in paths)
    assert any(p.startswith("/disambiguation/") for p in paths)
    for doc in small_site.documents():
        html = small_site.page_html(doc.path)
        assert html_text(html) == doc.text and html_title(html) == doc.title
    assert small_site.page_html("/wiki/No_such_page") is None


def test_links_lead_to_pages(small_site):
    for path in small_site.pages.paths[:80]:
        for link in html_to_view(small_site.page_html(path), path).links:
            assert small_site.render(link.url) is not None, (path, link)


def test_long_articles_hide_their_facts_several_screens_down(small_site):
    long_people = [e for e in small_site.world.of_kind(PERSON) if e.long]
    assert long_people
    for e in long_people:
        chunks = html_to_view(small_site.page_html(e.path), e.path).chunks
        depth = next(i for i, c in enumerate(chunks) if str(e.years["born"]) in c)
        assert depth >= 3, (e.title, depth)


def test_pages_name_other_entities_only_where_the_mention_index_says(small_site):
    """The snippet-leak check relies on it: a page names an entity only in its own article, a link, or (for
    places) a category title like "Museums in Oskarde"."""
    by_name: dict[str, list[int]] = {}
    for e in small_site.world.entities:
        by_name.setdefault(e.name, []).append(e.id)
    categories = small_site.pages.categories
    for doc in small_site.documents():
        for value, kind in small_site.mentions(doc.text):
            if kind == "year":
                continue
            indexed = any(doc.path in small_site.pages.mentioned_on[i] for i in by_name[value])
            in_category_title = doc.path == HOME_PATH or (
                doc.path in categories and value in categories[doc.path].title)
            assert indexed or in_category_title or value in doc.title, (doc.path, value)


def test_filler_uses_no_word_a_search_query_can_hold(small_site):
    query_words = {w for e in small_site.world.entities for w in terms(e.name)}
    query_words |= {w for o in OCCUPATIONS for w in terms(o.plural)}
    assert not filler_words() & query_words


# --- tasks ------------------------------------------------------------------------------------------------
def test_every_family_exists_in_both_splits_at_every_hops(small_site):
    cells = {(t.family, t.split, t.hops) for t in small_site.tasks}
    for family in FAMILIES:
        for split in ("train", "test"):
            assert any((family, split, h) in cells for h in HOPS[family]), (family, split)
    assert {t.hops for t in small_site.tasks if t.family == "chain"} == set(HOPS["chain"])
    assert all(t.hops in HOPS[t.family] for t in small_site.tasks)


def test_tasks_are_well_formed(small_site):
    tasks = small_site.tasks
    assert len({t.id for t in tasks}) == len(tasks) and len({t.question for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.split in ("train", "test") and t.gold_path and t.search_queries
        assert len(t.answer.split()) <= 6 and normalize_answer(t.answer)
        assert t.answer_kind in ("person", "organisation", "place", "work", "event", "year")
        if t.family in ("chain", "long", "compare"):
            assert all(q in t.question for q in t.search_queries)
        if t.answer_kind == "person":
            assert t.answer.split()[-1] in t.aliases
    for t in (t for t in tasks if t.family == "compare"):
        assert len(t.subtasks) == 3 and t.answer in [sub.search_queries[0] for sub in t.subtasks]
        assert t.gold_path == tuple(step for sub in t.subtasks for step in sub.gold_path)
        values = [int(sub.answer) for sub in t.subtasks]
        winner = values.index(max(values) if "latest" in t.question else min(values))
        assert t.subtasks[winner].search_queries[0] == t.answer
        assert all(sub.split == t.split and sub.answer_kind == "year" for sub in t.subtasks)


def test_gold_paths_replay_through_search_and_browser(small_site):
    for task in every_task(small_site):
        shown = replay(small_site, task)
        seen = normalize_answer(" ".join(shown))
        assert normalize_answer(task.answer) in seen, task.id
        # Answer candidates come from mentions of what was shown: the answer must be one, of its kind.
        mentioned = {m for chunk in shown for m in small_site.mentions(chunk)}
        assert (task.answer, task.answer_kind) in mentioned, task.id
        if task.family == "long":
            read = sum(approx_tokens(chunk) for chunk in shown)
            assert read > LONG_EVIDENCE_TOKENS, (task.id, read)


def test_first_search_does_not_show_the_answer(small_site):
    for task in every_task(small_site):
        if task.subtasks:
            continue  # the compare question names its answer among the choices; its sub-questions are checked
        results = small_site.search(task.search_queries[0])
        shown = " ".join(f"{r.title} {r.path.replace('_', ' ')} {r.snippet}" for r in results)
        assert f" {normalize_answer(task.answer)} " not in f" {normalize_answer(shown)} ", task.id


def test_search_ranks_the_page_a_question_names_first_or_nearly(small_site):
    for task in every_task(small_site):
        steps = task.gold_path
        for search, opened in zip(steps, steps[1:]):
            if search.tool == "search":
                paths = [r.path for r in small_site.search(search.arg)]
                assert opened.arg in paths[:3], (task.id, search.arg, paths)


def test_splits_ask_about_disjoint_entities(small_site):
    asked = {split: set() for split in ("train", "test")}
    named = {split: set() for split in ("train", "test")}
    for t in small_site.tasks:
        asked[t.split].update(small_site.answer_entities(t.id))
        if t.answer_kind != "year":
            named[t.split].add(t.answer)
    assert asked["train"] and asked["test"] and not asked["train"] & asked["test"]
    assert not named["train"] & named["test"]
    with pytest.raises(KeyError, match="no task"):
        small_site.answer_entities("no-such-task")


def test_tasks_scale_with_the_world():
    assert len(BuiltinSite(seed=0, size=600).tasks) > 2 * len(BuiltinSite(seed=0, size=120).tasks)


# --- mentions ---------------------------------------------------------------------------------------------
def test_mentions_finds_names_and_years_in_order_of_first_appearance(small_site):
    world = small_site.world
    person, org = world.of_kind(PERSON)[0], world.of_kind(ORGANISATION)[0]
    work, city = world.of_kind(WORK)[0], world.target(world.of_kind(PERSON)[0], "birthplace")
    text = (f"In 1887, {person.name} visited the {org.name}, saw {work.name} and went home to {city.name}; "
            f"{person.name} died in 12345 or 1950.")
    assert small_site.mentions(text) == (
        ("1887", "year"), (person.name, "person"), (org.name, "organisation"), (work.name, "work"),
        (city.name, "place"), ("1950", "year"))
    assert small_site.mentions("Nothing here at all.") == ()
