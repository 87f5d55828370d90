"""Small streamlit building blocks shared by the pages: number formatting, empty states, store errors.

Every empty or failing case ends in a sentence that says what is missing and what to check, never a traceback.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from collectors.errors import CollectorError
from views import data
from views.page_context import PageContext, format_age

DASH = "—"

# Markdown that text from a server (an error's reason phrase, a quoted line) could use to draw links, images
# (a request to any host from every viewer's browser), HTML, math or Streamlit's colour directives.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#!|~$])")


def plain(text: str) -> str:
    """``text`` as literal characters inside st.markdown/st.error/...: every markup character is escaped and
    newlines become spaces, so a server's words are shown, never interpreted."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text.replace("\r", " ").replace("\n", " "))


def num(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    """Format a number for a metric tile; unknown (None / NaN) becomes an em dash, never 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    text = format(value, spec)
    return f"{text} {unit}".rstrip() if unit else text


def pct(value: float | None, digits: int = 0) -> str:
    return num(None if value is None else value * 100.0, f".{digits}f", "%")


@contextmanager
def store_errors() -> Iterator[None]:
    """Show a failing history read as one sentence, not a traceback (the rest of the page still draws)."""
    try:
        yield
    except CollectorError as exc:
        st.error(f"Cannot read history: {exc}", icon=":material/database:")


def empty_store_message(ctx: PageContext) -> str:
    return (
        f"The history store `{ctx.store_path}` is empty: no collector has written to it yet. "
        "Start specwatch with targets (or `sim:`) in its config, or point `store.path` at a collector's file."
    )


def explain_no_samples(ctx: PageContext, what: str) -> None:
    """The right empty state: empty store vs nothing in the selected range."""
    if data.sample_count(ctx.store_path, data.tick(ctx.now(), 30.0)) == 0:
        st.info(empty_store_message(ctx), icon=":material/inbox:")
    else:
        st.info(
            f"No {what} in the last {ctx.range_label}. Pick a longer time range in the sidebar.",
            icon=":material/schedule:",
        )


def freshness(ctx: PageContext, newest_ts: float | None) -> None:
    """One caption line: how fresh the data is and how often it refreshes."""
    age = None if newest_ts is None else ctx.now() - newest_ts
    st.caption(
        f"Newest sample {format_age(age)} · refreshes every {ctx.interval_s:g} s · "
        f"history: last {ctx.range_label}"
    )
