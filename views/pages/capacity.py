"""The Capacity page: per server, the state pool beside the KV pool, running vs cap, queue and TTFT, and a
verdict in words — which pool binds and what would (and would not) help.

The verdict (``analysis.capacity``) judges by the alert rules' own levels
(``alerts.rules.capacity_thresholds``, config overrides included), so the page says a pool binds exactly
where its alert would fire.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from alerts.rules import capacity_thresholds
from analysis import saturation, scaling
from analysis.advice_inputs import ADVICE_STEP_S
from analysis.capacity import CapacityThresholds, capacity_frame, fleet_verdict
from analysis.fraction import MIN_SAMPLES
from collectors.slo import Slo, build_slos
from config import ConfigError
from views import (
    advice_frames,
    analysis_charts,
    blocks,
    chart_style,
    data,
    energy,
    formatting,
    refresh,
    time_charts,
)
from views.fleet_frames import STATUS_UP
from views.page_context import MAX_POINTS_PER_SERIES, PageContext

TOP_SERVERS = 20  # the side-by-side bars show the most loaded servers; the scatter shows all
ATTENTION_LIST = 8  # per-server verdicts spelled out for the first few servers that bind

COLUMN_CONFIG = {
    "server": st.column_config.TextColumn("server", pinned=True),
    "binding": st.column_config.TextColumn("binds", help="the pool (or cap) that stops admission"),
    "state_pool_usage": blocks.pool_column("state pool", "SSM state slots in use", "red"),
    "kv_usage": blocks.pool_column("KV", "full-attention KV cache in use", "blue"),
    "running_cap": st.column_config.TextColumn("running / cap"),
    "queued": st.column_config.NumberColumn("queued", format="%d"),
    "ttft_s": st.column_config.NumberColumn("TTFT (s)", format="%.2f"),
    "cache_hit_rate": st.column_config.NumberColumn("prefix hit", format="percent"),
    "recipe": st.column_config.TextColumn("recipe"),
    "headline": st.column_config.TextColumn(
        "verdict", width="large", help="the full advice is in the list above"
    ),
}
BINDING_ORDER = {
    "state pool": 0,
    "KV cache": 1,
    "request cap": 2,
    "near": 3,
    "admission": 4,
    "none": 5,
    "unknown": 6,
}


def render(ctx: PageContext) -> None:
    st.title("Capacity", anchor=False)
    st.caption(
        "A speculative request on this hybrid model keeps γ+1 recurrent states where a plain one keeps one, "
        "so the state pool fills long before the KV cache. SGLang's `token_usage` is the max of the pools "
        "and hides which binds; here they stand side by side."
    )
    thresholds = rule_thresholds(ctx)
    st.caption(levels_caption(thresholds))
    # The advice is for a whole minute (and read in the background): its panel reruns once a minute.
    st.fragment(run_every=max(ctx.interval_s, ADVICE_STEP_S))(_advice)(ctx, thresholds)
    refresh.live_panel(ctx, _live, thresholds)
    with blocks.store_errors():
        _scaling(ctx)


def rule_thresholds(ctx: PageContext) -> CapacityThresholds:
    """The alert rules' levels as configured; their defaults, said on the page, when that config is bad."""
    try:
        return capacity_thresholds(ctx.config.alerts.rules, "the config")
    except ConfigError as exc:
        st.warning(
            f"**The alert rules' settings cannot be read**, so this page judges by their defaults: "
            f"{formatting.plain(str(exc))}",
            icon=":material/settings_alert:",
        )
        return capacity_thresholds()


def levels_caption(t: CapacityThresholds) -> str:
    """Where the verdict's words come from: the alert rules' settings, named so a reader can change them."""
    return (
        f"A pool **binds** where its alert fires: state pool at {t.state_pool_binds_at:.0%} "
        f"(`StatePoolSaturation.fire_at`, paging once {t.min_queued:g}+ requests queue), KV at "
        f"{t.kv_binds_at:.0%} (`KVPoolSaturation.fire_at`). It is **near** binding from where a firing alert "
        f"recovers: {t.state_pool_near_at:.0%} and {t.kv_near_at:.0%} (`recover_below`). The radix cache is "
        f"**wasted** below a {t.radix_max_hit_rate:.0%} prefix hit rate with the state pool at "
        f"{t.radix_state_pool_at:.0%}+ (`RadixCacheWaste.max_hit_rate`, `state_pool_at`). Change them under "
        "`alerts.rules` in the config: this page and the alerts read the same settings."
    )


def _advice(ctx: PageContext, thresholds: CapacityThresholds) -> None:
    """Servers needed per deployment, now and at the next 24 h's peak, with the reason (what
    ``specwatch capacity`` prints)."""
    st.subheader("Servers needed per deployment", anchor=False)
    slos: tuple[Slo, ...] = ()
    try:
        slos = build_slos(ctx.config, "the config")
    except ConfigError as exc:
        st.warning(
            f"**The SLOs cannot be read**, so the advice ignores them: {formatting.plain(str(exc))}",
            icon=":material/settings_alert:",
        )
    configured = {t.name: t.labels.get("deployment", "") for t in ctx.config.targets}
    with blocks.store_errors():
        report = data.capacity_advice_report(ctx.reads, thresholds, configured, ctx.stale_after_s, slos)
        if not report.advice:
            st.info(
                "No deployment to advise on: no target reported in the last 6 h and none is configured.",
                icon=":material/dns:",
            )
            return
        st.caption(advice_frames.policy_caption(report.now_ts))
        st.dataframe(
            advice_frames.advice_frame(report.advice),
            column_config=advice_frames.ADVICE_COLUMNS,
            column_order=list(advice_frames.ADVICE_COLUMNS),
            hide_index=True,
            placeholder=formatting.DASH,
            width="stretch",
            key="capacity_advice",
        )
        st.markdown("\n".join(f"- {formatting.plain(item.reason)}" for item in report.advice))


def _live(ctx: PageContext, thresholds: CapacityThresholds) -> None:
    now_ts = ctx.now()
    with blocks.store_errors():
        table, _ = blocks.load_fleet_table(ctx, now_ts)
        if table.empty:
            blocks.explain_no_samples(ctx, "server has reported")
            return
        capacity = capacity_frame(table, data.recipes(ctx.reads), thresholds)
        live = capacity[capacity["status"] == STATUS_UP]
        with st.container(border=True):
            st.markdown("#### Verdict")
            for line in fleet_verdict(capacity, thresholds):
                st.markdown(line)
        if live.empty:
            return
        tiles = st.columns(5)
        tiles[0].metric(
            "State pool binds", f"{(live['binding'] == 'state pool').sum()} / {len(live)}", border=True
        )
        tiles[1].metric("KV binds", f"{(live['binding'] == 'KV cache').sum()} / {len(live)}", border=True)
        tiles[2].metric("State pool (median)", formatting.pct(live["state_pool_usage"].median()), border=True)
        tiles[3].metric("KV (median)", formatting.pct(live["kv_usage"].median()), border=True)
        tiles[4].metric("TTFT (median)", formatting.num(live["ttft_s"].median(), ".2f", "s"), border=True)
        left, right = st.columns(2)
        with left:
            st.markdown("**State pool vs KV, every server**")
            st.altair_chart(
                analysis_charts.pools_scatter(live, thresholds.state_pool_binds_at, thresholds.kv_binds_at),
                width="stretch",
            )
        with right:
            loaded = live.assign(_load=live[["state_pool_usage", "kv_usage"]].max(axis=1))
            top = loaded.sort_values("_load", ascending=False).head(TOP_SERVERS)
            st.markdown(f"**Side by side, the {len(top)} most loaded**")
            st.altair_chart(analysis_charts.pools_bars(top), width="stretch")
        _attention(capacity)
        _saturation(ctx, now_ts, thresholds)
        energy.capacity_block(ctx, table)
        st.dataframe(
            capacity.assign(
                _order=capacity["binding"].map(BINDING_ORDER),
                state_pool_usage=capacity["state_pool_usage"] * 100.0,
                kv_usage=capacity["kv_usage"] * 100.0,
            )
            .sort_values(["_order", "state_pool_usage"], ascending=[True, False])
            .drop(columns="_order"),
            column_config=COLUMN_CONFIG,
            column_order=list(COLUMN_CONFIG),
            hide_index=True,
            placeholder=formatting.DASH,
            width="stretch",
            key="capacity_table",
        )
        order = live.assign(_order=live["binding"].map(BINDING_ORDER)).sort_values(["_order", "server"])
        _detail(ctx, list(order["server"]))  # the first server that binds comes up first


def _attention(capacity: pd.DataFrame) -> None:
    """Spell out the verdict of the first servers that bind (the table holds all of them)."""
    binding = capacity[capacity["binding"].isin(["state pool", "KV cache", "request cap", "admission"])]
    if binding.empty:
        return
    ordered = binding.assign(_order=binding["binding"].map(BINDING_ORDER)).sort_values(["_order", "server"])
    lines = [f"- **{row.server}** — {row.headline}" for row in ordered.head(ATTENTION_LIST).itertuples()]
    more = len(ordered) - ATTENTION_LIST
    if more > 0:
        lines.append(f"- … and {more} more (see the table).")
    with st.expander(
        f"{len(ordered)} server(s) where something binds", expanded=len(ordered) <= ATTENTION_LIST
    ):
        st.markdown("\n".join(lines))


def _detail(ctx: PageContext, servers: list[str]) -> None:
    target = st.selectbox("Pools over time for", servers, key="capacity_server")
    if target is None:
        return
    window = ctx.window()
    history = data.samples(ctx.reads, window.start_ts, window.end_ts, (target,), MAX_POINTS_PER_SERIES)
    if history.empty:
        return
    left, middle, right = st.columns(3)
    with left:
        st.altair_chart(
            time_charts.multi_line_chart(
                history,
                {"state_pool_usage": "state pool (SSM)", "kv_usage": "KV cache"},
                "pool usage (%)",
                y_format="%",
                colors=chart_style.POOL_COLORS,
                y_domain=(0.0, 1.0),
            ),
            width="stretch",
        )
    with middle:
        st.altair_chart(
            time_charts.multi_line_chart(
                history,
                {"running": "running", "max_running": "cap", "queued": "queued"},
                "requests",
                dashed=["cap"],
                colors={"running": "#4c78a8", "cap": "#888888", "queued": "#e45756"},
            ),
            width="stretch",
        )
    with right:
        st.altair_chart(
            time_charts.line_chart(history, "ttft_s", "TTFT (s)", color="#b279a2"), width="stretch"
        )


def _scaling(ctx: PageContext) -> None:
    """The scaling curve per recipe and context bin from history, its knee and the verdict in words."""
    st.subheader(f"Scaling curve, last {ctx.range_label}", anchor=False)
    st.caption(
        "Per recipe at one context bin: throughput (running × accept length ÷ step latency) and per-request "
        "rate against running requests, with TTFT and TPOT at each level. The knee is where the gain per "
        "added request falls the most (the curve bends hardest)."
    )
    _, usable = blocks.analysis_history(ctx)
    curves = (
        {
            (str(recipe), str(context)): scaling.scaling_curve(rows)
            for (recipe, context), rows in usable.groupby(["recipe", "context_bin"])
        }
        if not usable.empty
        else {}
    )
    shown = {key: curve for key, curve in curves.items() if len(curve) >= scaling.MIN_LEVELS}
    if not shown:
        most = max((len(c) for c in curves.values()), default=0)
        st.info(
            f"No recipe ran at {scaling.MIN_LEVELS}+ concurrency levels "
            f"({MIN_SAMPLES}+ samples each) at one context in the last {ctx.range_label} "
            f"(the most: {most}). Pick a longer range.",
            icon=":material/show_chart:",
        )
        return
    ranked = sorted(shown, key=lambda k: (-len(shown[k]), -int(shown[k]["samples"].sum())))
    recipe, context = (
        st.selectbox(
            "Recipe and context",
            ranked,
            format_func=lambda k: f"{k[0]} · context {k[1]} · {len(shown[k])} levels",
            key="capacity_scaling",
        )
        or ranked[0]
    )
    curve = shown[(recipe, context)]
    knee = scaling.find_knee(curve)
    st.markdown(scaling.knee_verdict(curve, knee))
    knee_running = None if knee is None else knee.running
    left, right = st.columns(2)
    with left:
        st.altair_chart(
            analysis_charts.scaling_chart(
                curve, "modelled_output_tok_s", "throughput (tok/s, modelled)", knee_running
            ),
            width="stretch",
        )
    with right:
        st.altair_chart(
            analysis_charts.scaling_chart(curve, "per_request_tok_s", "per-request (tok/s)", knee_running),
            width="stretch",
        )
    st.dataframe(
        curve.assign(ttft_ms=curve["ttft_s"] * 1000.0, tpot_ms=curve["tpot_s"] * 1000.0),
        column_config=SCALING_COLUMNS,
        column_order=list(SCALING_COLUMNS),
        hide_index=True,
        placeholder=formatting.DASH,
        key="capacity_scaling_table",
    )


SCALING_COLUMNS = {
    "concurrency": st.column_config.TextColumn("bin", pinned=True),
    "running": st.column_config.NumberColumn("running (median)", format="%.0f"),
    "modelled_output_tok_s": st.column_config.NumberColumn(
        "throughput (tok/s, modelled)", format="%.0f", help="running × accept length ÷ step latency"
    ),
    "per_request_tok_s": st.column_config.NumberColumn("per request (tok/s)", format="%.1f"),
    "ttft_ms": st.column_config.NumberColumn("TTFT (ms, median)", format="%.0f"),
    "tpot_ms": st.column_config.NumberColumn("TPOT (ms, median)", format="%.2f"),
    "samples": st.column_config.NumberColumn("samples", format="%d"),
}


def _saturation(ctx: PageContext, now_ts: float, thresholds: CapacityThresholds) -> None:
    """When each pool binds at the trend of the last 30 minutes (servers whose pools are rising first)."""
    # A point a minute: the 1 min tier, however many servers (a straight line needs no more, and a raw
    # window of 1,000 servers held ~30 MB to be refreshed every interval).
    trend_s = min(ctx.range_s, 3600.0)
    _, history = data.fleet_signals(
        ctx.reads, now_ts, trend_s, ctx.interval_s, int(trend_s // 60.0), saturation.SATURATION_SIGNALS
    )
    found = saturation.time_to_bind(history, thresholds.binds_at(), now_ts)
    frame = saturation.saturation_frame(found)
    soon = frame[frame["binds_in_min"].notna()]
    with st.expander(
        f"Time to saturation: {len(soon)} server(s) bind now or within a day at the last 30 min's trend",
        expanded=False,
    ):
        if frame.empty:
            st.caption("Not enough samples in the last 30 minutes to fit a trend.")
            return
        st.dataframe(
            frame,
            column_config={
                "server": st.column_config.TextColumn("server", pinned=True),
                "binds_first": st.column_config.TextColumn("binds first"),
                "binds_in_min": st.column_config.NumberColumn(
                    "binds in (min)", format="%.0f", help="0: binds now; empty: not rising"
                ),
            },
            hide_index=True,
            placeholder="not rising",
            width="stretch",
            key="capacity_saturation",
        )
