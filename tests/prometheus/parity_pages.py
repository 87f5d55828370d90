"""What a page shows, read through AppTest, and how two readings are compared (numbers within a tolerance).

``Shown`` keeps a page's headline tiles, its sentences and its tables, so the parity test opens each page once
per source and compares them row by row of the parity table.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tests.views.conftest import page_test

# A number as pages write them: 3,806 · -4903.6 · 0.30 · 50.04× (the thousands separator dropped).
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
QUERY = {"server": {"server": "steady"}}  # the Server page opens the steady server
RANGE = "15m"  # a 1 s scrape interval: a range query's grid is the scrape interval up to 15 min


@dataclass
class Shown:
    """One page as a reader sees it."""

    tiles: dict[str, str] = field(default_factory=dict)
    sentences: list[str] = field(default_factory=list)  # markdown, info, warning, error: in page order
    tables: list[pd.DataFrame] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)


def open_page(config: Path, page: str) -> Shown:
    """``page`` of a dashboard on ``config`` (viewer only: the test's own services collect)."""
    at = page_test(config, page)
    at.query_params["range"] = RANGE
    for name, value in QUERY.get(page, {}).items():
        at.query_params[name] = value
    at.run()
    sentences = [str(e.value) for kind in ("markdown", "info", "warning", "error") for e in getattr(at, kind)]
    return Shown(
        {m.label: m.value for m in at.metric},
        sentences,
        [e.value for e in at.dataframe],
        [str(e.value) for e in at.exception],
    )


def _numbers(text: str) -> tuple[str, list[float]]:
    return _NUMBER.sub("#", text), [float(n.replace(",", "")) for n in _NUMBER.findall(text)]


def same_text(want: str, have: str, rel: float) -> bool:
    """The same text, every number within ``rel`` (relative; 0: equal as written)."""
    if rel == 0.0 or want == have:
        return want == have
    want_words, want_numbers = _numbers(want)
    have_words, have_numbers = _numbers(have)
    return (
        want_words == have_words
        and len(want_numbers) == len(have_numbers)
        and all(
            math.isclose(w, h, rel_tol=rel, abs_tol=1e-9)
            for w, h in zip(want_numbers, have_numbers, strict=True)
        )
    )


def same_value(want: Any, have: Any, rel: float) -> bool:
    """JSON values: numbers within ``rel``, containers element by element, the rest equal."""
    if isinstance(want, bool) or isinstance(have, bool) or want is None or have is None:
        return bool(want == have)
    if isinstance(want, int | float) and isinstance(have, int | float):
        return math.isclose(want, have, rel_tol=rel, abs_tol=1e-9)
    if isinstance(want, dict) and isinstance(have, dict):
        return want.keys() == have.keys() and all(same_value(want[k], have[k], rel) for k in want)
    if isinstance(want, list) and isinstance(have, list):
        return len(want) == len(have) and all(same_value(w, h, rel) for w, h in zip(want, have, strict=True))
    if isinstance(want, str) and isinstance(have, str):
        return same_text(want, have, rel)
    return bool(want == have)


def table_with(shown: Shown, columns: tuple[str, ...]) -> pd.DataFrame:
    """The first table on the page with these columns (AppTest names no table)."""
    found = [t for t in shown.tables if set(columns) <= set(t.columns)]
    assert found, f"no table with columns {columns}"
    return found[0]


def rows_of(frame: pd.DataFrame, columns: tuple[str, ...], mask: str = "") -> list[list[str]]:
    """The table's rows as the text of these columns (numbers as written, ``mask`` removed), sorted: the
    order is not parity."""
    cells = [["" if pd.isna(v) else f"{v}" for v in row] for row in frame[list(columns)].itertuples(False)]
    return sorted([[re.sub(mask, "", c) if mask else c for c in row] for row in cells])


def sentences(shown: Shown, besides: tuple[str, ...] = (), mask: str = "") -> list[str]:
    """The page's sentences, without those naming anything in ``besides`` and with ``mask`` removed."""
    kept = [s for s in shown.sentences if not any(b in s for b in besides)]
    return [re.sub(mask, "", s) for s in kept] if mask else kept
