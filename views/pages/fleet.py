"""The Fleet page: one row per server (status, recipe, the fraction, pools, alerts), fleet totals and filters.

What the on-call engineer opens first: trouble sorts to the top, a row opens that server's page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import streamlit as st

from collectors.slo import Slo, build_slos
from config import ConfigError
from views import blocks, data, fleet_frames, formatting, links, refresh, slo_frames, time_charts
from views.fleet_frames import STATUS_DOWN, STATUSES
from views.page_context import PageContext

FLEET_SERIES_POINTS = 150  # per target; the fleet chart sums targets per bucket


# The on-call engineer's order: health and where it runs (pinned or first: a 1500 px screen shows them),
# alerts, load, the fraction, context and the pools; the rest scrolls.
COLUMN_CONFIG = {
    "server": st.column_config.TextColumn("server", pinned=True),
    # Coloured labels drawn by the grid itself: a Styler colouring the same cells re-rendered all 21 × 1,000
    # cells in pandas on every rerun (~0.2 s of CPU per interval at 1,000 servers).
    "status": blocks.status_column("status"),
    "deployment": st.column_config.TextColumn("deployment", width="small"),
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
    "avg_context_tokens": st.column_config.NumberColumn("avg context (tok)", format="compact", width="small"),
    "state_pool_usage": blocks.pool_column("state pool", "SSM state slots in use", "red"),
    "kv_usage": blocks.pool_column("KV", "full-attention KV cache in use", "blue"),
    # Energy and cost: the GPUs' DCGM exporter (targets[].gpu_exporter_url) and cost.gpu_hour_usd.
    "gpu_power_w": st.column_config.NumberColumn(
        "GPU W", format="%.0f", help="the server's GPUs' power (DCGM energy counter's rate)", width="small"
    ),
    "tokens_per_joule": st.column_config.NumberColumn(
        "tok/J", format="%.3f", help="output tokens per joule of GPU energy (0 while idle)", width="small"
    ),
    "usd_per_million_tokens": st.column_config.NumberColumn(
        "$/Mtok",
        format="$%.2f",
        help="cost.gpu_hour_usd × GPUs ÷ output tokens per hour × 1e6 (unknown while idle or unpriced)",
        width="small",
    ),
    "recipe": st.column_config.TextColumn("recipe", help="recipe_id: a hash of the serving flags"),
    "alerts": st.column_config.TextColumn("alerts"),
    "last_seen_s": st.column_config.NumberColumn("last seen (s ago)", format="%.0f"),
    "error": st.column_config.TextColumn("last error"),
}


def render(ctx: PageContext) -> None:
    st.title("Fleet", anchor=False)
    _read_ahead(ctx, _slos(ctx))
    with blocks.store_errors():
        _open_server(ctx)
    refresh.live_panel(ctx, _live)


def _open_server(ctx: PageContext) -> None:
    """Jump to a server's page by name. Drawn when the page opens, not every interval: 1,000 options cost
    every tab ~10 ms a rerun (the table's rows open a server too, and refresh)."""
    table, _ = blocks.load_fleet_table(ctx, ctx.now())
    choice = st.selectbox(
        "Open a server's page",
        list(table["server"]),
        index=None,
        placeholder="server name",
        key="fleet_open",
    )
    if choice:
        links.open_server(str(choice))


def _read_ahead(ctx: PageContext, slos: Sequence[Slo]) -> None:
    """The SLO status's and the chart's reads start now, beside the table's, instead of after it (on the
    fleet's engine a cold page read the three in turn; its chart still waits there for the table's cycle,
    which says which servers decode plainly). Called by the page and by each rerun of its panel: a read
    already under way or cached is not read twice."""
    data.fleet_series_ahead(ctx.reads, ctx.now(), ctx.range_s, ctx.interval_s, FLEET_SERIES_POINTS)
    if slos:
        data.read_ahead(lambda: data.slo_fleet_status(ctx.reads, slos))


def _live(ctx: PageContext) -> None:
    now_ts = ctx.now()
    slos = _slos(ctx)
    _read_ahead(ctx, slos)
    with blocks.store_errors():
        table, board = blocks.load_fleet_table(ctx, now_ts)
        if table.empty:
            blocks.explain_no_samples(ctx, "server has reported")
            return
        newest = table["last_seen_s"].min()
        blocks.freshness(ctx, None if pd.isna(newest) else now_ts - float(newest))
        # Drawn once per interval for every session (data.per_interval), like the reads behind them.
        tick = data.tick(now_ts, ctx.interval_s)
        shared = _shared(ctx.reads, tick, ctx.range_s, table, board)
        _summary(ctx.reads, tick, ctx.range_s, shared)
        with blocks.store_errors():  # an unreadable SLO table must not take the server table with it
            _slo_status(ctx, now_ts, board, slos)
        _table(shared, _filtered(shared))
        _fleet_chart(ctx.reads, tick, ctx.range_s, ctx.range_label, ctx.interval_s, ctx)


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every session's Fleet panel derives from one interval's table (never modified)."""

    table: pd.DataFrame
    display: pd.DataFrame  # the table as drawn: status badges, pools in percent
    arrow: pa.Table  # the same, as Arrow: what st.dataframe sends
    totals: fleet_frames.FleetTotals
    slo_firing: int
    no_alert_engine: bool
    deployments: list[str]
    recipes: list[str]
    statuses: list[str]


@data.per_interval
def _shared(
    reads: data.StoreReader, tick: int, range_s: float, _table: pd.DataFrame, _board: data.AlertBoard | None
) -> _Shared:
    del reads, tick, range_s  # the key: the table and board are that interval's (data.fleet_now)
    display = _display(_table)
    return _Shared(
        table=_table,
        display=display,
        arrow=pa.Table.from_pandas(display, preserve_index=False),
        totals=fleet_frames.fleet_totals(_table),
        slo_firing=sum(len(found) for found in data.firing_slo_alerts(_board).values()),
        no_alert_engine=_board is None,
        deployments=sorted(d for d in _table["deployment"].unique() if d),
        recipes=sorted(r for r in _table["recipe"].unique() if r),
        statuses=[s for s in STATUSES if s in set(_table["status"])],
    )


def _display(table: pd.DataFrame) -> pd.DataFrame:
    return table.assign(
        status=table["status"].map(blocks.STATUS_BADGES),
        state_pool_usage=table["state_pool_usage"] * 100.0,
        kv_usage=table["kv_usage"] * 100.0,
    ).reset_index(drop=True)


@data.per_interval
def _summary(reads: data.StoreReader, tick: int, range_s: float, _shared: _Shared) -> None:
    """The banners and the totals' tiles, drawn once per interval and replayed to every session."""
    del reads, tick, range_s
    _banners(_shared.table, _shared.totals, _shared.no_alert_engine)
    _totals(_shared.totals, _shared.slo_firing)


def _banners(table: pd.DataFrame, totals: fleet_frames.FleetTotals, no_alert_engine: bool) -> None:
    down = table[table["status"] == STATUS_DOWN]
    if totals.up == 0:
        reasons = "; ".join(
            formatting.plain(f"{server}: {error or 'no answer'}")  # server words, shown as text
            for server, error in zip(table["server"].head(3), table["error"].head(3), strict=True)
        )
        st.error(f"**No server is up** ({totals.servers} known). {reasons}", icon=":material/error:")
    elif not down.empty:
        names = ", ".join(
            formatting.plain(f"{server} ({error or 'down'})")
            for server, error in zip(down["server"].head(5), down["error"].head(5), strict=True)
        )
        more = f" and {len(down) - 5} more" if len(down) > 5 else ""
        st.warning(f"**{len(down)} down:** {names}{more}", icon=":material/warning:")
    if no_alert_engine:
        st.caption("Firing alerts: no alert engine data yet (the column fills once the alert engine runs).")


def _totals(totals: fleet_frames.FleetTotals, slo_firing: int = 0) -> None:
    row1 = st.columns(4)
    row1[0].metric(
        "Servers up",
        f"{totals.up} / {totals.servers}",
        help="up / known; down, stale (no sample for 3 intervals) and never-seen servers are not up",
        border=True,
    )
    row1[1].metric(
        "Output",
        formatting.num(totals.output_tok_s, ",.0f", "tok/s"),
        help="sum over servers up",
        border=True,
    )
    row1[2].metric(
        "Running / cap",
        f"{formatting.num(totals.running, ',.0f')} / {formatting.num(totals.cap, ',.0f')}",
        help="running requests / sum of max_running_requests, servers up",
        border=True,
    )
    row1[3].metric(
        "Queued", formatting.num(totals.queued, ",.0f"), help="requests waiting, servers up", border=True
    )
    row2 = st.columns(4)
    row2[0].metric(
        "Accept length (median)",
        # Bare, as SGLang's logs print "accept len": "2.47 tok/step" does not fit a quarter-width tile and
        # was cut to "2.47 tok/s…", a wrong unit.
        formatting.num(totals.accept_length_median, ".2f"),
        help="numerator: accepted tokens per verify step (tok/step), median over servers up",
        border=True,
    )
    row2[1].metric(
        "Step latency (median)",
        formatting.num(totals.step_latency_ms_median, ".1f", "ms"),
        help="denominator: accept length × TPOT, median over servers up",
        border=True,
    )
    row2[2].metric(
        "Down / stale",
        f"{totals.down} / {totals.stale + totals.no_data}",
        help="down: the last scrape failed; stale: no sample for 3 intervals (or never)",
        border=True,
    )
    # Every firing alert: the servers' and the SLOs' (ErrorBudgetBurn is about a scope, not a server, so the
    # server table's column never counts it; a tile of 0 beside a paging SLO would read as all clear).
    row2[3].metric(
        "Firing alerts",
        str(totals.firing_alerts + slo_firing),
        help=f"{totals.firing_alerts} on servers, {slo_firing} on SLOs (ErrorBudgetBurn, per scope)",
        border=True,
    )


SLO_STATUS_CONFIG = {
    "slo": st.column_config.TextColumn("SLO", pinned=True),
    "scope": st.column_config.TextColumn("scope"),
    "budget_left": st.column_config.NumberColumn(
        "budget left", format="%.1f%%", help="of the period's error budget; negative: overspent"
    ),
    "fastest_burn": st.column_config.TextColumn("fastest burn", help="the highest burn rate of 5m … 3d"),
    "burning": st.column_config.TextColumn("burning now", help="severities whose both windows burn now"),
    "firing": st.column_config.TextColumn("firing", help="firing ErrorBudgetBurn alerts"),
}


def _slos(ctx: PageContext) -> tuple[Slo, ...]:
    """The configured SLOs; none when there are none or they are wrong (the SLO page shows the error)."""
    try:
        return build_slos(ctx.config, "the config")
    except ConfigError:
        return ()


def _slo_status(ctx: PageContext, now_ts: float, board: data.AlertBoard | None, slos: Sequence[Slo]) -> None:
    """Per SLO and deployment: budget left, fastest burn, burning and firing; a row opens it on the SLO
    page. Nothing when no SLO is configured (the SLO page says how)."""
    if not slos:
        return
    report = data.slo_fleet_status(ctx.reads, slos)
    frame = slo_frames.trouble_first(
        slo_frames.overview_frame(report.statuses, data.firing_slo_alerts(board))
    )
    st.caption(
        f"Service-level objectives as of {formatting.format_age(now_ts - report.now_ts)} "
        "(refreshed every minute) · select a row to open it on the SLO page"
    )
    event = st.dataframe(
        frame,
        column_config=SLO_STATUS_CONFIG,
        column_order=list(SLO_STATUS_CONFIG),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        height=min(38 + 35 * len(frame), 216),  # five rows, trouble first; the rest scrolls
        on_select="rerun",
        selection_mode="single-row",
        key="fleet_slos",
    )
    rows = event.selection.rows if event is not None else []
    if rows:
        chosen = frame.iloc[rows[0]]
        links.open_slo(str(chosen["slo"]), slo_frames.scope_label(str(chosen["scope_key"])))
    links.slo_link("SLO details: budget burn-down, burn rates, why it burned")


def _filtered(shared: _Shared) -> pd.DataFrame | None:
    """The rows the filters keep, or None when no filter is set (the whole table, as shared)."""
    left, middle, right = st.columns(3)
    deployments = left.multiselect("Deployment", shared.deployments, key="fleet_deployment")
    recipes = middle.multiselect("Recipe", shared.recipes, key="fleet_recipe")
    statuses = right.multiselect("Status", shared.statuses, key="fleet_status")
    if not (deployments or recipes or statuses):
        return None
    return fleet_frames.filter_table(
        shared.table, deployments=deployments, recipes=recipes, statuses=statuses
    )


def _table(shared: _Shared, shown: pd.DataFrame | None) -> None:
    if shown is not None and shown.empty:
        st.info("No server matches the filters.", icon=":material/filter_alt_off:")
        return
    display = shared.display if shown is None else _display(shown)
    st.caption(f"{len(display)} server(s) · select a row to open its page")
    event = st.dataframe(
        shared.arrow if shown is None else display,  # Arrow built once per interval, not per tab
        column_config=COLUMN_CONFIG,
        column_order=list(COLUMN_CONFIG),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        height=min(38 + 35 * len(display), 600),
        on_select="rerun",
        selection_mode="single-row",
        key="fleet_table",
    )
    rows = event.selection.rows if event is not None else []
    if rows:
        links.open_server(str(display.iloc[rows[0]]["server"]))


@data.per_interval
def _fleet_chart(
    reads: data.StoreReader, tick: int, range_s: float, range_label: str, interval_s: float, _ctx: PageContext
) -> None:
    """Fleet output over the range, drawn once per interval and replayed to every session."""
    now_ts = _ctx.now()
    found = data.fleet_series(reads, now_ts, range_s, interval_s, FLEET_SERIES_POINTS)
    st.subheader(f"Fleet output, last {range_label}", anchor=False)
    if math.isnan(found.first_ts):
        blocks.explain_no_samples(_ctx, "samples")
        return
    if found.series["output_tok_s"].notna().any():
        st.altair_chart(time_charts.fleet_output_chart(found.series), width="stretch")
        return
    first_age = formatting.format_age(now_ts - found.first_ts)
    st.info(
        f"No output measured yet: output tok/s is a rate between two scrapes of a server that is up; "
        f"the first scrape in this range was {first_age}.",
        icon=":material/timeline:",
    )
