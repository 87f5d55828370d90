"""The Fleet page: one row per server (status, recipe, the fraction, pools, alerts), fleet totals and filters.

What the on-call engineer opens first: trouble sorts to the top, a row opens that server's page.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from views import blocks, data, fleet_frames, links, time_charts
from views.fleet_frames import STATUS_DOWN, STATUS_NO_DATA, STATUS_STALE, STATUS_UP, STATUSES
from views.page_context import PageContext

FLEET_SERIES_POINTS = 150  # per target; the fleet chart sums targets per bucket

# Text, not emoji: a dot renders in every font; the colour comes from the table style.
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


def status_style(badge: object) -> str:
    """CSS for a status cell, e.g. '● down' → bold red."""
    status = str(badge).split(" ", 1)[-1]
    return f"color: {STATUS_COLORS.get(status, '#333')}; font-weight: 600"


def pool_column(label: str, help_text: str, color: str) -> Any:
    """A 0–100 % bar (the table shows usage × 100 so the label reads "98%", not "98.00%")."""
    return st.column_config.ProgressColumn(
        label, format="%.0f%%", min_value=0.0, max_value=100.0, help=help_text, color=color, width="small"
    )


# The on-call engineer's order: health, alerts, load, the fraction, the pools; identity and detail after.
COLUMN_CONFIG = {
    "server": st.column_config.TextColumn("server", pinned=True),
    "status": st.column_config.TextColumn("status", width="small"),
    "firing_alerts": st.column_config.NumberColumn("firing", format="%d", width="small"),
    "running_cap": st.column_config.TextColumn(
        "running / cap", help="running requests / max_running_requests", width="small"
    ),
    "queued": st.column_config.NumberColumn("queued", format="%d", width="small"),
    "accept_length": st.column_config.NumberColumn(
        "accept len", format="%.2f", help="accepted tokens per verify step (the numerator)", width="small"
    ),
    "step_latency_ms": st.column_config.NumberColumn(
        "step (ms)",
        format="%.1f",
        help="accept length × TPOT: wall time of one verify step (the denominator)",
        width="small",
    ),
    "output_tok_s": st.column_config.NumberColumn("output tok/s", format="%.0f", width="small"),
    "state_pool_usage": pool_column("state pool", "SSM state slots in use", "red"),
    "kv_usage": pool_column("KV", "full-attention KV cache in use", "blue"),
    "recipe": st.column_config.TextColumn("recipe", help="recipe_id: a hash of the serving flags"),
    "deployment": st.column_config.TextColumn("deployment", width="small"),
    "avg_context_tokens": st.column_config.NumberColumn("avg context (tok)", format="compact"),
    "alerts": st.column_config.TextColumn("alerts"),
    "last_seen_s": st.column_config.NumberColumn("last seen (s ago)", format="%.0f"),
    "error": st.column_config.TextColumn("last error"),
}


def render(ctx: PageContext) -> None:
    st.title("Fleet", anchor=False)
    st.fragment(run_every=ctx.interval_s)(_live)(ctx)


def load_fleet_table(ctx: PageContext, now_ts: float) -> tuple[pd.DataFrame, data.AlertBoard | None]:
    """The Fleet table as of now (shared with the Capacity page) and the alert board it was joined with."""
    window = ctx.window()
    latest = data.newest_snapshots(ctx.store_path, now_ts, ctx.range_s, ctx.interval_s)
    board = data.alert_board(
        ctx.store_path, data.tick(now_ts, ctx.interval_s), window.start_ts, window.end_ts
    )
    configured = {t.name: t.deployment for t in ctx.config.targets}
    table = fleet_frames.fleet_table(
        latest,
        now_ts=now_ts,
        stale_after_s=ctx.stale_after_s,
        configured=configured,
        firing=data.firing_by_target(board),
    )
    return table, board


def _live(ctx: PageContext) -> None:
    now_ts = ctx.now()
    with blocks.store_errors():
        table, board = load_fleet_table(ctx, now_ts)
        if table.empty:
            blocks.explain_no_samples(ctx, "server has reported")
            return
        newest = table["last_seen_s"].min()
        blocks.freshness(ctx, None if pd.isna(newest) else now_ts - float(newest))
        _banners(table, board is None)
        _totals(fleet_frames.fleet_totals(table))
        shown = _filtered(table)
        _table(shown)
        _fleet_chart(ctx, now_ts)


def _banners(table: pd.DataFrame, no_alert_engine: bool) -> None:
    totals = fleet_frames.fleet_totals(table)
    down = table[table["status"] == STATUS_DOWN]
    if totals.up == 0:
        reasons = "; ".join(
            blocks.plain(f"{server}: {error or 'no answer'}")  # server words, shown as text
            for server, error in zip(table["server"].head(3), table["error"].head(3), strict=True)
        )
        st.error(f"**No server is up** ({totals.servers} known). {reasons}", icon=":material/error:")
    elif not down.empty:
        names = ", ".join(
            blocks.plain(f"{server} ({error or 'down'})")
            for server, error in zip(down["server"].head(5), down["error"].head(5), strict=True)
        )
        more = f" and {len(down) - 5} more" if len(down) > 5 else ""
        st.warning(f"**{len(down)} down:** {names}{more}", icon=":material/warning:")
    if no_alert_engine:
        st.caption("Firing alerts: no alert engine data yet (the column fills once the alert engine runs).")


def _totals(totals: fleet_frames.FleetTotals) -> None:
    row1 = st.columns(4)
    row1[0].metric(
        "Servers up",
        f"{totals.up} / {totals.servers}",
        help="up / known; down, stale (no sample for 3 intervals) and never-seen servers are not up",
        border=True,
    )
    row1[1].metric(
        "Output", blocks.num(totals.output_tok_s, ",.0f", "tok/s"), help="sum over servers up", border=True
    )
    row1[2].metric(
        "Running / cap",
        f"{blocks.num(totals.running, ',.0f')} / {blocks.num(totals.cap, ',.0f')}",
        help="running requests / sum of max_running_requests, servers up",
        border=True,
    )
    row1[3].metric(
        "Queued", blocks.num(totals.queued, ",.0f"), help="requests waiting, servers up", border=True
    )
    row2 = st.columns(4)
    row2[0].metric(
        "Accept length (median)",
        blocks.num(totals.accept_length_median, ".2f", "tok/step"),
        help="numerator: accepted tokens per verify step, median over servers up",
        border=True,
    )
    row2[1].metric(
        "Step latency (median)",
        blocks.num(totals.step_latency_ms_median, ".1f", "ms"),
        help="denominator: accept length × TPOT, median over servers up",
        border=True,
    )
    row2[2].metric(
        "Down / stale",
        f"{totals.down} / {totals.stale + totals.no_data}",
        help="down: the last scrape failed; stale: no sample for 3 intervals (or never)",
        border=True,
    )
    row2[3].metric("Firing alerts", str(totals.firing_alerts), border=True)


def _filtered(table: pd.DataFrame) -> pd.DataFrame:
    left, middle, right = st.columns(3)
    deployments = left.multiselect(
        "Deployment", sorted(d for d in table["deployment"].unique() if d), key="fleet_deployment"
    )
    recipes = middle.multiselect(
        "Recipe", sorted(r for r in table["recipe"].unique() if r), key="fleet_recipe"
    )
    statuses = right.multiselect(
        "Status", [s for s in STATUSES if s in set(table["status"])], key="fleet_status"
    )
    return fleet_frames.filter_table(table, deployments=deployments, recipes=recipes, statuses=statuses)


def _table(shown: pd.DataFrame) -> None:
    if shown.empty:
        st.info("No server matches the filters.", icon=":material/filter_alt_off:")
        return
    display = shown.assign(
        status=shown["status"].map(STATUS_BADGES),
        state_pool_usage=shown["state_pool_usage"] * 100.0,
        kv_usage=shown["kv_usage"] * 100.0,
    ).reset_index(drop=True)
    st.caption(f"{len(shown)} server(s) · select a row to open its page")
    event = st.dataframe(
        display.style.map(status_style, subset=["status"]),
        column_config=COLUMN_CONFIG,
        column_order=list(COLUMN_CONFIG),
        hide_index=True,
        placeholder=blocks.DASH,
        width="stretch",
        height=min(38 + 35 * len(display), 600),
        on_select="rerun",
        selection_mode="single-row",
        key="fleet_table",
    )
    rows = event.selection.rows if event is not None else []
    if rows:
        links.open_server(str(display.iloc[rows[0]]["server"]))
    choice = st.selectbox(
        "Open a server's page", list(shown["server"]), index=None, placeholder="server name", key="fleet_open"
    )
    if choice:
        links.open_server(str(choice))


def _fleet_chart(ctx: PageContext, now_ts: float) -> None:
    window, history = data.fleet_samples(
        ctx.store_path, now_ts, ctx.range_s, ctx.interval_s, FLEET_SERIES_POINTS
    )
    if history.empty:
        return
    series = fleet_frames.fleet_series(history, window.start_ts, window.duration_s / FLEET_SERIES_POINTS)
    st.subheader(f"Fleet output, last {ctx.range_label}", anchor=False)
    st.altair_chart(time_charts.fleet_output_chart(series), width="stretch")
