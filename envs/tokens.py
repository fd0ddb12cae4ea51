"""Token counting for context budgets.

The default counter is a documented approximation, fast enough for every step: about four characters a
token, the usual figure for English text under BPE tokenizers. Pass any ``Callable[[str], int]`` (for
instance ``lambda s: len(tokenizer.encode(s))``) as the env's ``token_counter`` to count exactly.

>>> approx_tokens("search(\\"Edra Vane\\")")
5
"""

from __future__ import annotations

from typing import Callable

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """About ``len(text) / 4`` tokens, rounded up."""
    return (len(text) + 3) // 4
