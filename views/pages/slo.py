"""The SLOs page: per SLO and scope, the budget over the period, burn rates per window, what burns and why.

Counts come from the SLO tables the collector's ledger writes (``collectors.store.slo_counts``); the numbers
are ``analysis.slo_report``'s, computed once for every reader (this page, the Fleet status, the CLI and the
ErrorBudgetBurn rule). Unknown stays unknown: no events is never 100 %, an attribution without both halves
measured says why.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from analysis.slo_attribution import ATTRIBUTION_WINDOW_S
from analysis.slo_report import Goodput, SloStatus
from collectors.slo import Slo, build_slos
from config import ConfigError
from views import blocks, data, formatting, links, refresh, slo_frames, time_charts
from views.page_context import PageContext

NO_SLOS = (
    "No SLO is configured. Add a `slos:` list to the config file (latency thresholds must be histogram "
    "bucket boundaries); the collector counts good and total events from its next scrapes, and this page "
    "shows the error budget, burn rates and which half of the fraction burned it."
)
EXAMPLE_YAML = """\
slos:
  - name: ttft-1s
    sli: {kind: ttft, threshold_s: 1}     # time to first token ≤ 1 s
    objective: 0.99
    window: 28d                           # the SLO period (default 28d)
  - name: tpot-40ms
    sli: {kind: tpot, threshold_s: 0.04}  # time per output token ≤ 40 ms
    objective: 0.99
    match: {tier: long-context}           # only these targets (default: the whole fleet)
  - name: availability
    sli: {kind: availability}             # requests not aborted
    objective: 0.999
"""

OVERVIEW_CONFIG = {
    "slo": st.column_config.TextColumn("SLO", pinned=True),
    "scope": st.column_config.TextColumn("scope"),
    "attainment": st.column_config.NumberColumn(
        "attainment", format="%.2f%%", help="good ÷ total events over the period (as much as is stored)"
    ),
    "budget_left": st.column_config.NumberColumn(
        "budget left", format="%.1f%%", help="1 − error ratio ÷ (1 − objective); negative: overspent"
    ),
    "fastest_burn": st.column_config.TextColumn("fastest burn", help="the highest burn rate of 5m … 3d"),
    "burning": st.column_config.TextColumn("burning now", help="severities whose both windows burn now"),
    "firing": st.column_config.TextColumn("firing", help="the alert engine's firing ErrorBudgetBurn alerts"),
}
BURN_CONFIG = {
    "window": st.column_config.TextColumn("window"),
    "burn_rate": st.column_config.NumberColumn(
        "burn rate", format="%.2f×", help="error ratio ÷ (1 − objective): 1× spends the budget in one period"
    ),
    "alert_factor": st.column_config.TextColumn("alert conditions on this window"),
}
CONDITIONS_CONFIG = {
    "severity": st.column_config.TextColumn("severity"),
    "long": st.column_config.TextColumn("long window"),
    "short": st.column_config.TextColumn("short window"),
    "factor": st.column_config.NumberColumn("factor", format="%.3g×"),
    "long_rate": st.column_config.NumberColumn("long burn", format="%.2f×"),
    "short_rate": st.column_config.NumberColumn("short burn", format="%.2f×"),
    "long_events": st.column_config.NumberColumn(
        "events (long)", format="localized", help="the traffic floor: fewer events than min_events never burn"
    ),
    "holds": st.column_config.TextColumn("holds", help="both windows above the factor, enough events"),
}
WORST_CONFIG = {
    "server": st.column_config.TextColumn("server", pinned=True),
    "bad": st.column_config.NumberColumn("bad events", format="localized"),
    "total": st.column_config.NumberColumn("events", format="localized"),
    "attainment": st.column_config.NumberColumn("attainment", format="%.2f%%"),
}


def render(ctx: PageContext) -> None:
    st.title("SLOs", anchor=False)
    try:
        slos = build_slos(ctx.config, "the config")
    except ConfigError as exc:
        st.error(
            f"**The SLOs cannot be read.** {formatting.plain(str(exc))}", icon=":material/settings_alert:"
        )
        return
    if not slos:
        st.info(NO_SLOS, icon=":material/speed:")
        st.code(EXAMPLE_YAML, language="yaml")
        return
    with blocks.store_errors():
        report = data.slo_report(ctx.reads, ctx.now(), ctx.interval_s, slos)
        left, right = st.columns(2)
        name = left.selectbox("SLO", [s.name for s in slos], key=links.SLO_PARAM, bind="query-params")
        slo = next((s for s in slos if s.name == name), slos[0])
        # Labels, not keys, are what a bound selectbox writes to the URL: ?scope=deployment=east.
        scopes = [slo_frames.scope_label(s.scope.key) for s in report.statuses if s.slo.name == slo.name]
        scope = right.selectbox("Scope", scopes, key=links.SCOPE_PARAM, bind="query-params")
        scope_key = slo_frames.scope_key(str(scope or slo_frames.WHOLE_FLEET))
        refresh.live_panel(ctx, _live, slos, slo, scope_key)


def _live(ctx: PageContext, slos: tuple[Slo, ...], slo: Slo, scope_key: str) -> None:
    with blocks.store_errors():
        report = data.slo_report(ctx.reads, ctx.now(), ctx.interval_s, slos)
        if not any(s.period.total > 0 or s.covered_s > 0 for s in report.statuses):
            if data.sample_count(ctx.reads, data.tick(ctx.now(), 30.0)) == 0:
                st.info(blocks.empty_store_message(ctx), icon=":material/inbox:")
            else:
                st.info(_no_events(slos), icon=":material/hourglass_empty:")
            return
        window = ctx.window()  # the Fleet and Alerts pages' key: one alert read per interval for all
        board = data.alert_board(
            ctx.reads, data.tick(ctx.now(), ctx.interval_s), window.start_ts, window.end_ts
        )
        firing = data.firing_slo_alerts(board)
        st.caption(f"Counts up to {pd.Timestamp(report.now_ts, unit='s', tz='UTC'):%H:%M:%S} UTC")
        _overview(report.statuses, firing)
        status = next(
            (s for s in report.statuses if s.slo.name == slo.name and s.scope.key == scope_key), None
        )
        if status is None:
            st.info(f"No events of **{slo.name}** in this scope.", icon=":material/filter_alt_off:")
            return
        goodput = slo_frames.goodput_of(report.goodput, status.scope)
        # No alert engine on this store: what fires is unknown, not "none".
        fires = None if board is None else firing.get((slo.name, scope_key), [])
        _detail(ctx, status, fires, goodput)


def _no_events(slos: tuple[Slo, ...]) -> str:
    names = ", ".join(f"**{s.name}**" for s in slos)
    return (
        f"No SLO events yet for {names}. The collector counts them from its second scrape of each server "
        "(a change between two scrapes), and only on servers that expose the SLI's histogram with the "
        "threshold's bucket (or the request counters, for availability). A dashboard started with "
        "`--no-collector` shows what another collector wrote to the same store."
    )


def _overview(statuses: tuple[SloStatus, ...], firing: dict[tuple[str, str], list[str]]) -> None:
    st.dataframe(
        slo_frames.overview_frame(statuses, firing),
        column_config=OVERVIEW_CONFIG,
        column_order=list(OVERVIEW_CONFIG),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        height=min(38 + 35 * len(statuses), 400),
        key="slo_overview",
    )


def _detail(ctx: PageContext, status: SloStatus, firing: list[str] | None, goodput: Goodput | None) -> None:
    slo = status.slo
    st.subheader(f"{slo.name} · {status.scope.words}", anchor=False)
    st.markdown(
        f"Good events: {formatting.plain(slo.sli.words)}. Objective **{slo_frames.objective_words(slo)}** "
        f"over {slo_frames.duration_words(slo.window_s)}."
    )
    tiles = st.columns(4)
    tiles[0].metric(
        "Attainment", formatting.pct(status.attainment, 2), help="good ÷ total events", border=True
    )
    tiles[1].metric(
        "Error budget left",
        formatting.pct(status.budget_remaining, 1),
        help="1 − error ratio ÷ (1 − objective); negative: overspent",
        border=True,
    )
    tiles[2].metric("Fastest burn", slo_frames.fastest_words(status), border=True)
    tiles[3].metric(
        "Firing",
        formatting.DASH if firing is None else ", ".join(firing) or "none",
        help="the alert engine's firing ErrorBudgetBurn alerts of this SLO and scope (—: no alert engine "
        "has written to this store)",
        border=True,
    )
    st.caption(
        f"Attainment and budget {slo_frames.coverage_words(status)}: {status.period.total:,.0f} events, "
        f"{status.period.bad:,.0f} bad · burning now: {', '.join(status.burning) or 'no condition holds'}."
    )
    window = slo_frames.duration_words(ATTRIBUTION_WINDOW_S)
    words = formatting.plain(slo_frames.attribution_words(status))
    st.markdown(f"**Why it burned (last {window}):** {words}")
    st.markdown(slo_frames.goodput_words(goodput))
    rates, conditions = st.columns([2, 3])
    with rates:
        st.dataframe(
            slo_frames.burn_rate_frame(status),
            column_config=BURN_CONFIG,
            hide_index=True,
            placeholder=formatting.DASH,
            width="stretch",
            key="slo_burn_rates",
        )
    with conditions:
        st.dataframe(
            slo_frames.conditions_frame(status),
            column_config=CONDITIONS_CONFIG,
            hide_index=True,
            placeholder=formatting.DASH,
            width="stretch",
            key="slo_conditions",
        )
    _worst(status)
    _burn_down(ctx, status)


def _worst(status: SloStatus) -> None:
    st.subheader("Servers that burned most, last hour", anchor=False)
    if not status.worst_targets:
        if not status.burn_rates.get("1h"):
            st.caption("No server served a bad event in the last hour.")
        else:  # the collector writes the servers' own counts once a minute
            st.caption(
                "Bad events in the last hour, but no server's own counts stored yet: they are written once a "
                "minute."
            )
        return
    st.dataframe(
        slo_frames.worst_frame(status.worst_targets),
        column_config=WORST_CONFIG,
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        key="slo_worst",
    )
    st.caption("Per-server counts are written once a minute.")
    cells = st.columns(min(len(status.worst_targets), 5))
    for cell, (target, _) in zip(cells, status.worst_targets, strict=False):
        with cell:
            links.server_link(target)


def _burn_down(ctx: PageContext, status: SloStatus) -> None:
    slo = status.slo
    end_ts = data.slo_now(ctx.now(), ctx.interval_s)
    start_ts = end_ts - slo.window_s
    st.subheader(f"Error budget over the period ({slo_frames.duration_words(slo.window_s)})", anchor=False)
    minutes = data.slo_minutes(ctx.reads, slo.name, status.scope.key, start_ts, end_ts + 1.0)
    frame = slo_frames.burn_down_frame(minutes, slo.objective)
    if frame.empty:
        st.info("No events in this period yet, so no budget spent.", icon=":material/timeline:")
        return
    # From the first stored minute (a 28-day axis would squash a fresh store), but at least an hour: a
    # store a minute old must not label every tick with the same HH:MM.
    first = max(start_ts, min(float(minutes[0][0]), end_ts - 3600.0))
    st.altair_chart(
        time_charts.budget_burn_down_chart(
            frame, pd.Timestamp(first, unit="s", tz="UTC"), pd.Timestamp(end_ts, unit="s", tz="UTC")
        ),
        width="stretch",
    )
    st.caption(
        f"Budget left counting the period's events up to each minute, {slo_frames.coverage_words(status)}; "
        "the dashed line is an empty budget."
    )
