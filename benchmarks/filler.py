"""Deterministic filler text for benchmark prompts (prefixes, user turns, tool results)."""

from __future__ import annotations

import random

WORDS = (
    "module", "function", "test", "refactor", "cache", "parser", "loop", "session", "store",
    "schema", "retry", "stream", "token", "header", "prefix", "history", "summary", "agent",
)  # fmt: skip


def filler(rng: random.Random, chars: int) -> str:
    """`chars` characters of space-separated words drawn from `rng`."""
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]
