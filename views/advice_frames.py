"""The Capacity page's advice table: one row per deployment, the numbers of ``specwatch capacity --json``
(``DeploymentAdvice.record``), unknown left empty (shown as a dash), never zero."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd
import streamlit as st

from analysis.capacity_advice import HEADROOM, DeploymentAdvice

# The table's columns (its keys are ``record()`` keys, or derived from them as named): the answer first.
ADVICE_COLUMNS = {
    "deployment": st.column_config.TextColumn("deployment", pinned=True),
    "servers_up": st.column_config.TextColumn("servers up", help="up / servers in the deployment"),
    "servers_needed_now": st.column_config.NumberColumn("needed now", format="%d"),
    "servers_needed_peak": st.column_config.NumberColumn("needed at peak", format="%d"),
    "binding": st.column_config.TextColumn(
        "binds", help="what stops a server serving more first: state pool, KV cache, request cap or compute"
    ),
    "knee_running": st.column_config.NumberColumn("at running", format="%.0f"),
    "tok_s_per_server_at_knee": st.column_config.NumberColumn(
        "tok/s a server at the knee", format="%.0f", help="running × accept length ÷ step latency there"
    ),
    "demand_tok_s": st.column_config.NumberColumn(
        "demand now (tok/s)", format="%.0f", help="last 5 min: output tok/s plus what the queue waits for"
    ),
    "forecast_peak_tok_s": st.column_config.NumberColumn("peak, next 24 h (tok/s)", format="%.0f"),
    "forecast_at": st.column_config.TextColumn("peak at (UTC)"),
    "forecast_method": st.column_config.TextColumn("forecast"),
}


def advice_frame(advice: Sequence[DeploymentAdvice]) -> pd.DataFrame:
    """One row per deployment; numbers as ``record()`` gives them (None → NaN: a dash on the page)."""
    rows = []
    for item in advice:
        record = item.record()
        peak_ts = item.forecast_peak_ts
        rows.append(
            {
                **{key: record[key] for key in ADVICE_COLUMNS if key in record},
                "deployment": item.label,
                "servers_up": f"{item.servers_up} / {item.servers}",
                "forecast_at": "" if peak_ts is None else time.strftime("%a %H:%M", time.gmtime(peak_ts)),
                "binding": record["binding"] or "unknown",
                "forecast_method": record["forecast_method"] or "unknown",
            }
        )
    frame = pd.DataFrame(rows, columns=list(ADVICE_COLUMNS))
    for column in (
        "knee_running",
        "tok_s_per_server_at_knee",
        "demand_tok_s",
        "forecast_peak_tok_s",
        "servers_needed_now",
        "servers_needed_peak",
    ):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def policy_caption(now_ts: float) -> str:
    """How the numbers are made, in one caption (docs/capacity.md has the method)."""
    minute = time.strftime("%Y-%m-%d %H:%M", time.gmtime(now_ts))
    return (
        f"Advice only — specwatch changes nothing. As of {minute} UTC. Servers needed = demand ÷ "
        f"({1 - HEADROOM:.0%} of one server's throughput at the knee), at least one; one more than are up "
        "where a latency SLO of the deployment burns. The knee is where the deployment's main recipe stops "
        "scaling at the context it serves (the first of: a pool binding at the alert rules' level, the "
        "request cap holding a queue, the scaling curve's knee), from the last day fleet-wide; the forecast "
        "is the daily profile once two days are stored, else the recent trend."
    )
