"""What alert state can still be read from a store moved aside as corrupt: the active instances (so a firing
alert is not notified again) and the queued notifications (so none is lost).

Read per table and row by row, keeping every row SQLite returns before it gives up on a damaged page; first
with the file's WAL, then (for a table that fails, e.g. a WAL from another database) from the main file
alone; a file cut short is read up to where it ends. What cannot be read is named, never guessed, with one
exception: a damaged instances table is made up for from the outbox's bodies (an alert whose last
notification said firing is firing). Transitions, delivered notifications, history, events, recipes, SLO
counts and probes stay in the moved file only.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from alerts.model import AlertInstance, AlertState, Delivery
from alerts.state_store import _INSTANCE_COLUMNS, _OUTBOX_COLUMNS, _delivery, _instance
from collectors.store.integrity import read_only_uri

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SalvagedState:
    instances: tuple[AlertInstance, ...] = ()
    queued: tuple[Delivery, ...] = ()
    unread: tuple[str, ...] = ()  # per table: why (some of) it could not be read
    rebuilt: int = 0  # instances made up from the outbox (the instances' table was damaged)

    def summary(self) -> str:
        """One clause for the log line and the banner."""
        text = (
            f"{len(self.instances)} active alert(s) and {len(self.queued)} queued notification(s) recovered"
        )
        if self.rebuilt:
            text += f", {self.rebuilt} of the alerts rebuilt from the outbox's notifications"
        return text + (f" (not readable: {'; '.join(self.unread)})" if self.unread else "")


def salvage_alert_state(path: str) -> SalvagedState:
    """The active instances and queued notifications still readable in the (corrupt) store at ``path``;
    if the instances' table is damaged, the firing alerts are rebuilt from the outbox's notifications."""
    instances, instance_error = _read(
        path,
        f"SELECT {_INSTANCE_COLUMNS} FROM alert_instances",  # noqa: S608
        _instance,
    )
    rebuilt: list[AlertInstance] = []
    if instance_error:
        known = {i.fingerprint for i in instances}
        bodies, _ = _read(path, "SELECT kind, payload FROM alert_outbox ORDER BY id", _kind_and_body)
        rebuilt = [i for i in firing_from_outbox(bodies) if i.fingerprint not in known]
    queued, queued_error = _read(
        path,
        f"SELECT {_OUTBOX_COLUMNS} FROM alert_outbox WHERE status = 'queued' ORDER BY id",  # noqa: S608
        _delivery,
    )
    unread = tuple(
        f"{table}: {error}"
        for table, error in (("alert_instances", instance_error), ("alert_outbox", queued_error))
        if error
    )
    return SalvagedState(tuple(instances + rebuilt), tuple(queued), unread, len(rebuilt))


def _read(path: str, sql: str, parse: Callable[[tuple[object, ...]], T]) -> tuple[list[T], str]:
    """The rows of ``sql`` that parse, from the reading that got most; and the error that cut it short."""
    best: list[T] | None = None
    error = ""
    for immutable in (False, True):
        rows: list[T] = []
        failed = ""
        try:
            connection = sqlite3.connect(read_only_uri(path, immutable=immutable), uri=True, timeout=1.0)
            # A file cut short is refused whole ("malformed": its header counts more pages than it has);
            # with writable_schema SQLite reads the pages that are there. Nothing is written: read-only.
            connection.execute("PRAGMA writable_schema = ON")
        except sqlite3.Error as exc:
            failed = str(exc)
        else:
            try:
                for row in connection.execute(sql):
                    try:
                        rows.append(parse(row))
                    except (ValueError, TypeError):  # a row whose bytes are damaged: skip it
                        continue
            except sqlite3.Error as exc:
                failed = str(exc)
            finally:
                connection.close()
        # Both readings, always: a WAL from another database reads cleanly, as that database's rows.
        if best is None or len(rows) > len(best) or (len(rows) == len(best) and not failed):
            best, error = rows, failed
    return best or [], error


def _kind_and_body(row: tuple[object, ...]) -> tuple[str, str]:
    return str(row[0]), str(row[1])


def firing_from_outbox(bodies: Sequence[tuple[str, str]]) -> list[AlertInstance]:
    """The alerts whose last notification (oldest to newest ``(kind, payload)``) said firing, as instances
    firing since their ``startsAt``: the engine keeps them without paging again, and resolves them (with a
    notification) if the condition has cleared. Only webhook bodies say firing or resolved (Alertmanager's
    do not), and only per-target alerts name their instance in a label (``target``); SLO alerts, without
    one, start over."""
    last: dict[str, dict[str, Any]] = {}
    for kind, payload in bodies:
        if kind != "webhook":
            continue
        try:
            alerts = json.loads(payload)["alerts"]
        except (ValueError, KeyError, TypeError):
            continue  # a damaged body
        for alert in alerts:
            if not isinstance(alert, dict) or not alert.get("fingerprint"):
                continue
            if alert.get("status") == "firing":
                last[str(alert["fingerprint"])] = alert
            else:
                last.pop(str(alert["fingerprint"]), None)
    rebuilt = []
    for fp, alert in last.items():
        try:
            labels = {str(k): str(v) for k, v in dict(alert["labels"]).items()}
            annotations = {str(k): str(v) for k, v in dict(alert.get("annotations", {})).items()}
            started = datetime.fromisoformat(str(alert["startsAt"])).timestamp()
        except (KeyError, TypeError, ValueError):
            continue
        if "target" not in labels or "alertname" not in labels:
            continue
        rebuilt.append(
            AlertInstance(
                rule=labels["alertname"],
                target=labels["target"],
                state=AlertState.FIRING,
                since=started,
                active_since=started,
                fired_at=started,
                last_eval_ts=started,
                value=None,
                labels=tuple(sorted(labels.items())),
                annotations=tuple(sorted(annotations.items())),
                fingerprint=fp,
                last_active_ts=started,
            )
        )
    return rebuilt
