"""BrowseComp-style questions about the builtin world, each with a gold path.

Four families (see ``docs/contract.md``, "Sites and tasks"):

- ``chain``: follow ``hops - 1`` relations from a named entity, then ask one fact of where they lead
  ("In which city was the teacher of Edra Vane born?").
- ``inverted``: "Which painter was born in the 1880s and studied under a sculptor?": ``hops`` constraints that
  exactly one person meets, at least one of them checkable only on another page, with a distractor that
  meets all but one. The gold path starts from the occupation's category page.
- ``compare``: "Of A, B and C, whose employer was founded earliest?": one chain sub-question per item (each a
  :class:`~envs.web.types.Task` in ``subtasks``), then a comparison; ``hops`` is a sub-question's hops plus one.
- ``long``: a chain whose every page is a long article with its fact deep inside, so that reading to the
  facts takes more than :data:`LONG_EVIDENCE_TOKENS` tokens.

Every question is checked against the search engine's snippet rule: no page that the first search (for the
names the question mentions) can return shows the answer in its title or snippet (:class:`SnippetCheck`).

Each entity belongs to one split; a task belongs to the split of the entities it asks about (its *answer
entities*: the answer itself, or the entity whose year is the answer), so the test split asks about entities
the train split never asks about.

Example:
    >>> from envs.web.pages import Pages, template_words
    >>> world = World(seed=0, size=150, reserved=template_words())
    >>> tasks, _ = make_tasks(world, Pages(world))
    >>> sorted({t.family for t in tasks})
    ['chain', 'compare', 'inverted', 'long']
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from .tokens import approx_tokens
from .pages import Pages, category_path, indefinite
from .search import terms
from .types import GoldStep, Task, normalize_answer
from .world import (
    EVENT,
    OCCUPATION,
    ORGANISATION,
    PERSON,
    PLACE,
    RELATIONS,
    TEST,
    TRAIN,
    WORK,
    YEARS,
    Entity,
    World,
)

FAMILIES = ("chain", "inverted", "compare", "long")
HOPS: dict[str, tuple[int, ...]] = {"chain": (1, 2, 3, 4), "inverted": (2, 3, 4), "compare": (2, 3, 4),
                                    "long": (2, 3, 4)}
# A long task's gold path reads at least this many tokens of page text (one default context window).
LONG_EVIDENCE_TOKENS = 4096
COMPARE_ITEMS = 3
# Tries per wanted task before a (family, hops, split) cell is left short.
ATTEMPTS = 200
# Facts in the order long articles state them (see envs.web.pages), so scrolling down meets them in turn.
FACT_ORDER: dict[str, tuple[str, ...]] = {
    PERSON: ("born", "birthplace", "teacher", "employer", "died"),
    ORGANISATION: ("founded", "founder", "city"),
    PLACE: ("founded",),
    WORK: ("creator", "year", "holder"),
    EVENT: ("year", "venue"),
}

_RELATION_PHRASE = {
    "birthplace": "the birthplace of {d}",
    "teacher": "the teacher of {d}",
    "employer": "the employer of {d}",
    "founder": "the founder of {d}",
    "city": "the home city of {d}",
    "creator": "the creator of {d}",
    "holder": "the institution that holds {d}",
    "venue": "the host city of {d}",
}
_RELATION_NOUN = {
    "birthplace": "birthplace", "teacher": "teacher", "employer": "employer", "founder": "founder",
    "city": "home city", "creator": "creator", "holder": "holding institution", "venue": "host city",
}
_QUESTION = {
    (PERSON, "birthplace"): "In which city was {d} born?",
    (PERSON, "teacher"): "Who taught {d}?",
    (PERSON, "employer"): "Which institution employed {d}?",
    (PERSON, "born"): "In what year was {d} born?",
    (PERSON, "died"): "In what year did {d} die?",
    (ORGANISATION, "founder"): "Who founded {d}?",
    (ORGANISATION, "city"): "In which city is {d} based?",
    (ORGANISATION, "founded"): "In what year was {d} founded?",
    (PLACE, "founded"): "In what year was {d} founded?",
    (WORK, "creator"): "Who created {d}?",
    (WORK, "holder"): "Which institution holds {d}?",
    (WORK, "year"): "In what year was {d} completed?",
    (EVENT, "venue"): "In which city did {d} take place?",
    (EVENT, "year"): "In what year did {d} take place?",
}
_YEAR_VERB = {
    (PERSON, "born"): "was born", (PERSON, "died"): "died", (ORGANISATION, "founded"): "was founded",
    (PLACE, "founded"): "was founded", (WORK, "year"): "was completed", (EVENT, "year"): "took place",
}
_NOTE = {
    (PERSON, "birthplace"): "{e} was born in {v}.", (PERSON, "teacher"): "{e} studied under {v}.",
    (PERSON, "employer"): "{e} worked at {v}.", (PERSON, "born"): "{e} was born in {v}.",
    (PERSON, "died"): "{e} died in {v}.", (ORGANISATION, "founder"): "{e} was founded by {v}.",
    (ORGANISATION, "city"): "{e} is based in {v}.", (ORGANISATION, "founded"): "{e} was founded in {v}.",
    (PLACE, "founded"): "{e} was founded in {v}.", (WORK, "creator"): "{e} was created by {v}.",
    (WORK, "holder"): "{e} is held by {v}.", (WORK, "year"): "{e} was completed in {v}.",
    (EVENT, "venue"): "{e} took place in {v}.", (EVENT, "year"): "{e} took place in {v}.",
}


@dataclass(frozen=True)
class _Draft:
    """A task as a family of :class:`_TaskGenerator` writes it, before :func:`make_tasks` keeps and numbers it.

    Attributes:
        task: the task, its ``id`` (and its subtasks' ids) still ``""``.
        asked: the ids of the entities it asks about (its answer entities), which
            :meth:`~envs.web.builtin.BuiltinSite.answer_entities` reports once the task has an id.
    """

    task: Task
    asked: tuple[int, ...]


class SnippetCheck:
    """Tells whether a search could show an answer in a result's title or snippet.

    A search returns pages holding a query term, each shown with its title and one sentence of its text
    (:func:`envs.web.search.snippet`): one holding query terms, else an opening one. Pages name another entity
    only in a link to it (or a city in a category title), and neither leads nor filler hold a name, year or
    other value, so a page holding a query term names an entity whose name holds it, or is a category whose
    title does (or the main page, which lists that category). What such a page can show is its title, its
    subject and that entity, and in list rows a person's birth year, which the person's birth-year category
    title shows too. So the check looks for the answer in those titles and names: as strict as the search or
    stricter.
    """

    def __init__(self, pages: Pages):
        self.pages = pages
        self.shown_title = {p: _padded(t) for p, t in pages.titles.items()}
        self.shown_name = [_padded(e.name) for e in pages.world.entities]
        self.entities_with: dict[str, list[int]] = {}
        for e in pages.world.entities:
            for word in set(terms(e.name)):
                self.entities_with.setdefault(word, []).append(e.id)
        self._cache: dict[str, str] = {}
        self.categories_with: dict[str, list[str]] = {}
        for path, category in pages.categories.items():
            for word in set(terms(category.title)):
                self.categories_with.setdefault(word, []).append(path)

    def shows(self, query: str, answer: str) -> bool:
        """Whether a search for ``query`` might show ``answer``."""
        needle = _padded(answer)
        return any(needle in self._shown(word) for word in set(terms(query)))

    def _shown(self, word: str) -> str:
        """Every title and name that pages holding ``word`` can show, in one string (one substring search
        instead of one per page); lines keep a match from spanning two of them."""
        if word not in self._cache:
            shown = []
            for i in self.entities_with.get(word, ()):
                shown.append(self.shown_name[i])
                shown += [self.shown_title[p] for p in self.pages.mentioned_on[i]]
            # A category whose title holds the word (and the main page, which lists it).
            shown += [self.shown_title[p] for p in self.categories_with.get(word, ())]
            self._cache[word] = "\n".join(shown)
        return self._cache[word]


def _subject(e: Entity) -> str:
    """``e`` as the subject of a note: "The Varnholt Institute", "Edra Vane (painter)"."""
    return f"The {e.title}" if e.kind in (ORGANISATION, EVENT) else e.title


def _padded(text: str) -> str:
    return f" {normalize_answer(text)} "


class _TaskGenerator:
    """Drafts tasks about one world, a method per family (:meth:`chain`, :meth:`inverted`,
    :meth:`compare`), each returning a :class:`_Draft` or ``None`` when its random pick makes no valid task.

    The families share one random stream and what is costly to build once per world: the snippet check, the
    people by occupation and split, and the text of the long pages read so far (see :func:`make_tasks`).
    """

    def __init__(self, world: World, pages: Pages):
        self.world = world
        self.pages = pages
        self.rng = random.Random(f"{world.seed}:tasks")
        self.snippets = SnippetCheck(pages)
        self.by_occupation: dict[str, list[Entity]] = {}
        self.people: dict[str, list[Entity]] = {TRAIN: [], TEST: []}
        for p in world.of_kind(PERSON):
            self.by_occupation.setdefault(p.category, []).append(p)
            self.people[p.split].append(p)
        self.long_pages = [e for e in world.entities if e.long]
        self._text: dict[str, str] = {}  # full text of the long pages met so far

    # --- describing things -----------------------------------------------------------------------------
    def describe(self, e: Entity) -> str:
        """How a question names ``e``: people of a shared name get their occupation."""
        if e.kind == PERSON:
            return f"the {e.category} {e.name}" if e.title != e.name else e.name
        if e.kind in (ORGANISATION, EVENT):
            return f"the {e.name}"
        if e.kind == WORK:
            return f"the {e.category} {e.name}"
        return e.name

    def value(self, e: Entity, key: str) -> str:
        """The text of fact ``key`` of ``e`` as its page shows it."""
        if key in e.links:
            return self.world.entities[e.links[key]].name
        return str(e.years[key])

    def answer_entity(self, e: Entity, key: str) -> Entity:
        return self.world.entities[e.links[key]] if key in e.links else e

    @staticmethod
    def aliases(e: Entity | None) -> tuple[str, ...]:
        if e is None or e.kind != PERSON:
            return ()
        return (e.surname,) + ((e.title,) if e.title != e.name else ())

    def follow(self, e: Entity, relations: Iterable[str]) -> list[Entity] | None:
        """``e`` and the entities ``relations`` lead to, or ``None`` if a relation is missing."""
        out = [e]
        for r in relations:
            nxt = self.world.target(out[-1], r)
            if nxt is None:
                return None
            out.append(nxt)
        return out

    def chain_question(self, start: Entity, relations: list[str], key: str, last: Entity) -> str:
        d = self.describe(start)
        for r in relations:
            d = _RELATION_PHRASE[r].format(d=d)
        question = _QUESTION[(last.kind, key)].format(d=d)
        return question[0].upper() + question[1:]

    # --- gold paths ------------------------------------------------------------------------------------
    def visit(self, e: Entity, keys: Iterable[str] = (), shallow: Iterable[tuple[str, str]] = ()) -> list[GoldStep]:
        """Open ``e``'s page and read the ``(expect, note)`` pairs of ``shallow`` (its lead and infobox show
        them on the first screen) and its facts ``keys``. A short page shows every fact on its first screen
        (the infobox); on a long page each fact sits deep in the prose, so the path scrolls down to it."""
        order = FACT_ORDER[e.kind]
        facts = [(self.value(e, k), _NOTE[(e.kind, k)].format(e=_subject(e), v=self.value(e, k)))
                 for k in sorted(set(keys), key=order.index)]
        first_screen = list(shallow) + ([] if e.long else facts)
        deep = facts if e.long else []
        if first_screen:
            steps = [GoldStep("open", e.path, *first_screen[0])]
            steps += [GoldStep("scroll", "down", *fact) for fact in first_screen[1:]]
        else:
            steps = [GoldStep("open", e.path, e.title)]
        return steps + [GoldStep("scroll", "down", *fact) for fact in deep]

    def chain_path(self, entities: list[Entity], relations: list[str], key: str) -> tuple[GoldStep, ...]:
        steps = [GoldStep("search", entities[0].name, entities[0].title)]
        for e, k in zip(entities, relations + [key]):
            steps += self.visit(e, [k])
        return tuple(steps)

    def evidence_tokens(self, entities: list[Entity], keys: list[str]) -> int:
        """Tokens of page text read from the top of each page down to the line with its fact."""
        total = 0
        for e, k in zip(entities, keys):
            if e.path not in self._text:
                self._text[e.path] = self.pages.page(e.path).text()
            text = self._text[e.path]
            end = text.find("\n", text.find(self.value(e, k)))
            total += approx_tokens(text[: end if end >= 0 else len(text)])
        return total

    # --- families --------------------------------------------------------------------------------------
    def walk(self, start: Entity, length: int, long_only: bool = False) -> tuple[list[str], list[Entity]] | None:
        rng = self.rng
        relations: list[str] = []
        entities = [start]
        for _ in range(length):
            here = entities[-1]
            options = [r for r in sorted(RELATIONS[here.kind]) if r in here.links
                       and (not long_only or self.world.entities[here.links[r]].long)]
            if not options:
                return None
            r = rng.choice(options)
            relations.append(r)
            entities.append(self.world.entities[here.links[r]])
        return relations, entities

    def chain(self, hops: int, split: str, long: bool = False) -> _Draft | None:
        rng = self.rng
        start = rng.choice(self.long_pages if long else self.world.entities)
        walked = self.walk(start, hops - 1, long_only=long)
        if walked is None:
            return None
        relations, entities = walked
        last = entities[-1]
        keys = [k for k in sorted(RELATIONS[last.kind]) if k in last.links] + list(YEARS[last.kind])
        key = rng.choice(keys)
        answer_of = self.answer_entity(last, key)
        names = [e.name for e in entities] + ([answer_of.name] if answer_of is not last else [])
        if answer_of.split != split or len(set(names)) < len(names):
            return None
        answer = self.value(last, key)
        if self.snippets.shows(start.name, answer):
            return None
        if long and self.evidence_tokens(entities, relations + [key]) < LONG_EVIDENCE_TOKENS:
            return None
        entity_answer = answer_of if answer_of is not last else None
        task = Task(
            id="", question=self.chain_question(start, relations, key, last), answer=answer,
            aliases=self.aliases(entity_answer), family="long" if long else "chain", hops=hops,
            split=answer_of.split, answer_kind=entity_answer.kind if entity_answer else "year",
            gold_path=self.chain_path(entities, relations, key), search_queries=(start.name,),
        )
        return _Draft(task, (answer_of.id,))

    def compare(self, hops: int, split: str) -> _Draft | None:
        rng = self.rng
        kind = rng.choice((PERSON, PERSON, ORGANISATION, WORK))
        items_pool = self.world.of_kind(kind)
        walked = self.walk(rng.choice(items_pool), hops - 2)
        if walked is None:
            return None
        relations, entities = walked
        key = rng.choice(YEARS[entities[-1].kind])
        items, paths = [], []
        for _ in range(10 * COMPARE_ITEMS):
            item = rng.choice(items_pool)
            path = self.follow(item, relations)
            if path is None or path[-1].split != split or item in items or len({e.name for e in path}) < len(path):
                continue
            items.append(item)
            paths.append(path)
            if len(items) == COMPARE_ITEMS:
                break
        else:
            return None
        values = [p[-1].years[key] for p in paths]
        if len(set(values)) < len(values) or len({i.name for i in items}) < len(items):
            return None
        latest = rng.random() < 0.5
        best = values.index(max(values) if latest else min(values))
        winner = items[best]
        asked = [winner] + [p[-1] for p in paths]
        if winner.split != split:
            return None
        subtasks = []
        for item, path in zip(items, paths):
            answer = str(path[-1].years[key])
            if self.snippets.shows(item.name, answer):
                return None
            subtasks.append(Task(
                id="", question=self.chain_question(item, relations, key, path[-1]), answer=answer,
                family="chain", hops=hops - 1, split=winner.split, answer_kind="year",
                gold_path=self.chain_path(path, relations, key), search_queries=(item.name,),
            ))
        verb = _YEAR_VERB[(entities[-1].kind, key)]
        if relations:
            subject = "whose " + "'s ".join(_RELATION_NOUN[r] for r in relations)
        else:
            subject = "who" if kind == PERSON else "which"
        named = [self.describe(i) for i in items]
        question = (f"Of {', '.join(named[:-1])} and {named[-1]}, {subject} {verb} "
                    f"{'latest' if latest else 'earliest'}?")
        task = Task(
            id="", question=question, answer=winner.name, aliases=self.aliases(winner), family="compare",
            hops=hops, split=winner.split, answer_kind=kind,
            gold_path=tuple(step for sub in subtasks for step in sub.gold_path),
            subtasks=tuple(subtasks), search_queries=tuple(i.name for i in items),
        )
        return _Draft(task, tuple(e.id for e in asked))

    def inverted(self, hops: int, split: str) -> _Draft | None:
        rng = self.rng
        person = rng.choice(self.people[split])
        candidates = self.by_occupation[person.category]
        constraints = self.constraints(person)
        relational = [c for c in constraints if c.elsewhere]
        if not relational or len(constraints) < hops:
            return None
        first = rng.choice(relational)
        rest = [c for c in constraints if c is not first]
        chosen = [first] + rng.sample(rest, hops - 1)
        if not _unique_with_distractor(candidates, chosen):
            return None
        occupation = OCCUPATION[person.category]
        if self.snippets.shows(occupation.plural, person.name):
            return None
        question = _inverted_question(person.category, chosen)
        keys = sorted({k for c in chosen for k in c.keys})
        steps = [GoldStep("search", occupation.plural, occupation.plural),
                 GoldStep("open", category_path(occupation.plural), occupation.plural)]
        steps += self.visit(person, keys)
        checks: dict[int, tuple[list[str], list[tuple[str, str]]]] = {}
        for c in chosen:
            if c.elsewhere:
                target, facts, shown = c.elsewhere
                checks.setdefault(target.id, ([], []))
                checks[target.id][0].extend(facts)
                checks[target.id][1].extend(shown)
        for target_id, (facts_there, shown_there) in checks.items():
            steps += self.visit(self.world.entities[target_id], facts_there, shown_there)
        task = Task(
            id="", question=question, answer=person.name, aliases=self.aliases(person), family="inverted",
            hops=hops, split=person.split, answer_kind=PERSON, gold_path=tuple(steps),
            search_queries=(occupation.plural,),
        )
        return _Draft(task, (person.id,))

    def constraints(self, p: Entity) -> list[_Constraint]:
        """The constraints ``p`` meets that an inverted question can ask."""
        rng = self.rng
        world = self.world
        out = []
        for key in ("born", "died"):
            decade = p.years[key] // 10 * 10

            def in_decade(c: Entity, key: str = key, decade: int = decade) -> bool:
                return c.years[key] // 10 * 10 == decade

            out.append(_Constraint(key, f"in the {decade}s", (key,), in_decade))
        city = world.linked(p, "birthplace")
        coast = "coastal" if city.coastal else "inland"

        def same_coast(c: Entity, flag: bool = city.coastal) -> bool:
            return world.linked(c, "birthplace").coastal == flag

        def same_region(c: Entity, region: str = city.region) -> bool:
            return world.linked(c, "birthplace").region == region

        out.append(_Constraint(
            "coast", f"{indefinite(coast)} {coast} city", ("birthplace",), same_coast,
            (city, (), ((f"{coast} city", f"{city.name} is {indefinite(coast)} {coast} city."),))))
        out.append(_Constraint(
            "region", f"the {city.region} region", ("birthplace",), same_region,
            (city, (), ((city.region, f"{city.name} lies in the region of {city.region}."),))))
        teacher = world.target(p, "teacher")
        if teacher is not None:
            occ = teacher.category

            def teacher_is(c: Entity, occ: str = occ) -> bool:
                return "teacher" in c.links and world.linked(c, "teacher").category == occ

            out.append(_Constraint(
                "teacher", f"{indefinite(occ)} {occ}", ("teacher",), teacher_is,
                (teacher, (), ((occ, f"{teacher.title} was {indefinite(occ)} {occ}."),))))
        employer = world.target(p, "employer")
        if employer is not None:
            kind = employer.category

            def employer_is(c: Entity, kind: str = kind) -> bool:
                return "employer" in c.links and world.linked(c, "employer").category == kind

            out.append(_Constraint("employer", f"{indefinite(kind)} {kind}", ("employer",), employer_is))
            founded = employer.years["founded"]
            after = rng.random() < 0.5
            if after:
                bound = (founded - 1) // 10 * 10 - 10 * rng.randint(0, 2)
            else:
                bound = founded // 10 * 10 + 10 + 10 * rng.randint(0, 2)

            def holds(c: Entity, bound: int = bound, after: bool = after) -> bool:
                if "employer" not in c.links:
                    return False
                year = world.linked(c, "employer").years["founded"]
                return year > bound if after else year < bound

            out.append(_Constraint(
                "founded", f"founded {'after' if after else 'before'} {bound}", ("employer",), holds,
                (employer, ("founded",), ())))
        return out


@dataclass(frozen=True)
class _Constraint:
    """One condition of an inverted question.

    Attributes:
        slot: what it constrains: ``"born"``, ``"coast"``, ``"region"`` (of the birthplace), ``"died"``,
            ``"teacher"`` (occupation), ``"employer"`` (kind) or ``"founded"`` (the employer's founding).
        words: its value in the question's words ("in the 1880s", "a coastal city", "a sculptor").
        keys: the facts of the answer's own page it needs.
        holds: whether a candidate person meets it.
        elsewhere: for conditions checked on another page: that entity, the facts of it to read, and the
            ``(expect, note)`` pairs its first screen shows.
    """

    slot: str
    words: str
    keys: tuple[str, ...]
    holds: Callable[[Entity], bool]
    elsewhere: tuple[Entity, tuple[str, ...], tuple[tuple[str, str], ...]] | None = None


def _inverted_question(occupation: str, constraints: list[_Constraint]) -> str:
    """The question asking which person of ``occupation`` meets ``constraints``, one clause per fact.

    >>> c = lambda slot, words: _Constraint(slot, words, (), bool)
    >>> _inverted_question("painter", [c("region", "the Oskel region"), c("born", "in the 1880s"),
    ...                                c("coast", "a coastal city"), c("teacher", "a sculptor")])
    'Which painter was born in the 1880s in a coastal city of the Oskel region and studied under a sculptor?'
    """
    words = {c.slot: c.words for c in constraints}
    clauses = []
    born = [words["born"]] if "born" in words else []
    if "coast" in words:
        born.append(f"in {words['coast']}")
    if "region" in words:
        born.append(("of " if "coast" in words else "in ") + words["region"])
    if born:
        clauses.append("was born " + " ".join(born))
    if "died" in words:
        clauses.append(f"died {words['died']}")
    if "teacher" in words:
        clauses.append(f"studied under {words['teacher']}")
    if "employer" in words or "founded" in words:
        clauses.append(f"worked for {words.get('employer', 'an institution')} {words.get('founded', '')}".strip())
    listed = ", ".join(clauses[:-1]) + " and " + clauses[-1] if len(clauses) > 1 else clauses[0]
    return f"Which {occupation} {listed}?"


def _unique_with_distractor(candidates: list[Entity], constraints: list[_Constraint]) -> bool:
    """Whether exactly one candidate meets every constraint and another meets all but one."""
    # Constraints on the candidate's own page are the cheap ones: test them first.
    constraints = sorted(constraints, key=lambda k: k.elsewhere is not None)
    matches, distractor = 0, False
    for c in candidates:
        misses = 0
        for k in constraints:
            if not k.holds(c):
                misses += 1
                if misses > 1:
                    break
        if misses == 0:
            matches += 1
            if matches > 1:
                return False
        distractor = distractor or misses == 1
    return matches == 1 and distractor


def question_words() -> frozenset[str]:
    """Every word the question templates use (lower case): invented names must avoid them."""
    texts = [*_RELATION_PHRASE.values(), *_RELATION_NOUN.values(), *_QUESTION.values(), *_YEAR_VERB.values(),
             "Which Of whose who which earliest latest was born died in the region city of a an an coastal inland "
             "studied under worked for an institution founded before after s"]
    return frozenset(w.casefold() for t in texts for w in re.findall(r"[A-Za-z]+", re.sub(r"\{\w+\}", " ", t)))


def quotas(size: int, family: str = "chain", hops: int = 2) -> dict[str, int]:
    """Tasks wanted per (family, hops) cell, by split: scales with the world, at least one test task.

    One-hop chains get ten times more: they are the easy setting small models learn on (the CPU demo), and
    they are cheap to make.
    """
    scale = 10 if (family, hops) == ("chain", 1) else 1
    return {TRAIN: max(2, scale * size // 100), TEST: max(1, scale * size // 300)}


def make_tasks(world: World, pages: Pages) -> tuple[tuple[Task, ...], dict[str, tuple[int, ...]]]:
    """Every task of ``world``, in a fixed order (train, then test; by family and hops), and for each task id
    the ids of the entities it asks about.

    Each (family, hops, split) cell gets :func:`quotas` tasks where the world allows; a cell the world cannot
    fill within its tries gets fewer.
    """
    return _numbered(_drafts(world, pages))


_Cells = dict[tuple[str, str, int], list[_Draft]]


def _drafts(world: World, pages: Pages) -> _Cells:
    """The drafts kept for each ``(split, family, hops)`` cell, a question asked twice kept once.

    Cells are drafted family by family, then by hops, train before test, from one random stream: the same
    world gives the same tasks only as long as this order holds.
    """
    generator = _TaskGenerator(world, pages)
    by_family: dict[str, Callable[[int, str], _Draft | None]] = {
        "chain": generator.chain, "inverted": generator.inverted, "compare": generator.compare,
        "long": lambda hops, split: generator.chain(hops, split, long=True),
    }
    cells: _Cells = {}
    seen: set[str] = set()
    for family in FAMILIES:
        for hops in HOPS[family]:
            wanted = quotas(world.size, family, hops)
            for split in (TRAIN, TEST):
                cell = cells.setdefault((split, family, hops), [])
                for _ in range(ATTEMPTS * wanted[split]):
                    if len(cell) == wanted[split]:
                        break
                    draft = by_family[family](hops, split)
                    if draft is not None and draft.task.question not in seen:
                        seen.add(draft.task.question)
                        cell.append(draft)
    return cells


def _numbered(cells: _Cells) -> tuple[tuple[Task, ...], dict[str, tuple[int, ...]]]:
    """The drafts as tasks with ids (``train-chain-0001``; a subtask adds ``.1``, ``.2``, ...), numbered within
    a split and family across its hops, in the order :func:`make_tasks` lists them, with what each asks about."""
    tasks: list[Task] = []
    asked: dict[str, tuple[int, ...]] = {}
    for split in (TRAIN, TEST):
        for family in FAMILIES:
            number = 0
            for hops in HOPS[family]:
                for draft in cells.get((split, family, hops), []):
                    number += 1
                    task_id = f"{split}-{family}-{number:04d}"
                    subtasks = tuple(_with_id(s, f"{task_id}.{i + 1}") for i, s in enumerate(draft.task.subtasks))
                    tasks.append(_with_id(draft.task, task_id, subtasks))
                    asked[task_id] = draft.asked
    return tuple(tasks), asked


def _with_id(task: Task, task_id: str, subtasks: tuple[Task, ...] | None = None) -> Task:
    return replace(task, id=task_id, subtasks=task.subtasks if subtasks is None else subtasks)


COMPARE_ANSWERS = ("name", "year")
YEAR_REQUEST = "Answer with that year, not the name."


def answering_with_year(task: Task) -> Task:
    """A ``compare`` task asking for the winning year instead of the winner (other tasks as they are).

    "Of A, B and C, whose employer was founded earliest?" names every candidate answer, so a policy that guesses
    one of the names it was given succeeds once in ``COMPARE_ITEMS`` without reading a page. Asked for the year
    (the earliest or latest of the sub-questions' answers), nothing in the question is an answer: it must be
    read. The gold path, sub-questions and split stay the same (the year is the winner's sub-question's answer).

    Example:
        >>> from envs.web.pages import Pages, template_words
        >>> world = World(seed=0, size=150, reserved=template_words())
        >>> task = next(t for t in make_tasks(world, Pages(world))[0] if t.family == "compare")
        >>> asked = answering_with_year(task)
        >>> asked.answer in {sub.answer for sub in task.subtasks}, asked.answer_kind
        (True, 'year')
    """
    if task.family != "compare":
        return task
    years = [int(sub.answer) for sub in task.subtasks]
    latest = task.question.endswith(" latest?")
    if not latest and not task.question.endswith(" earliest?"):
        raise ValueError(f"task {task.id!r} is not a compare question of this generator: {task.question!r}")
    answer = str(max(years) if latest else min(years))
    return replace(task, question=f"{task.question} {YEAR_REQUEST}", answer=answer, aliases=(), answer_kind="year")
