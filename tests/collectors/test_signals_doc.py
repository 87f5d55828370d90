"""The docs' signal tables are the catalogue's: a changed catalogue entry with an unchanged doc fails here."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from collectors.signals import BY_NAME, SIGNALS, Family, First, Gauge, Positive, Rate, Signal, Unless, Zero
from collectors.signals_doc import ROOT, SECTIONS, notation, stale_sections, write_sections

GENERATION = Family("generation_tokens_total", "counter", "0.3.6", at_completion=True)
RUNNING = Family("num_running_reqs", "gauge", "0.3.6")


def _changed(name: str, **changes: object) -> tuple[Signal, ...]:
    """The catalogue with one entry changed."""
    return tuple(dataclasses.replace(s, **changes) if s.name == name else s for s in SIGNALS)  # type: ignore[arg-type]


# Throughput from the completion counter again (what the catalogue stopped using): one entry's expression.
COMPLETION_THROUGHPUT = _changed(
    "output_tok_s", expr=First((Positive(Rate(GENERATION)), Zero(Gauge(RUNNING))))
)


def test_the_docs_carry_the_current_catalogue() -> None:
    assert stale_sections() == [], "run `python -m collectors.signals_doc` and commit the docs"


@pytest.mark.parametrize(
    ("signals", "stale"),
    [
        (COMPLETION_THROUGHPUT, ["docs/collectors.md: signal-table", "docs/collectors.md: signal-families"]),
        (
            _changed("kv_usage", help="Full-attention KV pool in use, 0-100."),
            ["docs/collectors.md: signal-table", "docs/prometheus.md: signal-recordings"],
        ),
        (_changed("state_pool_usage", unknown="never"), ["docs/collectors.md: signal-table"]),
        (
            _changed("ttft_s", record="instance_job:sglang_ttft:mean{w}"),
            ["docs/prometheus.md: signal-recordings"],
        ),
    ],
    ids=["expression", "help", "unknown", "record"],
)
def test_a_changed_catalogue_entry_leaves_the_docs_stale(
    signals: tuple[Signal, ...], stale: list[str]
) -> None:
    assert stale_sections(signals=signals) == stale


def test_rewriting_brings_the_docs_level_with_a_changed_catalogue(tmp_path: Path) -> None:
    for doc in {section.doc for section in SECTIONS}:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    stale = stale_sections(tmp_path, COMPLETION_THROUGHPUT)
    assert write_sections(tmp_path, COMPLETION_THROUGHPUT) == stale != []
    assert stale_sections(tmp_path, COMPLETION_THROUGHPUT) == []
    text = (tmp_path / "docs/collectors.md").read_text(encoding="utf-8")
    assert "`rate(generation_tokens_total) > 0 or num_running_reqs == 0`" in text
    assert notation(BY_NAME["output_tok_s"].expr) not in text  # type: ignore[arg-type]
    assert "## Recipes" in text  # the prose around the tables is kept


def test_the_notation_keeps_guards_apart_from_fallbacks() -> None:
    assert notation(BY_NAME["tpot_s"].expr) == "mean(inter_token_latency_seconds)"  # type: ignore[arg-type]
    assert notation(BY_NAME["step_latency_s"].expr) == "accept_length × tpot_s"  # type: ignore[arg-type]
    guarded = First((Unless(Positive(Gauge(RUNNING)), Gauge(GENERATION)), Gauge(RUNNING)))
    assert notation(guarded) == "(num_running_reqs > 0 unless generation_tokens_total) or num_running_reqs"
