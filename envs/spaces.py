"""A text space that accepts any string.

Gymnasium's :class:`~gymnasium.spaces.Text` only contains strings over its charset (alphanumerics by
default), which rejects spaces and punctuation, i.e. every real action and observation. :class:`AnyText`
keeps ``Text`` as its base class so vector envs batch it like ``Text``, but contains any ``str`` and samples
printable text with spaces, punctuation and tool-call syntax. ``AsyncVectorEnv``'s shared memory carries it
as UTF-8 bytes (up to :data:`SHARED_MEMORY_BYTES` an env; beyond that, a clear error names the fix).

>>> space = AnyText()
>>> space.contains('search("Edra Vane")'), space.contains(3)
(True, False)
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
    """Any Python ``str``; ``sample()`` draws up to ``max_length`` printable characters and tool-call pieces."""

    def __init__(self, max_length: int = 256, seed: int | np.random.Generator | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARS, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        pieces = []
        length = int(self.np_random.integers(0, self.max_length + 1))
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
