"""The parity table in docs/prometheus.md is rendered from its rows, and no row claims "same" unchecked (the
checks themselves run in test_parity.py, against real engines)."""

from __future__ import annotations

from tests.prometheus.parity_checks import Tile, Words
from tests.prometheus.parity_table import DOC, ROWS, checks_of, render, section


def test_the_doc_shows_the_rows_the_parity_test_runs() -> None:
    assert section(DOC.read_text(encoding="utf-8")) == render(), (
        "docs/prometheus.md's parity table is stale: python -m tests.prometheus.parity_table"
    )


def test_a_row_that_claims_same_carries_its_checks() -> None:
    unchecked = [row.feature for row in ROWS if row.claims_same and not row.checks]
    assert not unchecked
    uncompared = [
        row.feature
        for row in ROWS
        if row.claims_same and all(isinstance(c, Tile) and not c.compared for c in row.checks)
    ]
    assert not uncompared  # a tile only shown by both is not "the same"


def test_each_check_is_in_one_row() -> None:
    tiles = [(c.page, c.label) for c in checks_of(Tile)]
    assert len(tiles) == len(set(tiles))
    words = [c.page for c in checks_of(Words)]
    assert len(words) == len(set(words))
