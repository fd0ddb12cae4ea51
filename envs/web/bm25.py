"""The BM25 score matrix of a corpus: built in one streaming pass, saved beside the corpus, memory-mapped after.

Why not ``bm25s.BM25.index``: it keeps every token of the corpus as a Python string and a list of ids before
it scores anything, 4 GB at 100,000 documents of 300 words. Here each document is counted as it is read
(only its distinct terms and their counts are kept, as int32/float32 arrays), so the build holds about a tenth
of that. The scores are bm25s's own (Lucene BM25, ``k1=1.5``, ``b=0.75``, float32), computed with the same
operations in the same order, so they are the same bits (``tests/test_index_store.py`` checks it against
bm25s); bm25s still scores queries (:meth:`bm25s.BM25.get_scores_from_ids`).

Why not ``bm25s.BM25.save``/``load``: its vocabulary is one JSON object that every process parses whole into
a dict, and its parameters are passed to the constructor as they are found in the file. Here everything a
search reads is an ``.npy`` array (loaded with ``allow_pickle=False``, memory-mapped, so every process and env
on the corpus shares one copy in the page cache), the vocabulary is a sorted byte blob searched in place,
and ``meta.json`` holds only numbers and strings that are checked before use.

Example:
    >>> arrays = build([["edra", "vane", "painter"], ["oskarde", "port"]])
    >>> arrays.n_docs, arrays.vocab.lookup("vane") is not None, arrays.vocab.lookup("missing")
    (2, True, None)
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

#: Bumped whenever what is stored, or how documents become terms, changes: an index of another format is rebuilt.
FORMAT = 1
K1, B = 1.5, 0.75
#: Indexing fewer documents than this shows no progress bar (it takes well under a second).
PROGRESS_MIN_DOCS = 5000
_FILES = ("data.npy", "indices.npy", "indptr.npy", "vocab.npy", "vocab_offsets.npy")
_DTYPES = {"data.npy": np.float32, "indices.npy": np.int32, "indptr.npy": np.int64, "vocab.npy": np.uint8,
           "vocab_offsets.npy": np.int64}


class IndexWarning(UserWarning):
    """A saved index could not be used or written; the search index is built in memory instead."""


class Vocabulary(Sequence[str]):
    """Sorted distinct terms as one UTF-8 blob and its offsets, searched in place (a memory-mapped file stays
    shared: no per-process dict of every term). A term's id is its rank."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray):
        self._blob, self._offsets = blob, offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i):  # type: ignore[override]
        return bytes(self._blob[self._offsets[i] : self._offsets[i + 1]]).decode("utf-8", "replace")

    def lookup(self, term: str) -> int | None:
        """The id of ``term``, ``None`` when no document holds it."""
        i = bisect.bisect_left(self, term)
        return i if i < len(self) and self[i] == term else None

    @classmethod
    def of(cls, terms: Sequence[str]) -> Vocabulary:
        encoded = [t.encode("utf-8") for t in terms]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)


@dataclass(frozen=True)
class Arrays:
    """A BM25 score matrix in bm25s's CSC layout: column ``t`` (a term id) holds ``data[indptr[t]:indptr[t+1]]``
    for the documents ``indices[indptr[t]:indptr[t+1]]``."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    vocab: Vocabulary
    n_docs: int


def build(documents: Iterable[list[str]], total: int | None = None, desc: str = "indexing") -> Arrays:
    """The BM25 matrix of ``documents`` (each a list of terms), read once, in order.

    A progress bar (tqdm, on stderr) shows for :data:`PROGRESS_MIN_DOCS` documents or more; the environment
    variable ``TQDM_DISABLE=1`` silences it (``mosaic eval --no-progress`` sets it, for its env workers too).
    """
    from .progress import progress_bar

    # A term's first id is a number drawn when it is first seen (map(ids.setdefault, ...) runs in C, a third of
    # the time of a Python loop); the ids are made contiguous, in sorted order, at the end.
    ids: dict[str, int] = {}
    draw = itertools.count()
    doc_terms, doc_counts, doc_lens, distinct = [], [], [], []
    # (progress_bar reads TQDM_DISABLE when the bar is made: the CLI's --no-progress sets it after tqdm's import)
    quiet = total is None or total < PROGRESS_MIN_DOCS
    for terms in progress_bar(documents, total=total, desc=desc, unit="doc", file=sys.stderr, leave=False,
                              mininterval=1.0, disable=quiet):
        counts = Counter(terms)
        doc_terms.append(np.fromiter(map(ids.setdefault, counts, draw), np.int64, len(counts)))
        doc_counts.append(np.fromiter(counts.values(), np.float32, len(counts)))
        doc_lens.append(len(terms))
        distinct.append(len(counts))
    # Term ids by rank in sorted order, so that the vocabulary is searched in place.
    order = sorted(ids)
    first_ids = np.fromiter(map(ids.__getitem__, order), np.int64, len(order))
    del ids
    by_first_id = np.argsort(first_ids)
    drawn = np.concatenate(doc_terms) if doc_terms else np.zeros(0, np.int64)
    del doc_terms
    vocab_idx = by_first_id[np.searchsorted(first_ids[by_first_id], drawn)].astype(np.int32)
    del drawn, first_ids, by_first_id
    tf = np.concatenate(doc_counts) if doc_counts else np.zeros(0, np.float32)
    del doc_counts
    doc_idx = np.repeat(np.arange(len(doc_lens), dtype=np.int32), distinct)
    data = _scores(vocab_idx, tf, doc_idx, doc_lens, len(order))
    del tf
    # A stable sort by term keeps each column's documents in order: bm25s's own layout.
    sorter = np.argsort(vocab_idx, kind="stable")
    indptr = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(np.bincount(vocab_idx, minlength=len(order)), out=indptr[1:])
    del vocab_idx
    return Arrays(data[sorter], doc_idx[sorter], indptr, Vocabulary.of(order), len(doc_lens))


def _scores(vocab_idx: np.ndarray, tf: np.ndarray, doc_idx: np.ndarray, doc_lens: list[int], n_vocab: int):
    """Lucene BM25 of every (document, term) pair, with bm25s's operations in bm25s's order (see
    ``bm25s.scoring._build_scores_and_indices_for_matrix``): the same float32 bits."""
    n_docs = len(doc_lens)
    if len(vocab_idx) == 0:  # not a single term (and perhaps no document): nothing to score
        return np.zeros(0, np.float32)
    avg_len = np.array(doc_lens).mean()
    df = np.bincount(vocab_idx, minlength=n_vocab).tolist()
    idf = np.array([math.log(1 + (n_docs - d + 0.5) / (d + 0.5)) for d in df], dtype=np.float32)
    length_norm = K1 * ((1 - B) + B * np.array(doc_lens, dtype=np.int64) / avg_len)
    # In place: at 100,000 documents each temporary is 160 MB. a + b, a * b are commutative in IEEE arithmetic,
    # and a float32 widens to float64 exactly, so this is still bm25s's idf * (tf / (norm + tf)).
    tf64 = tf.astype(np.float64)
    score = length_norm[doc_idx]
    score += tf64
    np.divide(tf64, score, out=score)
    del tf64
    score *= idf[vocab_idx]
    return score.astype(np.float32)


# --- saved indexes ------------------------------------------------------------------------------------


def save(arrays: Arrays, folder: Path, fingerprint: str) -> None:
    """Write ``arrays`` to ``folder`` (created, or replaced whole): a reader sees the old index or the new one,
    never half of one. Raises ``OSError`` when the folder cannot be written."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp's folder is its owner's alone: other users' envs map this index too
        named = {"data.npy": arrays.data, "indices.npy": arrays.indices, "indptr.npy": arrays.indptr,
                 "vocab.npy": arrays.vocab._blob, "vocab_offsets.npy": arrays.vocab._offsets}
        for name, array in named.items():
            np.save(tmp / name, np.ascontiguousarray(array, dtype=_DTYPES[name]), allow_pickle=False)
        meta = {"format": FORMAT, "fingerprint": fingerprint, "n_docs": arrays.n_docs, "k1": K1, "b": B}
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        old = None
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
            os.replace(folder, old)
        os.replace(tmp, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class StaleIndex(Exception):
    """The saved index is of another corpus, format or parameters (rebuilt without a warning)."""


def load(folder: Path, fingerprint: str) -> Arrays:
    """The index saved in ``folder``, memory-mapped read-only.

    Every file is checked before use (``meta.json``'s fields and types; each array's dtype, shape and bounds),
    so a crafted or truncated index raises ``ValueError`` instead of giving wrong pages; nothing is unpickled.

    Raises:
        StaleIndex: it was built from other documents or with another format.
        ValueError, OSError: it is unreadable or inconsistent.
    """
    raw = (folder / "meta.json").read_bytes()
    if len(raw) > 4096:
        raise ValueError("meta.json is too large")
    meta = json.loads(raw)
    if not isinstance(meta, dict):
        raise ValueError("meta.json is not an object")
    if (meta.get("format"), meta.get("fingerprint"), meta.get("k1"), meta.get("b")) != (FORMAT, fingerprint, K1, B):
        raise StaleIndex(folder)
    n_docs = meta.get("n_docs")
    if not isinstance(n_docs, int) or isinstance(n_docs, bool) or not 0 <= n_docs < 2**31:
        raise ValueError("meta.json: n_docs is not a document count")
    a = {}
    for name in _FILES:
        array = np.load(folder / name, mmap_mode="r", allow_pickle=False)
        if array.dtype != _DTYPES[name] or array.ndim != 1:
            raise ValueError(f"{name}: {array.dtype} of {array.ndim} dimensions, not a 1-d {_DTYPES[name].__name__}")
        a[name] = array
    data, indices, indptr = a["data.npy"], a["indices.npy"], a["indptr.npy"]
    blob, offsets = a["vocab.npy"], a["vocab_offsets.npy"]
    _check_offsets("indptr.npy", indptr, len(data))
    _check_offsets("vocab_offsets.npy", offsets, len(blob))
    if len(indices) != len(data) or len(indptr) != len(offsets):
        raise ValueError("the arrays disagree in length")
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= n_docs):
        raise ValueError("indices.npy names documents the corpus does not have")
    return Arrays(data, indices, indptr, Vocabulary(blob, offsets), n_docs)


def _check_offsets(name: str, offsets: np.ndarray, end: int) -> None:
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != end or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{name} does not cut its array into pieces")


def open_or_build(terms_of_docs, total: int, folder: Path | None, fingerprint: str) -> Arrays:
    """The index saved in ``folder`` when it matches ``fingerprint``; else ``build(terms_of_docs())``, saved
    there for the next process and returned memory-mapped.

    One process builds at a time (a lock file beside ``folder``): envs started together wait for the first one
    and map its index instead of each building their own. Nothing here breaks an env: an index that cannot be
    read (corrupt, crafted, truncated) or a folder that cannot be written gives an :class:`IndexWarning` and
    the index is built in memory; a stale one (the corpus changed) is rebuilt and replaced.

    Args:
        terms_of_docs: a function returning each document's terms, in order (called only to build).
        total: how many documents (for the progress bar).
        folder: where the index is kept; ``None`` to build in memory only.
        fingerprint: what the corpus is (its files' sizes and times, the loader's format): a saved index of
            another fingerprint is stale.
    """
    if folder is None:
        return build(terms_of_docs(), total)
    found = _try_load(folder, fingerprint)
    if found is not None:
        return found
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = open(folder.parent / f".{folder.name}.lock", "a")
    except OSError as err:
        warnings.warn(f"cannot write the search index beside the corpus ({err}); building it in memory, "
                      f"in every process", IndexWarning, stacklevel=3)
        return build(terms_of_docs(), total)
    with lock:
        _lock(lock)
        found = _try_load(folder, fingerprint)  # built by another process while this one waited
        if found is not None:
            return found
        arrays = build(terms_of_docs(), total)
        try:
            save(arrays, folder, fingerprint)
            return load(folder, fingerprint)
        except (OSError, ValueError, StaleIndex) as err:
            warnings.warn(f"cannot save the search index to {folder} ({err}); using it from memory",
                          IndexWarning, stacklevel=3)
            return arrays


def _try_load(folder: Path, fingerprint: str) -> Arrays | None:
    if not (folder / "meta.json").exists():
        return None
    try:
        return load(folder, fingerprint)
    except StaleIndex:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as err:
        warnings.warn(f"the search index at {folder} is unreadable ({err}); rebuilding it", IndexWarning,
                      stacklevel=4)
        return None


def _lock(file) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: no lock; two processes may build the same index, and one wins the rename
        return
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX)
    except OSError:  # a file system without locks: same as above
        pass
