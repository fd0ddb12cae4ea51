"""Which site an env browses: ``load_site`` turns a name, a path or a :class:`Site` into one, once per process.

This sits above every kind of site, so the base class in :mod:`envs.web.site` knows none of them: the kinds
import the base, and only this module imports the kinds.

Example:
    >>> site = load_site("builtin", site_seed=0, site_size=120)
    >>> site is load_site("builtin", site_seed=0, site_size=120)
    True
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .checks import check_int, shown
from .corpus import load_corpus
from .site import Site
from .world import MIN_SIZE


@dataclass
class _Registry:
    """The sites loaded so far, by ``("builtin", seed, size)`` or ``(path,)``."""

    sites: dict = field(default_factory=dict)


_CACHE = _Registry()


def load_site(site: str | Site = "builtin", site_seed: int = 0, site_size: int = 2000) -> Site:
    """The site an env browses: ``"builtin"`` (generated from ``site_seed`` and ``site_size``), a corpus path,
    or a :class:`Site` instance. Sites are cached per process: envs in one process share one site.

    Raises:
        ValueError: ``site`` is none of those (``""`` too: it would load the current folder), or ``site_seed``
            or ``site_size`` is not a whole number in range (checked for every site, so a typo never waits
            until the day the builtin site is used).
        CorpusError: the corpus is missing or malformed (a ``ValueError``; it names the file and line).

    A corpus task without a ``split`` in ``tasks.jsonl`` is put in one by a fixed hash of its id: about 80% in
    ``"train"``, 20% in ``"test"`` (:func:`envs.web.corpus.default_split`), so an env's default split has tasks;
    see ``docs/corpus.md``.
    """
    site_seed = check_int("site_seed", site_seed, minimum=0)
    site_size = check_int("site_size", site_size, minimum=MIN_SIZE)
    if isinstance(site, Site):
        return site
    is_path = isinstance(site, str) or isinstance(site, os.PathLike) and isinstance(os.fspath(site), str)
    if not is_path or not str(site).strip():
        raise ValueError(
            f"site must be 'builtin', the path of a corpus (a folder of .html files, a folder with "
            f"documents.jsonl, or a .jsonl documents file) or a Site, got {shown(site)}"
        )
    key = (str(site), site_seed, site_size) if site == "builtin" else (str(site),)
    if key not in _CACHE.sites:
        if site == "builtin":
            # Imported here: an env on a corpus never loads the world generator (nor bm25s with it).
            from .builtin import BuiltinSite

            _CACHE.sites[key] = BuiltinSite(seed=site_seed, size=site_size)
        else:
            _CACHE.sites[key] = load_corpus(site)
    return _CACHE.sites[key]
