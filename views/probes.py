"""Probe curves: accept length and step latency measured by active probes at fixed context lengths.

Passive curves bin whatever traffic arrived; a probe curve is measured on purpose, one request per context
length per sweep, so it exists on a quiet server and compares recipes at exactly the same context. Reads go
through the dashboard's reader pool (``views.data``), cached per scrape interval; the chart builders are pure.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from collectors.model import loss_shares
from collectors.store.probes import ProbeStore
from views import data
from views.analysis_charts import recipe_color
from views.chart_style import K_TOKENS_LABEL
from views.page_context import PageContext

MEASURED_BY_PROBES = (
    "measured by probes: one request per context length per sweep, independent of the traffic mix"
)


# -- reads ---------------------------------------------------------------------------------------------------
# window-keyed: few (views/data.py)
@st.cache_data(ttl=120, max_entries=16, show_spinner=False, hash_funcs=data.BY_READER)
def probe_rows(reads: data.StoreReader, start_ts: float, end_ts: float) -> pd.DataFrame:
    """Every probe (and skipped probe) stored in [start_ts, end_ts]."""
    store = ProbeStore(reads.path, create=False)
    try:
        return reads.call(lambda _history: store.read(start_ts, end_ts))
    finally:
        store.close()


def window_rows(ctx: PageContext) -> pd.DataFrame:
    window = ctx.window(200)
    return probe_rows(ctx.reads, window.start_ts, window.end_ts)


# -- frames --------------------------------------------------------------------------------------------------
def probe_curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Per recipe and context length: median accept length, step latency (ms), per-request tok/s, count."""
    columns = ["recipe", "context_tokens", "accept_length", "step_latency_ms", "tok_s", "probes"]
    ok = rows[rows["error"].isna() & rows["accept_length"].notna() & rows["step_latency_s"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    ok = ok.assign(recipe=ok["recipe_id"].fillna("unknown").astype(str))
    grouped = ok.groupby(["recipe", "context_tokens"])
    curve = grouped.agg(
        accept_length=("accept_length", "median"),
        step_latency_s=("step_latency_s", "median"),
        probes=("accept_length", "size"),
    ).reset_index()
    curve["step_latency_ms"] = curve["step_latency_s"] * 1000.0
    curve["tok_s"] = curve["accept_length"] / curve["step_latency_s"]
    return curve[columns].sort_values(["recipe", "context_tokens"]).reset_index(drop=True)


def factorisation(curve: pd.DataFrame, short: int, long: int) -> pd.DataFrame:
    """Per recipe: per-request slowdown from ``short`` to ``long`` = step-latency ratio × accept-length ratio.

    With probes the identity is exact (tok/s = accept length ÷ step latency of the same request), so the
    table says which half of the fraction the longer context costs.
    """
    rows = []
    for recipe, group in curve.groupby("recipe"):
        contexts = [int(c) for c in group["context_tokens"]]
        step = dict(zip(contexts, (float(v) for v in group["step_latency_ms"]), strict=True))
        accept = dict(zip(contexts, (float(v) for v in group["accept_length"]), strict=True))
        if short not in step or long not in step:
            continue
        step_ratio = step[long] / step[short]
        accept_ratio = accept[short] / accept[long]
        slowdown = step_ratio * accept_ratio
        shares = loss_shares(step_ratio, accept_ratio)  # None when the halves pull in opposite directions
        rows.append(
            {
                "recipe": str(recipe),
                "slowdown": slowdown,
                "step-latency ratio": step_ratio,
                "accept-length ratio": accept_ratio,
                "step share": None if shares is None else shares[0] * 100.0,
            }
        )
    return pd.DataFrame(
        rows, columns=["recipe", "slowdown", "step-latency ratio", "accept-length ratio", "step share"]
    )


def matched(curve: pd.DataFrame, recipes: list[str]) -> pd.DataFrame:
    """Context lengths every chosen recipe was probed at, one row per (context, recipe)."""
    chosen = curve[curve["recipe"].isin(recipes)]
    counts = chosen.groupby("context_tokens")["recipe"].nunique()
    shared = counts[counts == len(set(recipes))].index
    return chosen[chosen["context_tokens"].isin(shared)].reset_index(drop=True)


# -- charts --------------------------------------------------------------------------------------------------
def curve_chart(curve: pd.DataFrame, y: str, title: str) -> alt.LayerChart | alt.FacetChart:
    """``y`` against probe context (log₂ axis) per recipe: points joined by lines."""
    x = alt.X(
        "context_tokens:Q",
        title="probe context (tokens, log₂)",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(labelExpr=K_TOKENS_LABEL),
    )
    color = recipe_color(list(curve["recipe"]))
    base = alt.Chart(curve[["recipe", "context_tokens", y, "probes"]]).encode(
        x=x, y=alt.Y(f"{y}:Q", title=title, scale=alt.Scale(zero=False)), color=color
    )
    points = base.mark_point(size=70, filled=True).encode(
        tooltip=[
            alt.Tooltip("recipe:N"),
            alt.Tooltip("context_tokens:Q", title="context", format=",.0f"),
            alt.Tooltip(f"{y}:Q", title=title, format=".3f"),
            alt.Tooltip("probes:Q"),
        ]
    )
    return alt.layer(base.mark_line(strokeWidth=2), points).properties(height=260)


# -- page blocks ---------------------------------------------------------------------------------------------
def _no_probes(ctx: PageContext, rows: pd.DataFrame) -> None:
    if rows.empty:
        st.info(
            f"No probe results in the last {ctx.range_label}. Probes measure this curve on purpose: set "
            "`probes: {enabled: true}` and `probe: true` on the targets to measure.",
            icon=":material/science:",
        )
    else:
        reasons = rows["error"].dropna()
        st.info(
            f"No successful probe in the last {ctx.range_label}; the latest said: "
            f"{reasons.iloc[-1] if not reasons.empty else 'no measurement'}",
            icon=":material/science:",
        )


def context_block(ctx: PageContext) -> None:
    """Context page: the probe curve per recipe and the factorisation between two probed lengths."""
    st.subheader("Probe curve: accept length and step latency vs context", anchor=False)
    st.caption(f"This curve is {MEASURED_BY_PROBES}. The passive curves below bin the traffic that arrived.")
    rows = window_rows(ctx)
    curve = probe_curve(rows)
    if curve.empty:
        _no_probes(ctx, rows)
        return
    left, right = st.columns(2)
    with left:
        st.altair_chart(curve_chart(curve, "accept_length", "accept length (tokens / step)"), width="stretch")
    with right:
        st.altair_chart(curve_chart(curve, "step_latency_ms", "step latency (ms / step)"), width="stretch")
    lengths = sorted(int(c) for c in curve["context_tokens"].unique())
    if len(lengths) < 2:
        st.caption("Only one context length probed so far: the factorisation needs two.")
        return
    a, b = st.columns(2)
    short = a.selectbox("From context", lengths, index=0, key="probe_short", format_func=_tokens)
    long = b.selectbox("To context", lengths, index=len(lengths) - 1, key="probe_long", format_func=_tokens)
    table = factorisation(curve, int(short), int(long))
    st.markdown(
        f"Per-request slowdown from **{_tokens(short)}** to **{_tokens(long)}** tokens = step-latency ratio "
        "× accept-length ratio (exact for probes: the same request measures both halves)."
    )
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "slowdown": st.column_config.NumberColumn(format="%.2f×"),
            "step-latency ratio": st.column_config.NumberColumn(format="%.2f×"),
            "accept-length ratio": st.column_config.NumberColumn(format="%.2f×"),
            "step share": st.column_config.NumberColumn(
                format="%.0f%%", help="share of the slowdown from the denominator (log scale)"
            ),
        },
    )


def recipes_block(ctx: PageContext) -> None:
    """Recipes page: the chosen recipes on probe curves at matched context (the fairest comparison)."""
    st.subheader("Recipes on probe curves, at matched context", anchor=False)
    st.caption(f"Every value here is {MEASURED_BY_PROBES}: the same prompt length for every recipe.")
    rows = window_rows(ctx)
    curve = probe_curve(rows)
    if curve.empty:
        _no_probes(ctx, rows)
        return
    probed = sorted(curve["recipe"].unique())
    recipes = st.multiselect("Probed recipes", probed, default=probed, key="probe_recipes")
    both = matched(curve, [str(r) for r in recipes])
    if both.empty:
        st.info("These recipes have no probed context length in common yet.", icon=":material/science:")
        return
    wide = both.pivot(
        index="context_tokens", columns="recipe", values=["accept_length", "step_latency_ms", "tok_s"]
    )
    wide.columns = [f"{pair[0]} · {pair[1]}" for pair in wide.columns.to_list()]
    table = wide.reset_index().rename(columns={"context_tokens": "context tokens"})
    st.dataframe(
        table, hide_index=True, column_config={"context tokens": st.column_config.NumberColumn(format="%d")}
    )


def server_block(ctx: PageContext, target: str) -> None:
    """Server page: this server's latest probe sweep (or why there is none)."""
    rows = window_rows(ctx)
    mine = rows[rows["target"] == target]
    st.subheader("Latest probe sweep", anchor=False)
    if mine.empty:
        st.caption(f"No probe of {target} in the last {ctx.range_label} (probes are opt-in: `probe: true`).")
        return
    latest_ts = float(mine["ts"].max())
    sweep = mine[mine["ts"] >= latest_ts - ctx.config.probes.interval_s / 2].drop_duplicates(
        "context_tokens", keep="last"
    )
    table = pd.DataFrame(
        {
            "context tokens": sweep["context_tokens"].astype(int),
            "prompt tokens": sweep["prompt_tokens"],
            "accept length": sweep["accept_length"],
            "step latency (ms)": sweep["step_latency_s"] * 1000.0,
            "TTFT (s)": sweep["ttft_s"],
            "TPOT (ms)": sweep["tpot_s"] * 1000.0,
            "running": sweep["running"],
            "error": sweep["error"],
        }
    ).sort_values("context tokens")
    st.caption(f"{MEASURED_BY_PROBES.capitalize()}.")
    st.dataframe(table, hide_index=True)


def _tokens(value: object) -> str:
    number = int(value)  # type: ignore[call-overload]
    return f"{number // 1024}K" if number >= 1024 and number % 1024 == 0 else f"{number:,}"
