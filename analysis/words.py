"""How the analyses write numbers in their sentences (the pages' tiles use the same, via ``views.formatting``
for the rest): ratios as the seed writes them, token counts as people say them."""

from __future__ import annotations


def times(value: float) -> str:
    """'6.35×' — a ratio as the seed writes it."""
    return f"{value:.2f}×"


def tokens_label(n: float) -> str:
    """A bin edge as the seed writes it: 1024 → "1K", 65536 → "64K", 1500 → "1500"."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n / 1024:.0f}K"
    return f"{n:.0f}"


def tokens(count: float) -> str:
    """A measured context as people say it: 900, 8.2K, 64K."""
    if count < 1024:
        return f"{count:.0f}"
    kilo = count / 1024
    return f"{kilo:.0f}K" if kilo >= 10 else f"{kilo:.1f}K"
