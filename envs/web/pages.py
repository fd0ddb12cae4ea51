"""The builtin site's pages: encyclopedia articles, categories, disambiguation pages and the main page.

A page is a list of blocks (title, hatnote, paragraphs, infobox rows, list items). The same blocks give the
HTML the browser shows and the plain text the search index reads, so both say the same thing line for line.
Pages name another entity only in a link to it (or, for a city, in a category title such as "Museums in
Oskarde"), and filler (prose that pads articles out) holds no name, year or other value: the task generator's
check that a search never shows an answer (:class:`envs.web.tasks.SnippetCheck`) relies on both.

Entity articles come in two lengths. A short article states every fact in an infobox near the top and again
in prose. A long article has a bare infobox and states each fact once, in prose, behind several screens of
filler: reading to a fact takes scrolling.

Every phrase is drawn with a random generator seeded by the page's path, so a page is the same however many
other pages were built before it.

Example:
    >>> world = World(seed=0, size=120)
    >>> page = Pages(world).build(world.entities[0].path)
    >>> page.text().splitlines()[0] == world.entities[0].title
    True
"""

from __future__ import annotations

import html as html_lib
import random
import re
from dataclasses import dataclass
from typing import Union

from .world import (
    EVENT,
    EVENT_KINDS,
    OCCUPATION,
    ORGANISATION,
    ORGANISATION_KINDS,
    PERSON,
    PLACE,
    WORK,
    WORK_KINDS,
    Entity,
    World,
)

HOME_PATH = "/"
HOME_TITLE = "Main page"

# A segment of a block: plain text, or a link as (text, path).
Segment = Union[str, tuple[str, str]]


@dataclass(frozen=True)
class Block:
    """A line of a page.

    Attributes:
        tag: ``"h1"``, ``"h2"``, ``"p"``, ``"note"`` (hatnote), ``"row"`` (infobox row) or ``"li"``.
        parts: the text, with links as ``(text, path)``.
        label: an infobox row's header cell.
    """

    tag: str
    parts: tuple[Segment, ...]
    label: str = ""

    def text(self) -> str:
        body = " ".join("".join(p if isinstance(p, str) else p[0] for p in self.parts).split())
        return f"{self.label} | {body}" if self.tag == "row" else body


@dataclass(frozen=True)
class Page:
    """A page: its path, title and blocks."""

    path: str
    title: str
    blocks: tuple[Block, ...]

    def text(self) -> str:
        """The visible text, one line per block, as the browser reads the HTML (without link numbers)."""
        return "\n".join([b.text() for b in self.blocks] + [HOME_TITLE])

    def html(self) -> str:
        """The page as an HTML document: infobox rows make a table, list items a list."""
        out = [
            '<!DOCTYPE html><html><head><meta charset="utf-8">',
            f"<title>{_esc(self.title)}</title></head><body>",
        ]
        open_group = ""
        for block in self.blocks:
            group = {"row": "table", "li": "ul"}.get(block.tag, "")
            if group != open_group:
                if open_group:
                    out.append(f"</{open_group}>")
                if group:
                    out.append('<table class="infobox">' if group == "table" else "<ul>")
                open_group = group
            body = "".join(_esc(p) if isinstance(p, str) else _link(*p) for p in block.parts)
            if block.tag == "row":
                out.append(f"<tr><th>{_esc(block.label)}</th><td>{body}</td></tr>")
            elif block.tag == "note":
                out.append(f'<p class="hatnote">{body}</p>')
            else:
                out.append(f"<{block.tag}>{body}</{block.tag}>")
        if open_group:
            out.append(f"</{open_group}>")
        out.append(f'<footer><a href="{HOME_PATH}">{HOME_TITLE}</a></footer></body></html>')
        return "".join(out)


def _esc(text: str) -> str:
    return html_lib.escape(text, quote=False)


def _link(text: str, path: str) -> str:
    return f'<a href="{html_lib.escape(path)}">{_esc(text)}</a>'


# --- categories and disambiguation pages ------------------------------------------------------------------
@dataclass(frozen=True)
class Category:
    """A list page: its title, what its rows show (``"born"``, ``"occupation"`` or ``""``), and its members."""

    title: str
    rows: str
    members: tuple[int, ...]


def category_path(title: str) -> str:
    """The path of the category page titled ``title``.

    >>> category_path("Museums in Oskarde")
    '/category/Museums_in_Oskarde'
    """
    return "/category/" + title.replace(" ", "_")


def disambiguation_path(name: str) -> str:
    """The path of the disambiguation page for people named ``name``.

    >>> disambiguation_path("Edra Vane")
    '/disambiguation/Edra_Vane'
    """
    return "/disambiguation/" + name.replace(" ", "_")


def birth_category(person: Entity) -> str:
    return f"People born in {person.years['born']}"


def organisation_category(world: World, org: Entity) -> str:
    city = world.linked(org, "city")
    return f"{ORGANISATION_KINDS[org.category][0]} in {city.name}"


def region_category(region: str) -> str:
    return f"Cities in {region}"


COASTAL_CATEGORY = "Coastal cities"


def categories(world: World) -> dict[str, Category]:
    """Every category page of ``world`` by path, in a fixed order (by title)."""
    groups: dict[str, tuple[str, list[Entity]]] = {}

    def add(title: str, rows: str, entity: Entity) -> None:
        groups.setdefault(title, (rows, []))[1].append(entity)

    for e in world.entities:
        if e.kind == PERSON:
            add(OCCUPATION[e.category].plural, "born", e)
            add(birth_category(e), "occupation", e)
        elif e.kind == ORGANISATION:
            add(organisation_category(world, e), "", e)
        elif e.kind == PLACE:
            add(region_category(e.region), "", e)
            if e.coastal:
                add(COASTAL_CATEGORY, "", e)
        elif e.kind == WORK:
            add(WORK_KINDS[e.category][0], "", e)
        else:
            add(EVENT_KINDS[e.category][0], "", e)
    out = {}
    for title in sorted(groups):
        rows, members = groups[title]
        if rows == "born":
            members = sorted(members, key=lambda m: (m.years["born"], m.title))
        else:
            members = sorted(members, key=lambda m: m.title)
        out[category_path(title)] = Category(title, rows, tuple(m.id for m in members))
    return out


def _category_page(world: World, path: str, category: Category) -> Page:
    entities = [world.entities[i] for i in category.members]
    first = entities[0]
    if category.rows == "born":
        intro = (f"This category lists the {len(entities)} {category.title.lower()} described in this encyclopedia, "
                 "in order of birth.")
    elif category.rows == "occupation":
        intro = f"This category lists the {len(entities)} people born in {first.years['born']} who have articles here."
    else:
        intro = f"This category lists {len(entities)} articles, in alphabetical order."
    blocks = [Block("h1", (category.title,)), Block("p", (intro,))]
    for e in entities:
        if category.rows == "born":
            tail = f", born {e.years['born']}"
        elif category.rows == "occupation":
            tail = f", {e.category}"
        else:
            tail = ""
        blocks.append(Block("li", ((e.title, e.path), tail)))
    return Page(path, category.title, tuple(blocks))


def _disambiguation_page(world: World, path: str, ids: tuple[int, ...]) -> Page:
    people = [world.entities[i] for i in ids]
    name = people[0].name
    title = _disambiguation_title(name)
    blocks = [Block("h1", (title,)), Block("p", (f"{name} may refer to:",))]
    for p in people:
        blocks.append(Block("li", ((p.title, p.path), f", a {p.category} born in {p.years['born']}")))
    return Page(path, title, tuple(blocks))


def _disambiguation_title(name: str) -> str:
    return f"{name} (disambiguation)"


def _home_page(cats: dict[str, Category]) -> Page:
    blocks = [
        Block("h1", (HOME_TITLE,)),
        Block("p", ("This encyclopedia describes people, organisations, cities, works and events. Search it, or "
                    "start from one of the lists below.",)),
    ]
    sections = (
        ("People by occupation", lambda c: c.rows == "born"),
        ("People by year of birth", lambda c: c.rows == "occupation"),
        ("Other lists", lambda c: c.rows == ""),
    )
    for heading, wanted in sections:
        blocks.append(Block("h2", (heading,)))
        blocks += [Block("li", ((c.title, p),)) for p, c in cats.items() if wanted(c)]
    return Page(HOME_PATH, HOME_TITLE, tuple(blocks))


# --- entity articles ----------------------------------------------------------------------------------------
class _Writer:
    """Builds one article. Fact wording and filler draw from two generators seeded by the path, so that the
    amount of filler (long or short article) never changes how the facts are worded."""

    def __init__(self, world: World, entity: Entity):
        self.world = world
        self.e = entity
        self.facts = random.Random(f"{world.seed}:facts:{entity.path}")
        self.filler_rng = random.Random(f"{world.seed}:filler:{entity.path}")
        self.blocks: list[Block] = [Block("h1", (entity.title,))]

    def ref(self, rng: random.Random | None = None, capital: bool = False) -> str:
        """The subject as prose names it: people by surname (now and then by full name), the rest by name."""
        e = self.e
        rng = rng or self.facts
        if e.kind == PERSON:
            ref = e.name if rng.random() < 0.3 else e.surname
        else:
            ref = f"the {e.name}" if e.kind in (ORGANISATION, EVENT) else e.name
        return ref[0].upper() + ref[1:] if capital else ref

    def say(self, template: str, value: Entity | str | None = None) -> Block:
        """A paragraph from ``template``: ``{S}``/``{s}`` is the subject, ``{v}`` the value (a link for entities)."""
        fmt = {"S": self.ref(capital=True), "s": self.ref(), "P": _possessive(self.e),
               "p": _possessive(self.e).lower()}
        head, _, tail = template.partition("{v}")
        if isinstance(value, Entity):
            ref = f"the {value.name}" if value.kind in (ORGANISATION, EVENT) else value.name
            article = ref[: len(ref) - len(value.name)]
            parts: tuple[Segment, ...] = (head.format(**fmt) + article, (value.name, value.path), tail.format(**fmt))
        else:
            parts = ((head + (value or "") + tail).format(**fmt),)
        return Block("p", tuple(p for p in parts if p))

    def fact(self, section: str, templates: tuple[str, ...], value: Entity | str | None) -> None:
        """A section stating one fact; on long pages, screens of filler come first."""
        self.blocks.append(Block("h2", (section,)))
        if self.e.long:
            self.pad(self.filler_rng.randint(3, 5))
        self.blocks.append(self.say(self.facts.choice(templates), value))
        if not self.e.long and self.filler_rng.random() < 0.5:
            self.pad(1)

    def pad(self, paragraphs: int) -> None:
        rng = self.filler_rng
        pool = _FILLER[self.e.kind] + _FILLER_ANY
        for _ in range(paragraphs):
            sentences = []
            for template in rng.sample(pool, rng.randint(4, 6)):
                sentence = template.format_map(_Slots(self, rng))
                sentences.append(sentence[0].upper() + sentence[1:])
            self.blocks.append(Block("p", (" ".join(sentences),)))

    def section(self, heading: str, long: int, short: int) -> None:
        """A section of filler only: ``long`` paragraphs on a long page, ``short`` on a short one."""
        self.blocks.append(Block("h2", (heading,)))
        self.pad(long if self.e.long else short)

    def listing(self, heading: str, intro: str, entities: list[Entity]) -> None:
        if entities:
            self.blocks.append(Block("h2", (heading,)))
            self.blocks.append(self.say(intro))
            self.blocks += [Block("li", ((e.name, e.path),)) for e in entities]

    def infobox(self, rows: list[tuple[str, Entity | str | int | None]]) -> None:
        # A long article keeps only its first row (what the entity is): every other fact is deep in the prose.
        for label, value in rows[:1] if self.e.long else rows:
            if value is None:
                continue
            part: Segment = (value.name, value.path) if isinstance(value, Entity) else str(value)
            self.blocks.append(Block("row", (part,), label=label))

    def lead(self, first: str, second: tuple[str, ...]) -> None:
        if self.e.title != self.e.name:
            name = self.e.name
            self.blocks.append(Block("note", (f"For other people named {name}, see ",
                                              (_disambiguation_title(name), disambiguation_path(name)), ".")))
        text = first + " " + self.facts.choice(second)
        self.blocks.append(Block("p", (text.format(P=_possessive(self.e), p=_possessive(self.e).lower()),)))

    def footer(self, titles: list[str]) -> None:
        """The line linking the article's categories."""
        parts: list[Segment] = ["Categories: "]
        for i, title in enumerate(titles):
            parts += ([" · "] if i else []) + [(title, category_path(title))]
        self.blocks.append(Block("p", tuple(parts)))


_OBJECT = {"she": "her", "he": "him"}


class _Slots(dict):
    """The slots of a filler template, each drawn when the template first uses it (cheaper than drawing all)."""

    def __init__(self, writer: _Writer, rng: random.Random):
        super().__init__()
        self.writer = writer
        self.rng = rng

    def __missing__(self, key: str) -> str:
        value = self[key] = _DRAW[key](self.writer, self.rng, self)
        return value


_DRAW = {
    "S": lambda w, rng, slots: w.ref(rng, capital=True),
    "s": lambda w, rng, slots: w.ref(rng),
    "P": lambda w, rng, slots: _possessive(w.e),
    "p": lambda w, rng, slots: _possessive(w.e).lower(),
    "o": lambda w, rng, slots: _OBJECT.get(w.e.pronoun, "it"),
    "time": lambda w, rng, slots: rng.choice(_TIMES),
    "source": lambda w, rng, slots: rng.choice(_SOURCES),
    "aspect": lambda w, rng, slots: rng.choice(_ASPECTS),
    "state": lambda w, rng, slots: rng.choice(_STATES),
    "topic": lambda w, rng, slots: rng.choice(_TOPICS[w.e.kind]),
    "adj": lambda w, rng, slots: rng.choice(_ADJECTIVES),
    "adj2": lambda w, rng, slots: rng.choice([a for a in _ADJECTIVES if a != slots.get("adj")]),
}


def _possessive(e: Entity) -> str:
    return {"she": "Her", "he": "His"}.get(e.pronoun, "Its")


def _article(world: World, e: Entity, lists: dict[tuple[str, int], list[Entity]]) -> Page:
    w = _Writer(world, e)
    target = world.target

    def listed(what: str) -> list[Entity]:
        return lists.get((what, e.id), [])

    if e.kind == PERSON:
        occupation = e.category
        w.lead(f"{e.name} was {indefinite(occupation)} {occupation} {w.facts.choice(_PERSON_LEADS)}.", _SECOND_LEADS)
        w.infobox([("Occupation", occupation), ("Born", e.years["born"]), ("Birthplace", target(e, "birthplace")),
                   ("Died", e.years["died"]), ("Teacher", target(e, "teacher")),
                   ("Employer", target(e, "employer"))])
        w.section("Overview", 8, 1)
        w.fact("Early life", _BORN, str(e.years["born"]))
        w.fact("Origins", _BIRTHPLACE, target(e, "birthplace"))
        if "teacher" in e.links:
            w.fact("Education", _TEACHER, target(e, "teacher"))
        if "employer" in e.links:
            w.fact("Career", _EMPLOYER, target(e, "employer"))
        w.listing("Works", "{S} is credited with the following works:", listed("works"))
        w.listing("Events", "{S} took part in the following events:", listed("events"))
        w.fact("Later life", _DIED, str(e.years["died"]))
        w.section("Legacy", 3, 1)
        w.footer([birth_category(e)])
    elif e.kind == ORGANISATION:
        field = ORGANISATION_KINDS[e.category][2]
        w.lead(f"The {e.name} is {indefinite(e.category)} {e.category} devoted to {field}.", _SECOND_LEADS_THINGS)
        w.infobox([("Type", e.category), ("Founded", e.years["founded"]), ("Founder", target(e, "founder")),
                   ("City", target(e, "city"))])
        w.section("Overview", 8, 1)
        w.fact("History", _FOUNDED, str(e.years["founded"]))
        w.fact("Foundation", _FOUNDER, target(e, "founder"))
        w.fact("Location", _CITY, target(e, "city"))
        w.listing("Collection", "The collection of {s} includes:", listed("held"))
        w.section("Reputation", 3, 1)
        w.footer([organisation_category(world, e)])
    elif e.kind == PLACE:
        coast = "coastal" if e.coastal else "inland"
        w.lead(f"{e.name} is {indefinite(coast)} {coast} city in the region of {e.region}.", _SECOND_LEADS_THINGS)
        w.infobox([("Region", e.region), ("Coast", "yes" if e.coastal else "no"), ("Founded", e.years["founded"]),
                   ("Population", f"{e.population:,}")])
        w.section("Overview", 8, 1)
        w.fact("History", _FOUNDED, str(e.years["founded"]))
        w.listing("Institutions", "Institutions based in {s} include:", listed("based"))
        w.listing("Events", "{S} has hosted these events:", listed("hosted"))
        w.section("Economy", 3, 1)
        w.footer([region_category(e.region)] + ([COASTAL_CATEGORY] if e.coastal else []))
    elif e.kind == WORK:
        w.lead(f"{e.name} is {indefinite(e.category)} {e.category}.", _SECOND_LEADS_THINGS)
        w.infobox([("Type", e.category), ("Creator", target(e, "creator")), ("Year", e.years["year"]),
                   ("Held by", target(e, "holder"))])
        w.section("Overview", 8, 1)
        w.fact("Creation", _CREATOR, target(e, "creator"))
        w.fact("Date", _COMPLETED, str(e.years["year"]))
        w.fact("Provenance", _HOLDER, target(e, "holder"))
        w.section("Reception", 3, 1)
        w.footer([WORK_KINDS[e.category][0]])
    else:
        w.lead(f"The {e.name} was {indefinite(e.category)} {e.category}.", _SECOND_LEADS_THINGS)
        w.infobox([("Type", e.category), ("Year", e.years["year"]), ("Venue", target(e, "venue"))])
        w.section("Overview", 8, 1)
        w.fact("Date", _HELD_YEAR, str(e.years["year"]))
        w.fact("Venue", _VENUE, target(e, "venue"))
        w.listing("Participants", "Participants in {s} included:", [world.entities[i] for i in e.participants])
        w.section("Aftermath", 3, 1)
        w.footer([EVENT_KINDS[e.category][0]])
    return Page(e.path, e.title, tuple(w.blocks))


# The lists each kind of article shows (see Pages._index_lists).
_LISTS = {PERSON: ("works", "events"), ORGANISATION: ("held",), PLACE: ("based", "hosted"), WORK: (), EVENT: ()}


def indefinite(word: str) -> str:
    """The indefinite article for ``word``.

    >>> indefinite("astronomer"), indefinite("painter"), indefinite("university")
    ('an', 'a', 'a')
    """
    # "uni-" sounds like "you": a university.
    return "an" if word[0] in "aeiou" and not word.startswith("uni") else "a"


# --- the site's pages -----------------------------------------------------------------------------------------
class Pages:
    """Every page of a world by path, built on demand.

    Args:
        world: the world the pages describe.

    Attributes:
        paths: every page's path in a fixed order: the main page, articles (by entity id), categories (by
            title), disambiguation pages (by name).
        titles: every page's title by path.
        categories: the category pages by path.
        disambiguations: the disambiguation pages by path, each with the ids of the people it lists.
        mentioned_on: for each entity id, the paths of the pages that name it.
    """

    def __init__(self, world: World):
        self.world = world
        self.categories = categories(world)
        self.disambiguations = {
            disambiguation_path(world.entities[ids[0]].name): ids for ids in world.collisions
        }
        self._entities = {e.path: e for e in world.entities}
        self._lists = self._index_lists()
        self.mentioned_on = self._index_mentions()
        self.titles: dict[str, str] = {HOME_PATH: HOME_TITLE}
        self.titles.update((e.path, e.title) for e in world.entities)
        self.titles.update((p, c.title) for p, c in self.categories.items())
        self.titles.update((p, _disambiguation_title(world.entities[ids[0]].name))
                           for p, ids in self.disambiguations.items())
        self.paths: tuple[str, ...] = (
            (HOME_PATH,) + tuple(e.path for e in world.entities) + tuple(self.categories)
            + tuple(sorted(self.disambiguations))
        )

    def _index_lists(self) -> dict[tuple[str, int], list[Entity]]:
        """Inverse relations once, so an article's lists cost a lookup, not a scan of the world."""
        lists: dict[tuple[str, int], list[Entity]] = {}
        for e in self.world.entities:
            if e.kind == WORK:
                lists.setdefault(("works", e.links["creator"]), []).append(e)
                lists.setdefault(("held", e.links["holder"]), []).append(e)
            elif e.kind == ORGANISATION:
                lists.setdefault(("based", e.links["city"]), []).append(e)
            elif e.kind == EVENT:
                lists.setdefault(("hosted", e.links["venue"]), []).append(e)
                for p in e.participants:
                    lists.setdefault(("events", p), []).append(e)
        return lists

    def _index_mentions(self) -> dict[int, tuple[str, ...]]:
        """For each entity id, the pages that name it. Pages name other entities only in links, so these are
        its own article, the articles that link to it (relations, lists, participants), its categories and
        its disambiguation page."""
        on: dict[int, dict[str, None]] = {e.id: {e.path: None} for e in self.world.entities}
        for e in self.world.entities:
            named = list(e.links.values()) + list(e.participants)
            named += [x.id for what in _LISTS[e.kind] for x in self._lists.get((what, e.id), ())]
            for i in named:
                on[i][e.path] = None
        for path, category in self.categories.items():
            for i in category.members:
                on[i][path] = None
        for path, ids in self.disambiguations.items():
            for i in ids:
                on[i][path] = None
        return {i: tuple(paths) for i, paths in on.items()}

    def build(self, path: str) -> Page | None:
        """The page at ``path``, or ``None`` when there is none."""
        entity = self._entities.get(path)
        if entity is not None:
            return _article(self.world, entity, self._lists)
        if path in self.categories:
            return _category_page(self.world, path, self.categories[path])
        if path in self.disambiguations:
            return _disambiguation_page(self.world, path, self.disambiguations[path])
        if path == HOME_PATH:
            return _home_page(self.categories)
        return None

    def page(self, path: str) -> Page:
        """The page at ``path``, for a path that must have one (one of :attr:`paths`); a KeyError otherwise."""
        page = self.build(path)
        if page is None:
            raise KeyError(f"no page at {path!r}")
        return page


# --- templates -------------------------------------------------------------------------------------------------
# Fact sentences state exactly one value ({v}) about the subject ({S}/{s}, possessive {P}/{p}).
_BORN = ("{S} was born in {v}.", "The year of {p} birth was {v}.", "{P} birth is recorded in {v}.")
_BIRTHPLACE = ("{P} birthplace was {v}.", "{S} was born in the city of {v}.", "{S} came into the world in {v}.")
_TEACHER = ("{S} studied under {v}.", "{S} trained with {v}.", "{P} teacher was {v}.")
_EMPLOYER = ("{S} worked at {v} for most of {p} career.", "{S} held a post at {v}.",
             "For many years {s} was employed by {v}.")
_DIED = ("{S} died in {v}.", "{P} death came in {v}.", "{S} died in the year {v}.")
_FOUNDED = ("{S} was founded in {v}.", "{S} was established in {v}.", "The foundation of {s} dates from {v}.")
_FOUNDER = ("{S} was founded by {v}.", "The founder of {s} was {v}.", "{S} owes its existence to {v}.")
_CITY = ("{S} is based in {v}.", "The seat of {s} is in {v}.", "{S} has always stood in {v}.")
_CREATOR = ("{S} was created by {v}.", "{S} is the work of {v}.", "The author of {s} was {v}.")
_COMPLETED = ("{S} was completed in {v}.", "Work on {s} was finished in {v}.", "{S} dates from {v}.")
_HOLDER = ("{S} is held by {v}.", "Today {s} belongs to {v}.", "{S} is kept at {v}.")
_HELD_YEAR = ("{S} took place in {v}.", "{S} was held in {v}.", "The year of {s} was {v}.")
_VENUE = ("{S} was hosted by the city of {v}.", "{S} met in {v}.", "The venue of {s} was {v}.")

_PERSON_LEADS = (
    "whose work is discussed in most surveys of the period",
    "remembered for a distinctive and exacting manner",
    "known to later readers mainly through letters and the recollections of students",
    "whose reputation grew slowly but steadily",
    "regarded by admirers as one of the more original minds of the time",
)
_SECOND_LEADS = (
    "This article covers {p} life, training and career.",
    "The sections below describe {p} background, teachers and later years.",
    "Much of what is known about {p} life comes from correspondence.",
)
_SECOND_LEADS_THINGS = (
    "This article covers its history and significance.",
    "The sections below describe its origins and later history.",
    "Its history is summarised below.",
)

# Filler: no names, years or values, and no word that any name or category title uses (tests check this).
# Slots: {S}/{s} subject, {P}/{p} possessive, {o} object pronoun, {time}, {source}, {aspect}, {state},
# {adj}, {adj2}, {topic}; combining them keeps long pages from repeating themselves.
_FILLER_ANY = (
    "{source} differ on {aspect}, and the surviving record is {state}.",
    "The evidence for {aspect} is {state}, and much of it comes from later recollections.",
    "{time}, commentators returned to {aspect} repeatedly, without reaching agreement.",
    "Some claims about {aspect} rest on a single source and should be read with caution.",
    "Documents bearing on {aspect} were lost or dispersed, which complicates any firm account.",
    "Opinions on {aspect} have shifted over time, often following broader changes in taste.",
    "{source} have tried to reconstruct {aspect}, with differing results.",
    "It is not always clear which decisions were deliberate and which were forced by circumstance.",
    "{source} say little about {aspect}, and what they say is {state}.",
    "{time}, questions about {topic} came to the fore.",
)
_FILLER = {
    PERSON: (
        "Contemporaries described {s} as {adj} and {adj2}, a judgement later writers have tended to repeat.",
        "{time}, letters show {s} preoccupied with {topic}.",
        "{S} rarely spoke about {topic} in public, though private notes suggest a lasting interest.",
        "A surviving notebook contains drafts, lists and remarks on {topic}.",
        "{time}, {s} returned to {topic} again and again.",
        "Friends remembered {s} as {adj}, though capable of long stretches of solitary work.",
        "{time}, {s} developed the habit of revising earlier work many times.",
        "Critics have debated whether {p} choices reflected conviction or necessity.",
        "{P} correspondence about {topic} is extensive but {state}.",
        "{S} kept a strict daily routine, according to those who knew {o} well.",
        "Younger colleagues found {s} {adj} but fair.",
        "{time}, money was a recurring worry, and {s} took on additional duties to make ends meet.",
        "{source} portray {s} as {adj} in matters of {topic}.",
        "{S} wrote at length about {topic}, though little of it was published.",
    ),
    ORGANISATION: (
        "{time}, {s} broadened its activities in {topic}.",
        "Internal reports describe {adj} debates about {topic}.",
        "The governing board of {s} met regularly to review budgets, appointments and {topic}.",
        "Visitors often commented on the {adj} atmosphere of the building.",
        "{time}, funding came from a mix of private gifts and public grants.",
        "{S} went through periods of growth and of retrenchment.",
        "Staff turnover was {adj} in some decades and negligible in others.",
        "Its rules were revised several times, usually after disputes about {topic}.",
        "Annual reports from {s} describe steady if unspectacular progress in {topic}.",
        "Relations with the city authorities were {adj} for long stretches.",
        "{source} credit {s} with {adj} work on {topic}.",
    ),
    PLACE: (
        "The economy of {s} has long depended on {topic}.",
        "Older districts of {s} preserve narrow streets and {adj} squares.",
        "Local records describe hard seasons and frequent disputes over {topic}.",
        "{S} grew slowly for centuries and then quickly within a few generations.",
        "Travellers described {s} as {adj} and {adj2}.",
        "{time}, much of the older building stock of {s} was replaced.",
        "The council of {s} has often argued about {topic}.",
        "{time}, roads connecting {s} to its neighbours were improved in stages.",
        "The population of {s} has risen and fallen with the fortunes of {topic}.",
        "{source} describe {s} as {adj} in its dealings with outsiders.",
    ),
    WORK: (
        "Critics have praised the {adj} structure of {s}.",
        "{S} has been quoted, copied and imitated many times.",
        "Early reviews of {s} were mixed, with some readers finding it {adj}.",
        "Scholars have linked {s} to contemporary debates about {topic}.",
        "{time}, the reception of {s} changed markedly.",
        "{S} survives in more than one version, which has caused some confusion.",
        "Several details of {s} are still debated by specialists.",
        "Many readers regard {s} as {adj} and {adj2}.",
        "The making of {s} took longer than planned, according to later accounts.",
        "{source} connect {s} with questions of {topic}.",
    ),
    EVENT: (
        "Reports of {s} describe {adj} discussions about {topic}.",
        "The organisers of {s} struggled with lodging and travel arrangements.",
        "Attendance at {s} exceeded the expectations of its organisers.",
        "Newspapers gave {s} {adj} coverage.",
        "Some participants later described {s} as {adj2}.",
        "The programme of {s} was changed several times at short notice.",
        "Much of the lasting influence of {s} came from conversations outside the formal sessions.",
        "Debates at {s} touched on {topic}.",
        "{source} disagree about what {s} achieved in {topic}.",
    ),
}
_ADJECTIVES: tuple[str, ...] = (
    "meticulous", "restless", "reserved", "generous", "demanding", "patient", "stubborn", "cautious",
    "ambitious", "modest", "sociable", "exacting", "uneven", "lively", "tense", "measured", "cordial", "austere",
)
_TIMES: tuple[str, ...] = (
    "In these years", "Around this time", "Later", "For a while", "At first", "Over the following decade",
    "In the same period", "Soon afterwards", "Throughout this phase", "By then",
)
_SOURCES: tuple[str, ...] = (
    "Contemporary accounts", "Surviving letters", "Later biographers", "Local chronicles", "Official records",
    "Memoirs of the period", "Several reviewers", "Modern scholars",
)
_ASPECTS: tuple[str, ...] = (
    "the exact sequence of events", "the motives involved", "the scale of the undertaking", "the role of chance",
    "the precise dates", "the influence of rivals", "the cost of the work", "the degree of public interest",
)
_STATES: tuple[str, ...] = ("incomplete", "patchy", "contradictory", "scattered", "fragmentary", "sparse")
_TOPICS: dict[str, tuple[str, ...]] = {
    PERSON: ("questions of method", "the training of apprentices", "the keeping of accurate records",
             "public lectures", "travel and correspondence", "patronage and its obligations",
             "the revision of earlier drafts", "disputes over priority", "the care of instruments",
             "the organisation of workshops", "the education of younger colleagues"),
    ORGANISATION: ("cataloguing", "public outreach", "the training of staff", "the care of fragile holdings",
                   "admissions", "lending and loans", "building maintenance", "the publication of reports"),
    PLACE: ("trade in grain and timber", "river transport", "markets and fairs", "small workshops",
            "fishing and salt", "wool and cloth", "road tolls", "seasonal labour"),
    WORK: ("form and genre", "patronage", "public taste", "technique", "translation", "authorship",
           "method"),
    EVENT: ("funding", "standards and procedures", "travel", "publication", "method",
            "the admission of newcomers"),
}
_WORD = re.compile(r"[A-Za-z]+")
_SLOT = re.compile(r"\{\w+\}")


def _words_of(texts: list[str]) -> frozenset[str]:
    return frozenset(w.casefold() for t in texts for w in _WORD.findall(_SLOT.sub(" ", t)))


def template_words() -> frozenset[str]:
    """Every word the templates use (lower case): invented names must avoid them."""
    texts = [*_BORN, *_BIRTHPLACE, *_TEACHER, *_EMPLOYER, *_DIED, *_FOUNDED, *_FOUNDER, *_CITY, *_CREATOR,
             *_COMPLETED, *_HOLDER, *_HELD_YEAR, *_VENUE, *_PERSON_LEADS, *_SECOND_LEADS, *_SECOND_LEADS_THINGS,
             *_FILLER_ANY, *_ADJECTIVES, *_TIMES, *_SOURCES, *_ASPECTS, *_STATES, HOME_TITLE, COASTAL_CATEGORY]
    texts += [t for group in _FILLER.values() for t in group] + [t for group in _TOPICS.values() for t in group]
    return _words_of(texts)


def filler_words() -> frozenset[str]:
    """The words filler paragraphs can contain, besides the subject's name (lower case)."""
    texts = [*_FILLER_ANY, *_ADJECTIVES, *_TIMES, *_SOURCES, *_ASPECTS, *_STATES]
    texts += [t for group in _FILLER.values() for t in group]
    texts += [t for group in _TOPICS.values() for t in group]
    return _words_of(texts)
