"""A text space that accepts any string.

Gymnasium's :class:`~gymnasium.spaces.Text` only contains strings over its charset (alphanumerics by
default), which rejects spaces and punctuation, i.e. every real action and observation. :class:`AnyText`
keeps ``Text`` as its base class so vector envs batch it like ``Text``, but contains any ``str`` and samples
printable text with spaces, punctuation and tool-call syntax.

>>> space = AnyText()
>>> space.contains('search("Edra Vane")'), space.contains(3)
(True, False)
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Text

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
