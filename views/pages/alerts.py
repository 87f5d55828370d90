"""The Alerts page: firing, pending and resolved alerts and their history, from the alert engine's state.

The engine evaluates once per process (never in a page script); this page only reads what it stored.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from collectors.secrets import Redactor
from collectors.slo import Scope
from views import blocks, data, formatting, links, refresh, slo_frames, time_charts
from views.formatting import format_age
from views.page_context import PageContext

ACTIVE_CONFIG = {
    "rule": st.column_config.TextColumn("rule", pinned=True),
    "slo": st.column_config.TextColumn("SLO", help="ErrorBudgetBurn: the SLO burning"),
    "scope": st.column_config.TextColumn("scope", help="ErrorBudgetBurn: where it burns"),
    "target": st.column_config.TextColumn("server"),
    "severity": st.column_config.TextColumn("severity"),
    "for": st.column_config.TextColumn("for", help="time in the current state"),
    "value": st.column_config.NumberColumn("value", format="%.3f"),
    "summary": st.column_config.TextColumn("summary", width="large"),
    "description": st.column_config.TextColumn("description", width="large"),
    "deployment": st.column_config.TextColumn("deployment"),
    "recipe_id": st.column_config.TextColumn("recipe"),
}
RESOLVED_CONFIG = {
    "time": st.column_config.DatetimeColumn("resolved at", format="YYYY-MM-DD HH:mm:ss"),
    "rule": st.column_config.TextColumn("rule"),
    "target": st.column_config.TextColumn("server"),
    "severity": st.column_config.TextColumn("severity"),
    "value": st.column_config.NumberColumn("value", format="%.3f"),
    "summary": st.column_config.TextColumn("summary", width="large"),
}

NO_ENGINE = (
    "No alert engine data yet: nothing has evaluated the alert rules against this history store. "
    "Alerts appear here once specwatch runs with its alert engine (it starts with the collector)."
)


def render(ctx: PageContext) -> None:
    st.title("Alerts", anchor=False)
    refresh.live_panel(ctx, _live)


def _live(ctx: PageContext) -> None:
    window = ctx.window()
    now_ts = ctx.now()
    with blocks.store_errors():
        board = data.alert_board(ctx.reads, data.tick(now_ts, ctx.interval_s), window.start_ts, window.end_ts)
        if board is None:
            st.info(NO_ENGINE, icon=":material/notifications_off:")
            return
        active = board.active.assign(**{"for": [format_age(now_ts - t) for t in board.active["since_ts"]]})
        firing = active[active["state"] == "firing"]
        pending = active[active["state"] == "pending"]
        resolved = board.transitions[board.transitions["kind"] == "resolved"]
        tiles = st.columns(3)
        tiles[0].metric("Firing", str(len(firing)), border=True)
        tiles[1].metric("Pending", str(len(pending)), border=True)
        tiles[2].metric(f"Resolved, last {ctx.range_label}", str(len(resolved)), border=True)
        _section("Firing", firing, "Nothing is firing.")
        _section("Pending", pending, "Nothing is pending (waiting out its `for` duration).")
        st.subheader("Resolved", anchor=False)
        if resolved.empty:
            st.caption(f"No alert resolved in the last {ctx.range_label}.")
        else:
            st.dataframe(
                resolved.sort_values("time", ascending=False),
                column_config=RESOLVED_CONFIG,
                column_order=list(RESOLVED_CONFIG),
                hide_index=True,
                placeholder=formatting.DASH,
                width="stretch",
                key="alerts_resolved",
            )
        _notifications(ctx.reads, data.tick(now_ts, ctx.interval_s))
        st.subheader(f"History, last {ctx.range_label}", anchor=False)
        if board.transitions.empty:
            st.caption("No transitions in this range.")
        else:
            st.altair_chart(
                time_charts.alert_timeline(
                    board.transitions,
                    pd.Timestamp(window.start_ts, unit="s", tz="UTC"),
                    pd.Timestamp(window.end_ts, unit="s", tz="UTC"),
                ),
                width="stretch",
            )


def _section(title: str, rows: pd.DataFrame, empty: str) -> None:
    st.subheader(title, anchor=False)
    if rows.empty:
        st.caption(empty)
        return
    # ErrorBudgetBurn's page and ticket rank with critical and warning.
    severity_rank = {"critical": 0, "page": 0, "warning": 1, "ticket": 1, "info": 2}
    ordered = rows.assign(
        _rank=rows["severity"].map(severity_rank).fillna(3),
        scope_key=rows["scope"],
        scope=[
            Scope.from_key(k).words if slo else "" for slo, k in zip(rows["slo"], rows["scope"], strict=True)
        ],
    ).sort_values(["_rank", "since_ts"])
    burns = ordered[ordered["slo"] != ""]
    # SLO, scope and description only when an ErrorBudgetBurn is among them (other rules leave them empty).
    hidden = set() if not burns.empty else {"slo", "scope", "description"}
    st.dataframe(
        ordered,
        column_config=ACTIVE_CONFIG,
        column_order=[c for c in ACTIVE_CONFIG if c not in hidden],
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        key=f"alerts_{title.lower()}",
    )
    for row in burns.head(5).itertuples():  # the attribution in full, and the way to the SLO's page
        words = f"**{formatting.plain(str(row.slo))} · {row.scope}** ({formatting.plain(str(row.severity))})"
        st.markdown(f"{words}: {formatting.plain(str(row.description or row.summary))}")
        links.slo_link(
            f"Open {row.slo} on the SLOs page", str(row.slo), slo_frames.scope_label(str(row.scope_key))
        )


NOTIFICATIONS_CONFIG = {
    "receiver": st.column_config.TextColumn("receiver", pinned=True),
    "queued": st.column_config.NumberColumn("queued", help="waiting for their next attempt"),
    "delivered": st.column_config.NumberColumn("delivered"),
    "failed": st.column_config.NumberColumn("failed", help="refused for good or out of attempts: not sent"),
    "split": st.column_config.NumberColumn("split", help="refused as too large (413), sent in halves"),
}
FAILED_CONFIG = {
    "queued at": st.column_config.DatetimeColumn("queued at", format="YYYY-MM-DD HH:mm:ss"),
    "receiver": st.column_config.TextColumn("receiver"),
    "attempts": st.column_config.NumberColumn("attempts"),
    "error": st.column_config.TextColumn("why it failed", width="large"),
}


@st.cache_data(ttl=120, max_entries=16, show_spinner=False, hash_funcs=data.BY_READER)
def _outbox(reads: data.StoreReader, tick: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    del tick  # part of the cache key only
    counts, failed = reads.call_alerts(
        lambda alerts: (alerts.outbox_counts(), alerts.deliveries(limit=50, status="failed"))
    )
    hide = Redactor()  # receiver URLs may carry user:password
    per_receiver: dict[str, dict[str, object]] = {}
    for (receiver, status), count in counts.items():
        row = per_receiver.setdefault(receiver, {"receiver": hide(receiver)})
        row[status] = count
    summary = pd.DataFrame(list(per_receiver.values()), columns=list(NOTIFICATIONS_CONFIG)).fillna(0)
    rows = pd.DataFrame(
        [
            {
                "queued at": pd.Timestamp(d.created_ts, unit="s", tz="UTC"),
                "receiver": hide(d.receiver),
                "attempts": d.attempts,
                "error": hide(d.last_error),
            }
            for d in failed
        ],
        columns=list(FAILED_CONFIG),
    )
    return summary, rows


def _notifications(reads: data.StoreReader, tick: int) -> None:
    """Per receiver what was queued, delivered, failed; and why the failed ones failed (they are kept)."""
    summary, failed = _outbox(reads, tick)
    st.subheader("Notifications", anchor=False)
    if summary.empty:
        st.caption("No notification has been queued yet.")
        return
    st.dataframe(
        summary,
        column_config=NOTIFICATIONS_CONFIG,
        column_order=list(NOTIFICATIONS_CONFIG),
        hide_index=True,
        width="stretch",
        key="alerts_outbox",
    )
    if failed.empty:
        return
    st.warning(
        f"{len(failed)} notification(s) could not be delivered and were given up (newest first below).",
        icon=":material/notifications_paused:",
    )
    st.dataframe(
        failed,
        column_config=FAILED_CONFIG,
        column_order=list(FAILED_CONFIG),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        key="alerts_failed_notifications",
    )
