"""The Server page: one server's fraction over time — accept length, step latency, their ratio — and its load.

Also TPOT, TTFT, running vs cap, queue, state pool vs KV, with restarts, recipe changes and alert transitions
drawn as markers on every chart.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from analysis.fraction import measured_tok_s_per_request
from views import blocks, chart_style, data, energy, formatting, links, refresh, time_charts
from views import probes as probe_views
from views.fleet_frames import STATUS_UP
from views.page_context import MAX_POINTS_PER_SERIES, PageContext, TimeWindow


def render(ctx: PageContext) -> None:
    st.title("Server", anchor=False)
    now_ts = ctx.now()
    with blocks.store_errors():
        known = _known_targets(ctx, now_ts)
        if not known:
            blocks.explain_no_samples(ctx, "server has reported")
            return
        target = st.selectbox("Server", known, key=links.SERVER_PARAM, bind="query-params")
        if target is None:
            return
        refresh.live_panel(ctx, _live, str(target))


def _known_targets(ctx: PageContext, now_ts: float) -> list[str]:
    latest = data.newest_snapshots(ctx.reads, now_ts, ctx.range_s, ctx.interval_s)
    return sorted(set(latest["target"]) | {t.name for t in ctx.config.targets})


def _live(ctx: PageContext, target: str) -> None:
    now_ts = ctx.now()
    with blocks.store_errors():
        table, board = blocks.load_fleet_table(ctx, now_ts, only=target)
        rows = table[table["server"] == target]
        if rows.empty:
            st.info(
                f"No sample from **{formatting.plain(target)}** in the last {ctx.range_label}.",
                icon=":material/schedule:",
            )
            return
        row = rows.iloc[0]
        _header(ctx, row)
        # The charts are drawn once per window (ctx.window: its end moves by one chart step, 58 s at 24 h and
        # 6.7 min at 7 d), not once per interval: the samples they draw are read per window, so between two
        # steps a redraw is the same picture. A new alert transition of this server redraws them at once.
        window = ctx.window()
        if _history(ctx.reads, window.end_ts, target, ctx.range_key, _transitions(board, target), board, ctx):
            _recipe(ctx, str(row["recipe"]))
            probe_views.server_block(ctx, target)


def _transitions(board: data.AlertBoard | None, target: str) -> tuple[tuple[object, ...], ...]:
    """This server's alert transitions on the board (what its charts mark), as a cache key."""
    if board is None or board.transitions.empty:
        return ()
    mine = board.transitions[board.transitions["target"] == target]
    return tuple(mine[["time", "rule", "kind"]].itertuples(index=False, name=None))


@data.per_interval
def _history(
    reads: data.StoreReader,
    window_end_ts: float,
    target: str,
    range_key: str,
    transitions: tuple[tuple[object, ...], ...],
    _board: data.AlertBoard | None,  # the interval's (data.fleet_now), whose transitions are in the key
    _ctx: PageContext,
) -> bool:
    """The server's charts and events, drawn once per window and alert transition for every session showing
    this server and range, and replayed to the others (9 Altair charts: most of a rerun's CPU). False when
    the window holds no sample of it."""
    del range_key, transitions  # the key, with the reader, the window's end and the target
    ctx = _ctx
    window = TimeWindow(window_end_ts - ctx.range_s, window_end_ts)
    history = data.samples(reads, window.start_ts, window.end_ts, (target,), MAX_POINTS_PER_SERIES)
    if history.empty:
        st.info(
            f"No history for **{formatting.plain(target)}** in the last {ctx.range_label}.",
            icon=":material/schedule:",
        )
        return False
    history = history.assign(
        step_latency_ms=history["step_latency_s"] * 1000.0,
        tpot_ms=history["tpot_s"] * 1000.0,
        measured_per_request_tok_s=measured_tok_s_per_request(history),
    )
    markers = _markers(ctx, target, window.start_ts, window.end_ts, _board)
    _charts(history, markers)
    energy.server_charts(history, markers)
    if not markers.empty:
        with st.expander(f"{len(markers)} event(s) in the last {ctx.range_label}"):
            st.dataframe(
                markers[["time", "kind", "detail"]].sort_values("time", ascending=False),
                hide_index=True,
                placeholder=formatting.DASH,
                width="stretch",
            )
    return True


def _header(ctx: PageContext, row: pd.Series) -> None:
    status = str(row["status"])
    line = f"**{formatting.plain(str(row['server']))}** · {blocks.STATUS_BADGES.get(status, status)}"
    if row["deployment"]:
        line += f" · deployment `{row['deployment']}`"
    if row["recipe"]:
        line += f" · recipe `{row['recipe']}`"
    st.markdown(line)
    if row["error"]:
        st.error(f"Last scrape error: {formatting.plain(str(row['error']))}", icon=":material/error:")
    if row["alerts"]:
        st.warning(f"Firing: {row['alerts']}", icon=":material/notifications_active:")
    blocks.freshness(
        ctx, ctx.now() - float(row["last_seen_s"]) if not math.isnan(row["last_seen_s"]) else None
    )
    if status != STATUS_UP:
        return
    first = st.columns(4)
    first[0].metric(  # bare: "2.51 tok/step" was cut to "2.51 tok/s…" in a quarter-width tile, a wrong unit
        "Accept length",
        formatting.num(row["accept_length"], ".2f"),
        help="accepted tokens per verify step (tok/step): the fraction's numerator",
        border=True,
    )
    first[1].metric("Step latency", formatting.num(row["step_latency_ms"], ".1f", "ms"), border=True)
    first[2].metric(
        "Per request",
        formatting.num(row["per_request_tok_s"], ".1f", "tok/s"),
        help="accept ÷ step",
        border=True,
    )
    first[3].metric("Output", formatting.num(row["output_tok_s"], ",.0f", "tok/s"), border=True)
    second = st.columns(4)
    second[0].metric("Running / cap", str(row["running_cap"]), border=True)
    second[1].metric("Queued", formatting.num(row["queued"], ".0f"), border=True)
    second[2].metric("State pool", formatting.pct(row["state_pool_usage"]), border=True)
    second[3].metric("KV cache", formatting.pct(row["kv_usage"]), border=True)
    energy.server_tiles(row)


def _markers(
    ctx: PageContext, target: str, start_ts: float, end_ts: float, board: data.AlertBoard | None
) -> pd.DataFrame:
    """Store events of this server plus its alert transitions, as one frame: time, kind, detail, target."""
    events = data.events(ctx.reads, start_ts, end_ts, (target,))
    parts = [events[["time", "kind", "detail", "target"]]]
    if board is not None and not board.transitions.empty:
        mine = board.transitions[board.transitions["target"] == target]
        if not mine.empty:
            parts.append(
                pd.DataFrame(
                    {
                        "time": mine["time"],
                        "kind": "alert",
                        "detail": mine["rule"] + " → " + mine["kind"],
                        "target": mine["target"],
                    }
                )
            )
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=["time", "kind", "detail", "target"])
    return pd.concat(parts, ignore_index=True)


def _charts(history: pd.DataFrame, markers: pd.DataFrame) -> None:
    def show(chart: chart_style.TopChart, columns: list[str], what: str) -> None:
        blocks.series_chart(chart, history, columns, what)

    st.subheader("The fraction: throughput = accept length ÷ step latency", anchor=False)
    left, right = st.columns(2)
    with left:
        show(
            time_charts.line_chart(
                history, "accept_length", "accept length (tokens / step)", events=markers, zero=False
            ),
            ["accept_length"],
            "accept length",
        )
    with right:
        show(
            time_charts.line_chart(
                history, "step_latency_ms", "step latency (ms / step)", events=markers, color="#e45756"
            ),
            ["step_latency_ms"],
            "step latency",
        )
    left, right = st.columns(2)
    per_request = {"per_request_tok_s": "accept ÷ step", "measured_per_request_tok_s": "output ÷ running"}
    with left:
        show(
            time_charts.multi_line_chart(
                history,
                per_request,
                "per-request throughput (tok/s)",
                events=markers,
                dashed=["output ÷ running"],
            ),
            list(per_request),
            "per-request throughput",
        )
    with right:
        show(
            time_charts.line_chart(
                history, "output_tok_s", "aggregate output (tok/s)", events=markers, color="#54a24b"
            ),
            ["output_tok_s"],
            "output throughput",
        )
    st.subheader("Latency", anchor=False)
    left, right = st.columns(2)
    with left:
        show(
            time_charts.line_chart(history, "tpot_ms", "TPOT (ms / token)", events=markers, color="#f58518"),
            ["tpot_ms"],
            "time per output token",
        )
    with right:
        show(
            time_charts.line_chart(history, "ttft_s", "TTFT (s)", events=markers, color="#b279a2"),
            ["ttft_s"],
            "time to first token",
        )
    st.subheader("Load and memory", anchor=False)
    left, middle, right = st.columns(3)
    with left:
        show(
            time_charts.multi_line_chart(
                history,
                {"running": "running", "max_running": "cap"},
                "requests",
                events=markers,
                dashed=["cap"],
                colors={"running": "#4c78a8", "cap": "#888888"},
            ),
            ["running", "max_running"],
            "running requests",
        )
    with middle:
        show(
            time_charts.line_chart(history, "queued", "queued requests", events=markers, color="#e45756"),
            ["queued"],
            "queue length",
        )
    with right:
        show(
            time_charts.multi_line_chart(
                history,
                {"state_pool_usage": "state pool (SSM)", "kv_usage": "KV cache"},
                "pool usage (%)",
                events=markers,
                y_format="%",
                colors=chart_style.POOL_COLORS,
                y_domain=(0.0, 1.0),
            ),
            ["state_pool_usage", "kv_usage"],
            "pool usage",
        )


def _recipe(ctx: PageContext, recipe_id: str) -> None:
    if not recipe_id:
        return
    flags = data.recipes(ctx.reads).get(recipe_id)
    if flags is None:
        return
    with st.expander(f"Recipe `{recipe_id}` flags"):
        st.dataframe(
            pd.DataFrame({"flag": list(flags), "value": [str(v) for v in flags.values()]}),
            hide_index=True,
            placeholder=formatting.DASH,
            width="stretch",
        )
