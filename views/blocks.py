"""Streamlit blocks every page shares: the fleet table as of now, status badges, pool columns, empty states
and store errors (pages import these, never each other; words and numbers come from ``views.formatting``).

Every empty or failing case ends in a sentence that says what is missing and what to check, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
import streamlit as st

from analysis import sample_bins
from collectors.errors import CollectorError
from views import data
from views.chart_style import TopChart
from views.fleet_frames import STATUS_DOWN, STATUS_NO_DATA, STATUS_STALE, STATUS_UP
from views.formatting import format_age
from views.page_context import PageContext, TimeWindow


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


# Per target: enough samples to separate context and concurrency bins ...
ANALYSIS_POINTS = 300
# ... and per read, whatever the fleet: beyond ~330 servers each gets fewer points (100 at 1,000), coarser
# buckets from a coarser tier. Every pandas step of the analysis pages copies its frame, so the rows of one
# read set the dashboard's memory (300 k rows: ~30 MB held per range and as much again per filter) and its
# cold time (docs/views.md). Fleet-wide bins keep ~100 k samples.
ANALYSIS_ROWS = 100_000
ANALYSIS_MIN_POINTS = 60  # a server's own view (sweep, split in time) still has a few samples per bin


def analysis_points(servers: int) -> int:
    """Points per server of one analysis read of ``servers`` servers (``ANALYSIS_POINTS`` up to
    ``ANALYSIS_ROWS`` in all, never below ``ANALYSIS_MIN_POINTS``)."""
    return max(ANALYSIS_MIN_POINTS, min(ANALYSIS_POINTS, ANALYSIS_ROWS // max(servers, 1)))


def analysis_history(ctx: PageContext) -> tuple[TimeWindow, pd.DataFrame]:
    """The range's samples as the Context, Capacity and Recipes pages analyse them (``sample_bins.prepare``:
    servers up with an accept length, labelled with recipe and bins; ``ANALYSIS_SIGNALS``), at
    ``analysis_points`` per server. One read (same points) and one cache entry serve all three pages; the
    frame is shared, never modify it."""
    now_ts = ctx.now()
    servers = len(data.newest_snapshots(ctx.reads, now_ts, ctx.range_s, ctx.interval_s))
    return data.fleet_signals(
        ctx.reads,
        now_ts,
        ctx.range_s,
        ctx.interval_s,
        analysis_points(servers),
        sample_bins.ANALYSIS_SIGNALS,
        recipes=True,
        prepared=True,
    )


def explain_no_samples(ctx: PageContext, what: str) -> None:
    """The right empty state: empty store vs nothing in the selected range."""
    if data.sample_count(ctx.reads, data.tick(ctx.now(), 30.0)) == 0:
        st.info(empty_store_message(ctx), icon=":material/inbox:")
    else:
        st.info(
            f"No {what} in the last {ctx.range_label}. Pick a longer time range in the sidebar.",
            icon=":material/schedule:",
        )


def freshness(ctx: PageContext, newest_ts: float | None) -> None:
    """One caption line: how fresh the data is (how often it refreshes is said by the live panel,
    ``views.refresh``)."""
    age = None if newest_ts is None else ctx.now() - newest_ts
    st.caption(f"Newest sample {format_age(age)} · history: last {ctx.range_label}")


# Text, not emoji: a dot renders in every font; the colour comes from the label (`status_column`).
STATUS_BADGES = {
    STATUS_UP: "● up",
    STATUS_DOWN: "● down",
    STATUS_STALE: "● stale",
    STATUS_NO_DATA: "○ no data",
}


STATUS_COLORS = {
    STATUS_UP: "#2e7d32",
    STATUS_DOWN: "#c62828",
    STATUS_STALE: "#ef6c00",
    STATUS_NO_DATA: "#757575",
}


def status_column(label: str) -> Any:
    """The status badges as labels in their colours (a read-only multiselect column colours each option)."""
    return st.column_config.MultiselectColumn(
        label,
        options=[STATUS_BADGES[s] for s in STATUS_BADGES],
        color=[STATUS_COLORS[s] for s in STATUS_BADGES],
        pinned=True,
        width=90,
    )


def pool_column(label: str, help_text: str, color: str) -> Any:
    """A 0–100 % bar (the table shows usage × 100 so the label reads "98%", not "98.00%")."""
    return st.column_config.ProgressColumn(
        label, format="%.0f%%", min_value=0.0, max_value=100.0, help=help_text, color=color, width="small"
    )


def load_fleet_table(
    ctx: PageContext, now_ts: float, only: str | None = None
) -> tuple[pd.DataFrame, data.AlertBoard | None]:
    """The Fleet table as of this interval (shared with the Capacity and Server pages, and built once for
    every session: ``data.fleet_now``) and the alert board it was joined with; ``only``: just that server's
    row (the Server page: one row, not 1,000)."""
    configured = {t.name: t.deployment for t in ctx.config.targets}
    fleet = data.fleet_now(
        ctx.reads, now_ts, ctx.range_s, ctx.interval_s, ctx.stale_after_s, configured, only
    )
    return fleet.table, fleet.board


def why_no_values(history: pd.DataFrame, columns: list[str], what: str) -> str | None:
    """Why a chart of ``columns`` over ``history`` (a server's or the fleet's samples) would draw nothing,
    in words; None when it has something to draw."""
    present = [c for c in columns if c in history.columns]
    if present and history[present].notna().to_numpy().any():
        return None
    if history.empty:
        return f"No samples in this range, so no {what} yet."
    up = history["up"].astype(bool) if "up" in history.columns else pd.Series(True, index=history.index)
    if not up.any():
        return f"No {what}: the server was down for the whole range (no scrape succeeded)."
    running = history.loc[up, "running"] if "running" in history.columns else pd.Series(dtype=float)
    if running.fillna(0).le(0).all():
        return f"No {what}: the server was idle (no running requests), so there was nothing to measure."
    if len(history.loc[up]) < 2:
        return f"No {what} yet: it is a rate over two scrapes and only one has arrived."
    return (
        f"No {what}: not measured by this server's SGLang version (its /metrics has no series for it), "
        "although the server was up and busy."
    )


def series_chart(chart: TopChart, history: pd.DataFrame, columns: list[str], what: str) -> None:
    """``chart`` if ``history`` has a value of ``columns`` to draw, else one sentence saying why not."""
    reason = why_no_values(history, columns, what)
    if reason is None:
        st.altair_chart(chart, width="stretch")
    else:
        st.info(reason, icon=":material/timeline:")
