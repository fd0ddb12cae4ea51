"""A text space that accepts any string.

Gymnasium's :class:`~gymnasium.spaces.Text` only contains strings over its charset (alphanumerics by
default), which rejects spaces and punctuation, i.e. every real action and observation. :class:`AnyText`
keeps ``Text`` as its base class so vector envs batch it like ``Text``, but contains any ``str`` and samples
printable text with spaces, punctuation and tool-call syntax. ``AsyncVectorEnv``'s shared memory carries it
as UTF-8 bytes (up to :data:`SHARED_MEMORY_BYTES` an env; beyond that, a clear error names the fix).

``max_length`` says how long a text the env really sends or reads (the WebQA env's observations run to
:data:`SHARED_MEMORY_BYTES` characters, its actions are read to :data:`envs.actions.MAX_ACTION_CHARS`), but
``sample()`` stays cheap: it draws at most ``sample_length`` characters (256 by default). A random string is a
smoke test's action whatever its length, and drawing 100,000 characters would cost a Python loop each.

>>> space = AnyText(max_length=100_000)
>>> space.contains('search("Edra Vane")'), space.contains(3)
(True, False)
>>> _ = space.seed(0)
>>> len(space.sample()) <= space.sample_length == 256
True
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"
_SAMPLE_SNIPPETS = ('search("', 'open(', 'scroll("down")', 'answer("', '")', "<tool_call>", "é", "漢")


class AnyText(Text):
    """Any Python ``str``, the longest one sent being ``max_length`` characters.

    ``sample()`` draws up to ``min(max_length, sample_length)`` printable characters and tool-call pieces.
    ``contains`` accepts any ``str``, longer ones too: ``max_length`` describes the env, it does not police it
    (an action past it is read to its first ``max_length`` characters; an observation past it is refused only
    by ``AsyncVectorEnv``'s shared memory, with an error naming the fix).
    """

    def __init__(self, max_length: int = 256, seed: int | np.random.Generator | None = None,
                 sample_length: int = 256):
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARS, seed=seed)
        if not np.issubdtype(type(sample_length), np.integer) or sample_length < 0:
            raise ValueError(f"sample_length must be an int >= 0, got {sample_length!r}")
        self.sample_length = int(sample_length)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        pieces: list[str] = []
        length = int(self.np_random.integers(0, min(self.max_length, self.sample_length) + 1))
        while sum(map(len, pieces)) < length:
            if self.np_random.random() < 0.2:
                pieces.append(_SAMPLE_SNIPPETS[int(self.np_random.integers(len(_SAMPLE_SNIPPETS)))])
            else:
                pieces.append(_SAMPLE_CHARS[int(self.np_random.integers(len(_SAMPLE_CHARS)))])
        return "".join(pieces)[:length]

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length


# --- AsyncVectorEnv's shared memory: any text, as UTF-8 bytes in a fixed buffer per env -------------------
#: Bytes of shared memory per env for one observation (a length prefix, then UTF-8). A session context at the
#: default window is ~16 KB; this leaves room for windows of ~60k tokens.
SHARED_MEMORY_BYTES = 1 << 18


@create_shared_memory.register(AnyText)
def _create_anytext_shared_memory(space: AnyText, n: int = 1, ctx: Any = mp):
    return ctx.Array("B", n * (SHARED_MEMORY_BYTES + 8))


class SharedTexts(Sequence[str]):
    """The observations in shared memory, decoded when read (AsyncVectorEnv reads its buffer object once and
    deep-copies it after every step, so the copy must decode the buffer as it is then)."""

    def __init__(self, shared_memory: Any, n: int):
        self._rows = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8).reshape((n, SHARED_MEMORY_BYTES + 8))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self))[index])
        row = self._rows[index]
        size = int(row[:8].view(np.int64)[0])
        return row[8 : 8 + size].tobytes().decode("utf-8", errors="surrogatepass")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, SharedTexts)) else NotImplemented

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(AnyText)
def _read_anytext_from_shared_memory(space: AnyText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(shared_memory, n)


@write_to_shared_memory.register(AnyText)
def _write_anytext_to_shared_memory(space: AnyText, index: int, value: str, shared_memory: Any) -> None:
    encoded = value.encode("utf-8", errors="surrogatepass")
    if len(encoded) > SHARED_MEMORY_BYTES:
        raise ValueError(
            f"an observation of {len(encoded)} bytes does not fit AsyncVectorEnv's shared memory "
            f"({SHARED_MEMORY_BYTES} bytes an env): make the vector env with "
            "vector_kwargs={'shared_memory': False}"
        )
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)[index * (SHARED_MEMORY_BYTES + 8):]
    row[:8] = np.frombuffer(np.int64(len(encoded)).tobytes(), dtype=np.uint8)
    row[8 : 8 + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
