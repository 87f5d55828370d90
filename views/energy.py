"""Energy and cost on the pages: a block each for Capacity (per deployment, now), Recipes (per recipe at
matched concurrency) and Server (tokens per joule and $ per million tokens over time).

Kept apart from the pages so each page calls one function. Every figure is unknown (an em dash, or a sentence
saying what to configure) without GPU telemetry (``targets[].gpu_exporter_url``) or a price
(``cost.gpu_hour_usd``): never 0, never infinite.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from analysis.energy import deployment_cost, recipe_energy
from views import blocks, formatting, time_charts
from views.page_context import PageContext

NOT_CONFIGURED = (
    "Energy and cost need the GPUs' DCGM exporter (`targets[].gpu_exporter_url`, or with `source: "
    "prometheus` its series joined by node: `prometheus.gpu_selector`, `node_label`) and a price "
    "(`cost.gpu_hour_usd`)."
)

COST_COLUMNS = {
    "deployment": st.column_config.TextColumn("deployment", pinned=True),
    "servers": st.column_config.NumberColumn("servers up", format="%d"),
    "gpus": st.column_config.NumberColumn("GPUs", format="%d"),
    "usd_per_hour": st.column_config.NumberColumn(
        "$/hour", format="$%.2f", help="cost.gpu_hour_usd × the GPUs of the servers up (idle GPUs cost too)"
    ),
    "output_tok_s": st.column_config.NumberColumn("output tok/s", format="%.0f"),
    "usd_per_million_tokens": st.column_config.NumberColumn(
        "$/Mtok", format="$%.2f", help="$/hour ÷ output tokens per hour × 1e6: what a million tokens cost now"
    ),
    "gpu_power_w": st.column_config.NumberColumn("GPU W", format="%.0f", help="servers with GPU telemetry"),
    "tokens_per_joule": st.column_config.NumberColumn(
        "tok/J", format="%.3f", help="output tokens per joule, servers with GPU telemetry"
    ),
}

RECIPE_COLUMNS = {
    "concurrency": st.column_config.TextColumn("running (bin)", pinned=True),
    "recipe": st.column_config.TextColumn("recipe"),
    "tokens_per_joule": st.column_config.NumberColumn(
        "tok/J", format="%.3f", help="Σ output tokens ÷ Σ joules"
    ),
    "usd_per_million_tokens": st.column_config.NumberColumn(
        "$/Mtok", format="$%.2f", help="spend ÷ tokens: $/Mtok weighted by output tok/s"
    ),
    "tok_s_per_gpu": st.column_config.NumberColumn("tok/s per GPU", format="%.0f"),
    "samples": st.column_config.NumberColumn("samples", format="%d"),
}


def capacity_block(ctx: PageContext, table: pd.DataFrame) -> None:
    """What each deployment costs now: GPUs, $/hour, output tok/s, $ per million tokens, watts, tok/J."""
    price = ctx.config.cost.gpu_hour_usd
    st.subheader("Cost per deployment", anchor=False)
    cost = deployment_cost(table, price)
    if cost.empty:
        return
    if cost["gpus"].isna().all() and cost["gpu_power_w"].isna().all():
        st.info(NOT_CONFIGURED, icon=":material/bolt:")
        return
    if price is None:
        st.caption("Servers up now. No price (`cost.gpu_hour_usd`): $/hour and $/Mtok are unknown.")
    else:
        st.caption(f"Servers up now, at **${price:g} per GPU-hour** (`cost.gpu_hour_usd`).")
    missing = int(cost["without_gpu_count"].sum())
    if missing:
        st.caption(
            f"{missing} server(s) up without a GPU count (no /server_info tp_size, no exporter): their spend "
            "is left out of $/hour and $/Mtok."
        )
    st.dataframe(
        cost,
        column_config=COST_COLUMNS,
        column_order=list(COST_COLUMNS),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        key="capacity_cost",
    )


def recipes_block(usable: pd.DataFrame) -> None:
    """Tokens per joule and $ per million tokens per recipe, at the concurrency bins the recipes share."""
    table = recipe_energy(usable)
    st.subheader("Energy and cost per recipe at matched concurrency", anchor=False)
    if table.empty:
        st.info(NOT_CONFIGURED, icon=":material/bolt:")
        return
    matched = table[table["matched"]]
    shown = matched if not matched.empty else table
    st.caption(
        "Pooled over the range: tokens per joule = Σ tokens ÷ Σ joules, $/Mtok = spend ÷ tokens (a nearly "
        "idle minute does not outweigh a busy hour). "
        + (
            "Only the running-request bins two or more recipes share."
            if not matched.empty
            else "No running-request bin is shared by two recipes yet: each recipe at its own."
        )
    )
    st.dataframe(
        shown,
        column_config=RECIPE_COLUMNS,
        column_order=list(RECIPE_COLUMNS),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        key="recipes_energy",
    )


def server_tiles(row: pd.Series) -> None:
    """GPUs, power, tokens per joule and $ per million tokens of a server up (nothing when none is known)."""
    names = ["gpu_count", "gpu_power_w", "tokens_per_joule", "usd_per_million_tokens"]
    if all(pd.isna(row[name]) for name in names):
        return
    tiles = st.columns(4)
    tiles[0].metric("GPUs", formatting.num(row["gpu_count"], ".0f"), border=True)
    tiles[1].metric("GPU power", formatting.num(row["gpu_power_w"], ",.0f", "W"), border=True)
    tiles[2].metric(
        "Tokens per joule",
        formatting.num(row["tokens_per_joule"], ".3f", "tok/J"),
        help="output tok/s ÷ GPU watts",
        border=True,
    )
    tiles[3].metric(
        "Cost",
        formatting.num(row["usd_per_million_tokens"], ",.2f", "$/Mtok"),
        help="cost.gpu_hour_usd",
        border=True,
    )


def server_charts(history: pd.DataFrame, markers: pd.DataFrame) -> None:
    """Tokens per joule and $ per million tokens over time, or one line saying how to get them."""
    columns = ["tokens_per_joule", "usd_per_million_tokens"]
    st.subheader("Energy and cost", anchor=False)
    if history[columns].isna().all().all():
        st.info(NOT_CONFIGURED, icon=":material/bolt:")
        return
    left, right = st.columns(2)
    with left:
        blocks.series_chart(
            time_charts.line_chart(
                history, "tokens_per_joule", "output tokens per joule", events=markers, color="#54a24b"
            ),
            history,
            ["tokens_per_joule"],
            "tokens per joule",
        )
    with right:
        blocks.series_chart(
            time_charts.line_chart(
                history,
                "usd_per_million_tokens",
                "$ per million output tokens",
                events=markers,
                color="#9467bd",
            ),
            history,
            ["usd_per_million_tokens"],
            "cost per million tokens",
        )
