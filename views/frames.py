"""Reads as DataFrames: the one place the dashboard turns the model's types into pandas (samples through
``analysis.frames``, which the CLI's analyses share).

The history answers in ``SampleColumns``, ``Event``s and snapshots, the alert engine in ``AlertInstance``s and
``AlertTransition``s (``collectors/history.py``, ``alerts/state_store.py``); the pages draw and filter
DataFrames. No streamlit here (``data.py`` caches the reads), so tests build the same frames the pages get.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from alerts.model import AlertInstance, AlertTransition
from alerts.scopes import alert_scope
from collectors.model import SIGNAL_NAMES, Event
from collectors.sample_columns import SampleColumns

# The fleet table's input: one row per target.
LATEST_COLUMNS = [
    "target",
    "ts",
    "up",
    "error",
    "recipe_id",
    "deployment",
    "scrape_duration_s",
    *SIGNAL_NAMES,
    "unknown",  # the source could not say (Prometheus blind or partial): shown as no data, never down
]


def latest_frame(columns: SampleColumns) -> pd.DataFrame:
    """The newest row of each target (``HistoryReader.latest_columns``): ``LATEST_COLUMNS``, ``up`` and
    ``unknown`` as booleans (an unknown target is not up), a missing deployment as ""."""
    texts, values = columns.texts, columns.values
    return pd.DataFrame(
        {
            "target": columns.target,
            "ts": columns.ts,
            "up": columns.up == 1.0,
            "error": texts["error"],
            "recipe_id": texts["recipe_id"],
            "deployment": pd.Series(texts["deployment"], dtype=object).fillna("").to_numpy(),
            "scrape_duration_s": values["scrape_duration_s"],
            **{name: values[name] for name in SIGNAL_NAMES},
            "unknown": np.isnan(columns.up),
        },
        columns=LATEST_COLUMNS,
    )


def events_frame(events: Sequence[Event]) -> pd.DataFrame:
    """Restarts, recipe changes, up/down and alert transitions: columns ts, time, target, kind, detail."""
    frame = pd.DataFrame(
        [(e.ts, e.target, e.kind, e.detail) for e in events], columns=["ts", "target", "kind", "detail"]
    )
    frame["ts"] = frame["ts"].astype("float64")
    frame["time"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    return frame


# -- alert state ---------------------------------------------------------------------------------------------
ALERT_ACTIVE_COLUMNS = [
    "rule",
    "target",
    "state",
    "severity",
    "since_ts",
    "fired_at_ts",
    "value",
    "summary",
    "deployment",
    "recipe_id",
    "suspended",
    "slo",  # ErrorBudgetBurn: the SLO and the scope it burns in (its labels other than the rule's own)
    "scope",
    "description",
]
ALERT_TRANSITION_COLUMNS = [
    "ts",
    "rule",
    "target",
    "from_state",
    "to_state",
    "kind",
    "value",
    "severity",
    "summary",
]


def active_frame(instances: Sequence[AlertInstance]) -> pd.DataFrame:
    rows = [
        (
            a.rule,
            a.target,
            a.state.value,
            a.severity,
            a.since,
            a.fired_at,
            a.value,
            a.summary,
            a.deployment,
            a.recipe_id,
            a.suspended,
            a.label("slo"),
            alert_scope(a.labels_dict).key if a.label("slo") else "",
            a.description,
        )
        for a in instances
    ]
    frame = pd.DataFrame(rows, columns=ALERT_ACTIVE_COLUMNS)
    for column in ("since_ts", "fired_at_ts", "value"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def transitions_frame(transitions: Sequence[AlertTransition]) -> pd.DataFrame:
    rows = [
        (
            t.ts,
            t.rule,
            t.target,
            t.from_state.value,
            t.to_state.value,
            t.kind,
            t.value,
            t.labels_dict.get("severity", ""),
            t.summary,
        )
        for t in transitions
    ]
    frame = pd.DataFrame(rows, columns=ALERT_TRANSITION_COLUMNS)
    for column in ("ts", "value"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    frame["time"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    return frame
