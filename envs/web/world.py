"""The invented world behind the builtin site: people, organisations, places, works and events.

Everything comes from one ``random.Random(seed)``, so the same ``(seed, size)`` always gives the same world.
Names come from a syllable grammar (no real people), and every name token is used by one entity only, except
for deliberate collisions: pairs of people who share a name and get a disambiguation page. Facts are
consistent: a teacher is 15 to 45 years older than the student and alive when the student is 15, an
organisation is founded by an adult during the founder's life, an employer exists before the employee turns
30, a work is made during its creator's adult life, an event's participants are adults and alive, and every
city is older than anyone born there.

Example:
    >>> world = World(seed=0, size=120)
    >>> person = world.of_kind(PERSON)[0]
    >>> teacher = world.target(person, "teacher")
    >>> teacher is None or teacher.years["born"] + 15 <= person.years["born"]
    True
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from typing import Iterable

PERSON, ORGANISATION, PLACE, WORK, EVENT = "person", "organisation", "place", "work", "event"
KINDS = (PERSON, ORGANISATION, PLACE, WORK, EVENT)
TRAIN, TEST = "train", "test"

# Single-valued relations, by the kind of entity that has them, with the kind they point to.
RELATIONS: dict[str, dict[str, str]] = {
    PERSON: {"birthplace": PLACE, "teacher": PERSON, "employer": ORGANISATION},
    ORGANISATION: {"founder": PERSON, "city": PLACE},
    PLACE: {},
    WORK: {"creator": PERSON, "holder": ORGANISATION},
    EVENT: {"venue": PLACE},
}
# Year attributes, by kind.
YEARS: dict[str, tuple[str, ...]] = {
    PERSON: ("born", "died"),
    ORGANISATION: ("founded",),
    PLACE: ("founded",),
    WORK: ("year",),
    EVENT: ("year",),
}
# The fraction of entities whose questions belong to the test split.
TEST_FRACTION = 0.3
MIN_SIZE = 60
LAST_YEAR = 2015


@dataclass(frozen=True)
class Occupation:
    """An occupation: its plural (the category title), field group, and the kinds of work it makes."""

    name: str
    plural: str
    group: str
    works: tuple[str, ...]


OCCUPATIONS: tuple[Occupation, ...] = (
    Occupation("painter", "Painters", "art", ("painting",)),
    Occupation("sculptor", "Sculptors", "art", ("sculpture",)),
    Occupation("engraver", "Engravers", "art", ("print",)),
    Occupation("composer", "Composers", "music", ("symphony", "opera")),
    Occupation("poet", "Poets", "letters", ("poetry collection",)),
    Occupation("novelist", "Novelists", "letters", ("novel",)),
    Occupation("historian", "Historians", "letters", ("chronicle",)),
    Occupation("philosopher", "Philosophers", "letters", ("treatise",)),
    Occupation("astronomer", "Astronomers", "science", ("star catalogue",)),
    Occupation("chemist", "Chemists", "science", ("treatise",)),
    Occupation("mathematician", "Mathematicians", "science", ("treatise",)),
    Occupation("botanist", "Botanists", "science", ("herbarium",)),
    Occupation("physician", "Physicians", "science", ("treatise",)),
    Occupation("cartographer", "Cartographers", "science", ("map",)),
)
OCCUPATION = {o.name: o for o in OCCUPATIONS}

# Organisation kinds: plural (category titles), name patterns ({w} is an invented word) and field.
ORGANISATION_KINDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "university": ("Universities", ("University of {w}", "{w} University"), "teaching and research"),
    "institute": ("Institutes", ("{w} Institute",), "research"),
    "academy": ("Academies", ("{w} Academy", "Royal {w} Academy"), "the arts"),
    "conservatory": ("Conservatories", ("{w} Conservatory",), "music"),
    "museum": ("Museums", ("{w} Museum", "Museum of {w}"), "collections"),
    "gallery": ("Galleries", ("{w} Gallery",), "fine art"),
    "library": ("Libraries", ("{w} Library",), "books and manuscripts"),
    "observatory": ("Observatories", ("{w} Observatory",), "astronomy"),
    "hospital": ("Hospitals", ("{w} Hospital",), "medicine"),
    "society": ("Societies", ("{w} Society",), "learned exchange"),
}
# Where people of each field group work.
EMPLOYERS: dict[str, tuple[str, ...]] = {
    "art": ("academy", "museum", "gallery", "university"),
    "music": ("conservatory", "academy", "society"),
    "letters": ("university", "library", "society", "academy"),
    "science": ("university", "institute", "observatory", "hospital", "society"),
}
# Work kinds: plural (category titles) and the organisation kinds that hold them.
WORK_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "painting": ("Paintings", ("museum", "gallery")),
    "sculpture": ("Sculptures", ("museum", "gallery")),
    "print": ("Prints", ("museum", "gallery", "library")),
    "symphony": ("Symphonies", ("conservatory", "library")),
    "opera": ("Operas", ("conservatory", "library")),
    "poetry collection": ("Poetry collections", ("library", "society")),
    "novel": ("Novels", ("library", "university")),
    "chronicle": ("Chronicles", ("library", "university")),
    "treatise": ("Treatises", ("library", "university", "society")),
    "star catalogue": ("Star catalogues", ("observatory", "library")),
    "herbarium": ("Herbaria", ("museum", "university")),
    "map": ("Maps", ("library", "museum")),
}
# Work title patterns: {w} is an invented word, {noun}/{adj} come from the lists below.
WORK_PATTERNS = ("The {w} {noun}", "{noun} of {w}", "{adj} {noun} of {w}", "The {noun} at {w}")
WORK_NOUNS = (
    "Lantern", "Harbour", "Orchard", "Mirror", "Bridge", "Tower", "Crown", "Voyage", "Meadow", "Shore",
    "Compass", "Threshold", "Nocturne", "Elegy", "Vigil", "Pilgrim", "Beacon", "Fountain", "Chapel", "Loom",
)
WORK_ADJECTIVES = ("Amber", "Grey", "Silent", "Distant", "Scarlet", "Hollow", "Pale", "Silver", "Iron", "Winter")
# Event kinds: plural (category titles), name patterns, and the field groups that take part.
EVENT_KINDS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "congress": ("Congresses", ("{w} Congress",), ("science", "letters")),
    "exhibition": ("Exhibitions", ("{w} Exhibition", "Exhibition of {w}"), ("art",)),
    "festival": ("Festivals", ("{w} Festival", "Festival of {w}"), ("music", "letters")),
    "expedition": ("Expeditions", ("{w} Expedition",), ("science",)),
    "symposium": ("Symposia", ("{w} Symposium",), ("letters", "science")),
    "competition": ("Competitions", ("{w} Competition",), ("art", "music")),
}

# The syllable grammar: mostly single consonants around plain vowels, so names stay pronounceable.
_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "j")
_CLUSTERS = ("br", "dr", "tr", "st", "th", "kr", "gr", "sk", "fl")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei")
_MIDDLE_CODAS = ("n", "r", "l", "s")
_FINAL_CODAS = ("", "", "n", "r", "l", "s", "m", "nd", "rn", "st", "th", "k", "sk", "ld")


@dataclass
class Entity:
    """One thing the site has a page about.

    Attributes:
        id: index in :attr:`World.entities`.
        kind: ``"person"``, ``"organisation"``, ``"place"``, ``"work"`` or ``"event"``.
        name: how text names it (shared by the two people of a name collision).
        category: occupation, organisation kind, work kind, event kind, or ``"city"``.
        years: year attributes (see :data:`YEARS`).
        links: relation -> entity id (see :data:`RELATIONS`); a missing relation is absent.
        participants: an event's people, by id.
        region, coastal, population: a place's.
        pronoun: a person's ("she"/"he").
        title: the page title: the name, with the occupation added for colliding names.
        path: the page path, ``/wiki/<Title_with_underscores>``.
        split: ``"train"`` or ``"test"``: which split may ask questions whose answer is this entity.
        long: whether its page is long, with the facts deep inside.
    """

    id: int
    kind: str
    name: str
    category: str
    years: dict[str, int] = field(default_factory=dict)
    links: dict[str, int] = field(default_factory=dict)
    participants: tuple[int, ...] = ()
    region: str = ""
    coastal: bool = False
    population: int = 0
    pronoun: str = ""
    title: str = ""
    path: str = ""
    split: str = TRAIN
    long: bool = False

    @property
    def surname(self) -> str:
        """A person's last name token ("Vane" for "Edra Vane"); the name itself for other kinds."""
        return self.name.split()[-1] if self.kind == PERSON else self.name


def wiki_path(title: str) -> str:
    """The path of the page titled ``title``.

    >>> wiki_path("Edra Vane (painter)")
    '/wiki/Edra_Vane_(painter)'
    """
    return "/wiki/" + title.replace(" ", "_")


class _Words:
    """Invented words from the syllable grammar, each handed out once."""

    def __init__(self, rng: random.Random, reserved: Iterable[str]):
        self.rng = rng
        self.used = {w.casefold() for w in reserved}

    def __call__(self, syllables: int) -> str:
        rng = self.rng
        while True:
            parts = []
            for i in range(syllables):
                if i == 0 and rng.random() < 0.2:
                    onset = ""
                else:
                    onset = rng.choice(_CLUSTERS if rng.random() < 0.15 else _ONSETS)
                if i == syllables - 1:
                    coda = rng.choice(_FINAL_CODAS)
                else:
                    coda = rng.choice(_MIDDLE_CODAS) if rng.random() < 0.3 else ""
                parts.append(onset + rng.choice(_NUCLEI) + coda)
            word = "".join(parts)
            if 4 <= len(word) <= 10 and word not in self.used:
                self.used.add(word)
                return word.capitalize()


class World:
    """The generated world: entities with consistent facts, plus category and disambiguation groupings.

    Args:
        seed: the world's seed.
        size: how many entities (at least 60).
        reserved: words no invented name may equal (the words of the site's page templates), so that a
            search for a name finds only pages that mention it.

    Attributes:
        entities: every entity, by id.
        regions: the region names places belong to.
        collisions: groups of people sharing a name, each group's ids in id order.
    """

    def __init__(self, seed: int = 0, size: int = 2000, reserved: Iterable[str] = ()):
        if size < MIN_SIZE:
            raise ValueError(f"size={size} is too small for a builtin world: use size >= {MIN_SIZE}")
        self.seed = seed
        self.size = size
        self.rng = random.Random(seed)
        self.words = _Words(self.rng, reserved)
        self.entities: list[Entity] = []
        self._by_kind: dict[str, list[Entity]] = {k: [] for k in KINDS}
        counts = self._counts(size)
        self.regions = [self.words(2) for _ in range(max(3, counts[PLACE] // 6))]
        self._places(counts[PLACE])
        self._people(counts[PERSON])
        self._organisations(counts[ORGANISATION])
        self._employers()
        self._works(counts[WORK])
        self._events(counts[EVENT])
        self.collisions = self._collide()
        for e in self.entities:
            e.split = TEST if self.rng.random() < TEST_FRACTION else TRAIN
        self._long_pages()

    # --- queries --------------------------------------------------------------------------------------
    def of_kind(self, kind: str) -> list[Entity]:
        """The entities of ``kind``, in id order."""
        return self._by_kind[kind]

    def target(self, entity: Entity, relation: str) -> Entity | None:
        """What ``relation`` of ``entity`` points to, or ``None`` when it has none."""
        i = entity.links.get(relation)
        return None if i is None else self.entities[i]

    def linked(self, entity: Entity, relation: str) -> Entity:
        """What ``relation`` of ``entity`` points to, for a relation it must have; a KeyError when it has none."""
        i = entity.links.get(relation)
        if i is None:
            raise KeyError(f"{entity.title!r} has no {relation!r} link")
        return self.entities[i]

    # --- generation -----------------------------------------------------------------------------------
    @staticmethod
    def _counts(size: int) -> dict[str, int]:
        counts = {PLACE: size * 8 // 100, ORGANISATION: size * 14 // 100, WORK: size * 20 // 100,
                  EVENT: size * 8 // 100}
        counts[PERSON] = size - sum(counts.values())
        return counts

    def _add(self, kind: str, name: str, category: str, **fields) -> Entity:
        entity = Entity(len(self.entities), kind, name, category, **fields)
        self.entities.append(entity)
        self._by_kind[kind].append(entity)
        return entity

    def _name(self, patterns: tuple[str, ...], **slots: str) -> str:
        return self.rng.choice(patterns).format(w=self.words(self.rng.choice((2, 2, 3))), **slots)

    def _places(self, n: int) -> None:
        rng = self.rng
        for _ in range(n):
            self._add(
                PLACE, self.words(rng.choice((2, 3))), "city",
                years={"founded": rng.randint(1020, 1640)},
                region=rng.choice(self.regions),
                coastal=rng.random() < 0.4,
                population=int(round(rng.lognormvariate(10.5, 1.1), -2)) + 800,
            )

    def _people(self, n: int) -> None:
        rng = self.rng
        places = self.of_kind(PLACE)
        births = sorted(rng.randint(1680, 1940) for _ in range(n))
        for born in births:
            died = min(born + rng.randint(30, 92), LAST_YEAR)
            self._add(
                PERSON, f"{self.words(2)} {self.words(rng.choice((2, 2, 3)))}", rng.choice(OCCUPATIONS).name,
                years={"born": born, "died": died},
                links={"birthplace": rng.choice(places).id},
                pronoun=rng.choice(("she", "he")),
            )
        people = self.of_kind(PERSON)
        for person in people:
            born = person.years["born"]
            lo = bisect.bisect_left(births, born - 45)
            hi = bisect.bisect_right(births, born - 15)
            if lo < hi and rng.random() < 0.9:
                group = OCCUPATION[person.category].group
                teacher = self._pick(
                    people[lo:hi], lambda t: t.years["died"] >= born + 15,
                    lambda t: OCCUPATION[t.category].group == group)
                if teacher is not None:
                    person.links["teacher"] = teacher.id

    def _organisations(self, n: int) -> None:
        rng = self.rng
        founders = [p for p in self.of_kind(PERSON) if p.years["born"] + 25 <= min(p.years["died"], 1960)]
        rng.shuffle(founders)
        places = self.of_kind(PLACE)
        kinds = sorted(ORGANISATION_KINDS)
        for i in range(n):
            kind = rng.choice(kinds)
            _, patterns, _ = ORGANISATION_KINDS[kind]
            founder = founders[i % len(founders)]
            founded = rng.randint(founder.years["born"] + 25, min(founder.years["died"], 1960))
            self._add(ORGANISATION, self._name(patterns), kind, years={"founded": founded},
                      links={"founder": founder.id, "city": rng.choice(places).id})
        # Sorted by founding year, so "founded before year Y" is a prefix (see _employers).
        self._orgs_by_year = sorted(self.of_kind(ORGANISATION), key=lambda o: (o.years["founded"], o.id))

    def _employers(self) -> None:
        rng = self.rng
        orgs = self._orgs_by_year
        founded = [o.years["founded"] for o in orgs]
        for person in self.of_kind(PERSON):
            latest = min(person.years["born"] + 30, person.years["died"] - 5)
            existing = orgs[: bisect.bisect_right(founded, latest)]
            if not existing or rng.random() < 0.15:
                continue
            kinds = EMPLOYERS[OCCUPATION[person.category].group]
            employer = self._pick(existing, lambda o: True, lambda o: o.category in kinds)
            if employer is not None:
                person.links["employer"] = employer.id

    def _pick(self, pool: list[Entity], valid, preferred, tries: int = 12) -> Entity | None:
        """A random valid member of ``pool``, preferably a preferred one: a few random draws rather than a
        scan, so that generation stays linear in the world's size."""
        fallback = None
        for _ in range(tries):
            candidate = self.rng.choice(pool)
            if valid(candidate):
                if preferred(candidate):
                    return candidate
                fallback = fallback or candidate
        return fallback

    def _works(self, n: int) -> None:
        rng = self.rng
        people = self.of_kind(PERSON)
        # Creators are drawn with replacement: some people make several works, most make none.
        creators = [rng.choice(people) for _ in range(n)]
        orgs = self.of_kind(ORGANISATION)
        holders = {k: [o for o in orgs if o.category in kinds] or orgs for k, (_, kinds) in WORK_KINDS.items()}
        for creator in creators:
            kind = rng.choice(OCCUPATION[creator.category].works)
            holder = rng.choice(holders[kind])
            born, died = creator.years["born"], creator.years["died"]
            name = rng.choice(WORK_PATTERNS).format(
                w=self.words(2), noun=rng.choice(WORK_NOUNS), adj=rng.choice(WORK_ADJECTIVES))
            self._add(WORK, name, kind, years={"year": rng.randint(born + 18, min(died, LAST_YEAR))},
                      links={"creator": creator.id, "holder": holder.id})

    def _events(self, n: int) -> None:
        rng = self.rng
        people = self.of_kind(PERSON)
        births = [p.years["born"] for p in people]
        places = self.of_kind(PLACE)
        kinds = sorted(EVENT_KINDS)
        made = 0
        while made < n:
            kind = rng.choice(kinds)
            _, patterns, groups = EVENT_KINDS[kind]
            year = rng.randint(1720, 1990)
            adults = people[: bisect.bisect_right(births, year - 18)]
            if not adults:
                continue
            chosen: dict[int, Entity] = {}
            for _ in range(rng.randint(2, 4)):
                p = self._pick(adults, lambda p: p.years["died"] >= year and p.id not in chosen,
                               lambda p: OCCUPATION[p.category].group in groups, tries=30)
                if p is not None:
                    chosen[p.id] = p
            if len(chosen) < 2:
                continue
            self._add(EVENT, self._name(patterns), kind, years={"year": year},
                      links={"venue": rng.choice(places).id},
                      participants=tuple(sorted(chosen)))
            made += 1

    def _collide(self) -> list[tuple[int, ...]]:
        """Give pairs of people (of different occupations) the same name; title both with their occupation."""
        rng = self.rng
        people = self.of_kind(PERSON)
        groups: list[tuple[int, ...]] = []
        taken: set[int] = set()
        wanted = max(1, len(people) // 60)
        for _ in range(20 * wanted):
            if len(groups) == wanted:
                break
            a, b = rng.sample(people, 2)
            if a.id in taken or b.id in taken or a.category == b.category:
                continue
            b.name = a.name
            taken.update((a.id, b.id))
            groups.append(tuple(sorted((a.id, b.id))))
        for e in self.entities:
            e.title = f"{e.name} ({e.category})" if e.id in taken else e.name
            e.path = wiki_path(e.title)
        return sorted(groups)

    def _long_pages(self) -> None:
        """Mark long pages along random relation walks, so chains of long pages exist for the long family.

        Walks alternate the split of the entity they end at, so both splits get long questions.
        """
        rng = self.rng
        starts = [e for e in self.entities if RELATIONS[e.kind]]
        for i in range(max(8, self.size // 40)):
            want = TEST if i % 2 else TRAIN
            for _ in range(50):
                walk = [rng.choice(starts)]
                for _ in range(rng.randint(2, 3)):
                    relations = sorted(r for r in RELATIONS[walk[-1].kind] if r in walk[-1].links)
                    if not relations:
                        break
                    walk.append(self.linked(walk[-1], rng.choice(relations)))
                if len(walk) >= 2 and walk[-1].split == want:
                    break
            for e in walk:
                e.long = True
