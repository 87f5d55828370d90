"""The Context page: accept length against context (falling = mechanism) beside batch size (flat = noise),
and the loss split between two context bins or two time windows along accept length ÷ step latency.
"""

from __future__ import annotations

import datetime as dt
import math

import pandas as pd
import streamlit as st

from analysis import sample_bins
from analysis.fraction import (
    MIN_SAMPLES,
    NOISE_FRACTION,
    FractionRatio,
    FractionSummary,
    binned_means,
    describe_ratio,
    fit_log2,
    summarize,
    trend,
)
from analysis.words import times
from views import analysis_charts, blocks, data, formatting
from views import probes as probe_views
from views.page_context import PageContext, TimeWindow

ALL = "all"


def render(ctx: PageContext) -> None:
    st.title("Context", anchor=False)
    st.caption(
        "Acceptance is decided per sequence, so batch size should leave it flat (noise) while a longer "
        "context makes the draft's job harder (a mechanism). Context also raises step latency through "
        "attention cost."
    )
    with blocks.store_errors():
        probe_views.context_block(ctx)  # measured on purpose, so drawn even when traffic gave no curve
    with blocks.store_errors():
        window, usable = blocks.analysis_history(ctx)
        if usable.empty:
            blocks.explain_no_samples(ctx, "accept-length samples")
            return
        recipes = sorted(usable["recipe"].unique())
        chosen = st.multiselect("Recipes", recipes, default=recipes, key="context_recipes")
        usable = usable[usable["recipe"].isin(chosen)]
        if usable.empty:
            st.info("Pick at least one recipe.", icon=":material/filter_alt_off:")
            return
        left, right = st.columns(2)
        with left:
            _context_panel(usable)
        with right:
            _batch_panel(usable)
        _loss_split(ctx, usable, window)


def _fit_table(usable: pd.DataFrame, x: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per recipe: the log2 fit of accept length on ``x`` (rows for the table, points for the chart)."""
    rows, curves = [], []
    for recipe, group in usable.groupby("recipe"):
        fit = fit_log2(group[x], group["accept_length"])
        if fit is None:
            continue
        rows.append(
            {
                "recipe": recipe,
                "trend": trend(fit),
                "per doubling": fit.slope_per_doubling,
                "change over range": fit.relative_change() * 100.0,
                "R²": fit.r2,
                "samples": fit.points,
            }
        )
        curves.append(analysis_charts.fit_curve(fit, str(recipe), x))
    table = pd.DataFrame(rows)
    return table, (pd.concat(curves, ignore_index=True) if curves else pd.DataFrame())


FIT_COLUMNS = {
    "per doubling": st.column_config.NumberColumn(
        "Δ accept / doubling", format="%+.3f", help="fitted change in accept length per doubling"
    ),
    "change over range": st.column_config.NumberColumn(
        "change over range", format="%+.0f%%", help="fitted change from the lowest to the highest value seen"
    ),
    "R²": st.column_config.NumberColumn("R²", format="%.2f"),
}


def _context_panel(usable: pd.DataFrame) -> None:
    st.subheader("Accept length vs context (passive: from traffic)", anchor=False)
    rows = usable.dropna(subset=["avg_context_tokens", "context_bin"])
    if rows.empty:
        st.info("No average-context samples (decode_sum_seq_lens is missing).", icon=":material/info:")
        return
    means = binned_means(rows, "avg_context_tokens", "accept_length", "context_bin", "recipe")
    table, curves = _fit_table(rows, "avg_context_tokens")
    chart = analysis_charts.accept_scatter(
        rows,
        means,
        curves,
        x="avg_context_tokens",
        x_title="average context (tokens, log₂)",
        tokens_axis=True,
    )
    st.altair_chart(chart, width="stretch")
    if table.empty:
        st.caption("Too narrow a context range to fit a decay (needs at least one doubling).")
        return
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        placeholder=formatting.DASH,
        column_config=FIT_COLUMNS,
        key="context_fit",
    )


def _batch_panel(usable: pd.DataFrame) -> None:
    st.subheader("Accept length vs batch size", anchor=False)
    rows = usable[usable["running"] > 0].dropna(subset=["concurrency", "context_bin"])
    if rows.empty:
        st.info("No running-request samples.", icon=":material/info:")
        return
    # Hold context fixed: across bins, batch size and context move together and the decay would show here too.
    counts = rows.groupby("context_bin").size()
    bins = sample_bins.context_bin_order(list(counts.index))
    context = st.selectbox(
        "Context bin",
        bins,
        index=bins.index(str(counts.idxmax())),
        key="batch_context",
        help="batch sizes are compared at one context",
    )
    rows = rows[rows["context_bin"] == context]
    means = binned_means(rows, "running", "accept_length", "concurrency", "recipe")
    table, curves = _fit_table(rows, "running")
    chart = analysis_charts.accept_scatter(
        rows, means, curves, x="running", x_title="running requests (batch size, log₂)"
    )
    st.altair_chart(chart, width="stretch")
    if table.empty:
        st.caption("Too narrow a batch range at this context to fit a trend (needs at least one doubling).")
        return
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        placeholder=formatting.DASH,
        column_config=FIT_COLUMNS,
        key="batch_fit",
    )
    moving = table[table["trend"] != "flat"]
    if moving.empty:
        st.markdown(
            f"**Flat** within ±{NOISE_FRACTION:.0%} run-to-run noise for every recipe at context {context}: "
            "batch size does not move acceptance (it moves step latency only)."
        )
    else:
        names = ", ".join(f"`{r}`" for r in moving["recipe"])
        st.markdown(
            f"Accept length moves with batch size beyond ±{NOISE_FRACTION:.0%} noise for {names} at context "
            f"{context}: acceptance is decided per sequence, so look for a workload change under load."
        )


def _loss_split(ctx: PageContext, usable: pd.DataFrame, window: TimeWindow) -> None:
    st.subheader("Loss split: measured = step-latency ratio × accept-length ratio × residual", anchor=False)
    mode = st.segmented_control(
        "Compare", ["two context bins", "two time windows"], default="two context bins", key="split_mode"
    )
    sides = _time_sides(ctx, usable, window) if mode == "two time windows" else _context_sides(usable)
    if sides is None:
        return
    a, b = sides
    if a is None or b is None:
        st.info(f"Too few samples on one side to split (need {MIN_SAMPLES}).", icon=":material/info:")
        return
    ratio = FractionRatio(a, b)
    tiles = st.columns(5)
    tiles[0].metric("Measured", times(ratio.measured), help="per-request tok/s, A ÷ B", border=True)
    tiles[1].metric("Predicted", times(ratio.predicted), help="step factor × accept factor", border=True)
    tiles[2].metric(
        "Step latency", times(ratio.step_factor), help="B step ÷ A step (denominator)", border=True
    )
    tiles[3].metric("Accept length", times(ratio.accept_factor), help="A ÷ B (numerator)", border=True)
    tiles[4].metric("Residual", times(ratio.residual), help="measured ÷ predicted", border=True)
    st.markdown(describe_ratio(ratio))
    left, right = st.columns([3, 2])
    with left:
        st.altair_chart(analysis_charts.ratio_split_chart(ratio), width="stretch")
    with right:
        st.dataframe(
            pd.DataFrame(
                {
                    "side": [a.label, b.label],
                    "accept length": [a.accept_length, b.accept_length],
                    "step (ms)": [a.step_latency_s * 1000, b.step_latency_s * 1000],
                    "tok/s per request": [a.tok_s_per_request, b.tok_s_per_request],
                    "samples": [a.samples, b.samples],
                }
            ),
            hide_index=True,
            placeholder=formatting.DASH,
            width="stretch",
            column_config={
                "accept length": st.column_config.NumberColumn(format="%.3f"),
                "step (ms)": st.column_config.NumberColumn(format="%.1f"),
                "tok/s per request": st.column_config.NumberColumn(format="%.2f"),
            },
            key="split_sides",
        )


Sides = tuple[FractionSummary | None, FractionSummary | None]


def comparable_bins(rows: pd.DataFrame) -> list[str]:
    """Context bins with enough usable samples (accept length and step latency known) to be one side."""
    usable = rows[(rows["accept_length"] > 0) & (rows["step_latency_s"] > 0)].dropna(subset=["context_bin"])
    counts = usable.groupby("context_bin").size()
    return sample_bins.context_bin_order([str(b) for b in counts[counts >= MIN_SAMPLES].index])


def sweep_server(rows: pd.DataFrame, min_bins: int = 3) -> str | None:
    """The server that swept the widest context on its own (≥ ``min_bins`` bins), if any: one server's sweep
    compares like with like (same batch, same hardware), as the seed's ISL sweep did."""
    # comparable_bins per target, counted in one groupby (a loop over 1,000 targets' groups took 2 s).
    usable = rows[(rows["accept_length"] > 0) & (rows["step_latency_s"] > 0)].dropna(subset=["context_bin"])
    counts = usable.groupby(["target", "context_bin"]).size()
    bins = counts[counts >= MIN_SAMPLES].groupby(level="target").size()
    targets = sorted(str(t) for t in rows["target"].unique())
    spread = pd.Series([int(bins.get(t, 0)) for t in targets], index=targets, dtype="int64")
    if spread.empty or spread.max() < min_bins:
        return None
    return str(spread.idxmax())


def _context_sides(usable: pd.DataFrame) -> Sides | None:
    counts = usable.groupby("recipe").size().sort_values(ascending=False)
    left, right = st.columns(2)
    recipe = left.selectbox(
        "Recipe",
        [*counts.index, ALL],
        key="split_recipe",
        help="Compare within one recipe: mixing recipes across bins would confound the split.",
    )
    rows = usable if recipe == ALL else usable[usable["recipe"] == recipe]
    servers = [ALL, *sorted(rows["target"].unique())]
    sweep = sweep_server(rows)
    server = right.selectbox(
        "Server",
        servers,
        index=servers.index(sweep) if sweep else 0,
        key="split_server",
        help="Defaults to a server that swept context on its own; 'all' mixes servers (and their batches).",
    )
    rows = rows if server == ALL else rows[rows["target"] == server]
    bins = comparable_bins(rows)
    if len(bins) < 2:
        st.info("Only one context bin has samples in this range: nothing to compare.", icon=":material/info:")
        return None
    left, right = st.columns(2)
    a_bin = left.selectbox("A (reference)", bins, index=0, key="split_a")
    b_bin = right.selectbox("B (compared)", bins, index=len(bins) - 1, key="split_b")
    return (
        summarize(rows[rows["context_bin"] == a_bin], f"{a_bin} context"),
        summarize(rows[rows["context_bin"] == b_bin], f"{b_bin} context"),
    )


def _time_sides(ctx: PageContext, usable: pd.DataFrame, window: TimeWindow) -> Sides | None:
    targets = sorted(usable["target"].unique())
    scope = st.selectbox("Servers", [ALL, *targets], key="split_target")
    rows = usable if scope == ALL else usable[usable["target"] == scope]
    first, last = float(rows["ts"].min()), float(rows["ts"].max())
    if last - first < 2 * ctx.interval_s:
        st.info("Too short a history in this range to split in time.", icon=":material/info:")
        return None
    events = data.events(ctx.reads, window.start_ts, window.end_ts, None if scope == ALL else (scope,))
    changes = events[(events["kind"] == "recipe_change") & events["ts"].between(first, last)]
    default_ts = float(changes["ts"].iloc[-1]) if not changes.empty else (first + last) / 2
    low, high, default = (_utc(first), _utc(last), _utc(default_ts))
    split = st.slider(
        "Split at (UTC)",
        min_value=low,
        max_value=high,
        value=default,
        step=dt.timedelta(seconds=1),  # the default step (15 min) would move the split off the recipe change
        format="YYYY-MM-DD HH:mm:ss",
        key="split_at",
        help="A = before, B = after; defaults to the last recipe change in range, else the middle.",
    )
    split_ts = split.replace(tzinfo=dt.UTC).timestamp()
    return (
        summarize(rows[rows["ts"] < split_ts], "before"),
        summarize(rows[rows["ts"] >= split_ts], "after"),
    )


def _utc(ts: float) -> dt.datetime:
    # Floor to the second: a split placed at an event keeps the event's own sample on the "after" side.
    return dt.datetime.fromtimestamp(math.floor(ts), tz=dt.UTC).replace(tzinfo=None)
