"""Alert persistence in the history's SQLite file: active instances, transitions, and the notification outbox.

One transaction per evaluation writes the new states, their transitions and the notifications they cause, so a
crash leaves either all or none of them; a restart reloads the states (nothing re-notified) and resumes
delivery.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from alerts.model import AlertInstance, AlertState, AlertTransition, Delivery, OutboxItem, Pairs
from collectors.errors import StoreError
from collectors.store.connections import ThreadConnections
from collectors.store.where import placeholders, ts_and_targets

SCHEMA_VERSION = 2  # 2: alert_outbox.group_key

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS alert_instances (
    fingerprint TEXT PRIMARY KEY, rule TEXT NOT NULL, target TEXT NOT NULL, state TEXT NOT NULL,
    since REAL NOT NULL, active_since REAL NOT NULL, fired_at REAL, last_active_ts REAL,
    last_eval_ts REAL NOT NULL,
    value REAL, labels TEXT NOT NULL, annotations TEXT NOT NULL, suspended INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS alert_instances_target ON alert_instances (target);
CREATE TABLE IF NOT EXISTS alert_transitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, rule TEXT NOT NULL, target TEXT NOT NULL,
    fingerprint TEXT NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL, value REAL,
    labels TEXT NOT NULL, annotations TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_transitions_ts ON alert_transitions (ts);
CREATE INDEX IF NOT EXISTS alert_transitions_target_ts ON alert_transitions (target, ts);
CREATE TABLE IF NOT EXISTS alert_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, receiver TEXT NOT NULL, kind TEXT NOT NULL,
    created_ts REAL NOT NULL,
    payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'queued', attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ts REAL NOT NULL, delivered_ts REAL, last_error TEXT NOT NULL DEFAULT '',
    group_key TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS alert_outbox_queue ON alert_outbox (receiver, status, id);
"""

# SQL text below is built only from these constant column lists and "?" placeholders (hence the S608 noqa):
# every value is bound as a parameter.
_INSTANCE_COLUMNS = (
    "fingerprint, rule, target, state, since, active_since, fired_at, last_active_ts, last_eval_ts, value, "
    "labels, annotations, suspended"
)
_TRANSITION_COLUMNS = "ts, rule, target, fingerprint, from_state, to_state, value, labels, annotations"
_OUTBOX_COLUMNS = (
    "id, receiver, kind, created_ts, status, attempts, next_attempt_ts, delivered_ts, last_error, payload, "
    "group_key"
)
_QUEUE_COLUMNS = "receiver, kind, created_ts, payload, next_attempt_ts, group_key"
_STATE_ORDER = "CASE state WHEN 'firing' THEN 0 ELSE 1 END"
_SEVERITY_ORDER = (
    "CASE json_extract(labels, '$.severity') WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END"
)


def _insert(statement: str, columns: str) -> str:
    return f"{statement} ({columns}) VALUES ({placeholders(columns.split(','))})"


def _instance_row(i: AlertInstance) -> tuple[object, ...]:
    return (
        i.fingerprint, i.rule, i.target, i.state.value, i.since, i.active_since, i.fired_at, i.last_active_ts,
        i.last_eval_ts, i.value, _dump(i.labels), _dump(i.annotations), int(i.suspended),
    )  # fmt: skip


def _upsert_instances(connection: sqlite3.Connection, instances: Iterable[AlertInstance]) -> None:
    """Write each instance as it is now (as evaluated, or as salvaged from a store moved aside)."""
    sql = _insert("INSERT OR REPLACE INTO alert_instances", _INSTANCE_COLUMNS)
    connection.executemany(sql, [_instance_row(i) for i in instances])


def _transition_row(t: AlertTransition) -> tuple[object, ...]:
    return (
        t.ts, t.rule, t.target, t.fingerprint, t.from_state.value, t.to_state.value, t.value, _dump(t.labels),
        _dump(t.annotations),
    )  # fmt: skip


def _dump(pairs: Pairs) -> str:
    return json.dumps(dict(pairs), sort_keys=True)


def _load(text: object) -> Pairs:
    return tuple(sorted(json.loads(str(text)).items()))


def _float(value: object) -> float | None:
    return None if value is None else float(str(value))


class AlertStateStore:
    """Alert tables in one SQLite file (usually ``config.store.path``); safe to open from any thread or
    process.

    Read API for the views: ``active()``, ``transitions(start_ts, end_ts, targets)``, ``deliveries()``.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = str(path)
        self._connections = ThreadConnections(self.path, busy_timeout_s=busy_timeout_s, what="alert store")
        self._migrate()

    # -- plumbing --------------------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        return self._connections.get()

    def _migrate(self) -> None:
        try:
            connection = self._connect()
            with connection:
                connection.executescript(_SCHEMA)
                columns = {str(r[1]) for r in connection.execute("PRAGMA table_info(alert_outbox)")}
                if "group_key" not in columns:  # version 1: its rows stay one ordered queue
                    connection.execute(
                        "ALTER TABLE alert_outbox ADD COLUMN group_key TEXT NOT NULL DEFAULT ''"
                    )
                row = connection.execute(
                    "SELECT value FROM alert_meta WHERE key = 'schema_version'"
                ).fetchone()
                if row is None:
                    connection.execute(
                        "INSERT INTO alert_meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                elif int(row[0]) < SCHEMA_VERSION:
                    connection.execute(
                        "UPDATE alert_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
                    )
                elif int(row[0]) > SCHEMA_VERSION:
                    raise StoreError(
                        f"alert tables in {self.path} have schema {row[0]}, newer than this specwatch "
                        f"({SCHEMA_VERSION}); upgrade specwatch or point store.path elsewhere"
                    )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot initialise alert tables in {self.path}: {exc}") from exc

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        return self._connections.query(sql, params)

    def _execute(self, sql: str, params: Sequence[object] = ()) -> int:
        try:
            connection = self._connect()
            with connection:
                return int(connection.execute(sql, params).rowcount)
        except sqlite3.Error as exc:
            raise StoreError(f"alert store {self.path}: write failed: {exc}") from exc

    # -- the engine's write: one transaction per evaluation --------------------------------------------------
    def commit(
        self,
        instances: Iterable[AlertInstance],
        removed: Iterable[str],
        transitions: Sequence[AlertTransition],
        outbox: Sequence[OutboxItem],
        now: float,
    ) -> None:
        """Upsert active instances, delete inactive ones, append transitions and notifications."""
        try:
            connection = self._connect()
            with connection:
                _upsert_instances(connection, instances)
                connection.executemany(
                    "DELETE FROM alert_instances WHERE fingerprint = ?", [(fp,) for fp in removed]
                )
                connection.executemany(
                    _insert("INSERT INTO alert_transitions", _TRANSITION_COLUMNS),
                    [_transition_row(t) for t in transitions],
                )
                connection.executemany(
                    _insert("INSERT INTO alert_outbox", _QUEUE_COLUMNS),
                    [(o.receiver, o.kind, now, o.payload, now, o.group_key) for o in outbox],
                )
        except sqlite3.Error as exc:
            raise StoreError(f"alert store {self.path}: write failed: {exc}") from exc

    # -- reads (views) ---------------------------------------------------------------------------------------
    def active(self, targets: Sequence[str] | None = None) -> list[AlertInstance]:
        """Pending and firing instances: firing first, then by severity, then oldest first."""
        where, params = "", []
        if targets is not None:
            if not targets:
                return []
            where = f"WHERE target IN ({placeholders(targets)})"
            params = list(targets)
        rows = self._query(
            f"SELECT {_INSTANCE_COLUMNS} FROM alert_instances {where} "  # noqa: S608
            f"ORDER BY {_STATE_ORDER}, {_SEVERITY_ORDER}, active_since, target, rule",
            params,
        )
        return [_instance(row) for row in rows]

    def firing_by_target(self) -> dict[str, list[AlertInstance]]:
        """Firing instances per target (the Fleet page's "firing alerts" column)."""
        result: dict[str, list[AlertInstance]] = {}
        for instance in self.active():
            if instance.state is AlertState.FIRING:
                result.setdefault(instance.target, []).append(instance)
        return result

    def transitions(
        self, start_ts: float, end_ts: float, targets: Sequence[str] | None = None, limit: int = 10_000
    ) -> list[AlertTransition]:
        """State changes in [start_ts, end_ts], oldest first (at most ``limit``, the newest kept)."""
        if targets is not None and not targets:
            return []
        where, params = ts_and_targets(start_ts, end_ts, targets)
        rows = self._query(
            f"SELECT {_TRANSITION_COLUMNS} FROM (SELECT id, {_TRANSITION_COLUMNS} FROM alert_transitions "  # noqa: S608
            f"WHERE {where} ORDER BY ts DESC, id DESC LIMIT ?) ORDER BY ts, id",
            [*params, limit],
        )
        return [
            AlertTransition(
                ts=float(str(ts)),
                rule=str(rule),
                target=str(target),
                fingerprint=str(fp),
                from_state=AlertState(str(from_state)),
                to_state=AlertState(str(to_state)),
                value=_float(value),
                labels=_load(labels),
                annotations=_load(annotations),
            )
            for ts, rule, target, fp, from_state, to_state, value, labels, annotations in rows
        ]

    def recently_resolved(self, since_ts: float) -> list[AlertTransition]:
        """Firing → inactive transitions since ``since_ts`` (the Alertmanager sender re-sends them)."""
        return [
            t
            for t in self.transitions(since_ts, float("inf"))
            if t.from_state is AlertState.FIRING and t.to_state is AlertState.INACTIVE
        ]

    # -- outbox (the notifier) -------------------------------------------------------------------------------
    def deliveries(
        self, limit: int = 100, receiver: str | None = None, status: str | None = None
    ) -> list[Delivery]:
        """The newest notifications (of ``receiver``, with ``status``) and how their delivery went."""
        clauses, params = [], []
        if receiver is not None:
            clauses.append("receiver = ?")
            params.append(receiver)
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._query(
            f"SELECT {_OUTBOX_COLUMNS} FROM alert_outbox {where} ORDER BY id DESC LIMIT ?",  # noqa: S608
            [*params, limit],
        )
        return [_delivery(row) for row in rows]

    def next_delivery(self, receiver: str) -> Delivery | None:
        """The oldest queued notification for ``receiver``."""
        rows = self._query(
            f"SELECT {_OUTBOX_COLUMNS} FROM alert_outbox "  # noqa: S608
            "WHERE receiver = ? AND status = 'queued' ORDER BY created_ts, id LIMIT 1",
            [receiver],
        )
        return _delivery(rows[0]) if rows else None

    def group_heads(self, receiver: str, skip_ids: Sequence[int] = ()) -> list[Delivery]:
        """The oldest queued notification of each group for ``receiver`` (ids in ``skip_ids`` are done
        already, their mark not yet written): within a group a resolution never overtakes its firing; across
        groups nothing waits."""
        skip = f"AND id NOT IN ({placeholders(skip_ids)})" if skip_ids else ""
        rows = self._query(
            f"SELECT {_OUTBOX_COLUMNS} FROM (SELECT {_OUTBOX_COLUMNS}, ROW_NUMBER() OVER ("  # noqa: S608
            "PARTITION BY group_key ORDER BY created_ts, id) AS place FROM alert_outbox "
            f"WHERE receiver = ? AND status = 'queued' {skip}) WHERE place = 1 ORDER BY created_ts, id",
            [receiver, *skip_ids],
        )
        return [_delivery(row) for row in rows]

    def outbox_counts(self) -> dict[tuple[str, str], int]:
        """(receiver, status) → number of notifications (the collector's /metrics and the Alerts page)."""
        rows = self._query("SELECT receiver, status, COUNT(*) FROM alert_outbox GROUP BY receiver, status")
        return {(str(r), str(s)): int(str(n)) for r, s, n in rows}

    def oldest_queued_ts(self, receiver: str) -> float | None:
        rows = self._query(
            "SELECT MIN(created_ts) FROM alert_outbox WHERE receiver = ? AND status = 'queued'", [receiver]
        )
        return _float(rows[0][0]) if rows else None

    def queued_count(self, receiver: str | None = None) -> int:
        where, params = "status = 'queued'", []
        if receiver is not None:
            where += " AND receiver = ?"
            params.append(receiver)
        return int(str(self._query(f"SELECT COUNT(*) FROM alert_outbox WHERE {where}", params)[0][0]))  # noqa: S608

    def receivers_with_queue(self) -> list[str]:
        return [
            str(r[0])
            for r in self._query("SELECT DISTINCT receiver FROM alert_outbox WHERE status = 'queued'")
        ]

    def rename_receiver(self, old: str, new: str) -> None:
        self._execute("UPDATE alert_outbox SET receiver = ? WHERE receiver = ?", (new, old))

    def mark_delivered(self, delivery_id: int, ts: float, attempts: int | None = None) -> None:
        self._execute(
            "UPDATE alert_outbox SET status = 'delivered', delivered_ts = ?, "
            "attempts = COALESCE(?, attempts + 1) WHERE id = ?",
            (ts, attempts, delivery_id),
        )

    def mark_retry(
        self, delivery_id: int, next_attempt_ts: float, error: str, attempts: int | None = None
    ) -> None:
        self._execute(
            "UPDATE alert_outbox SET attempts = COALESCE(?, attempts + 1), next_attempt_ts = ?, "
            "last_error = ? WHERE id = ? AND status = 'queued'",
            (attempts, next_attempt_ts, error[:500], delivery_id),
        )

    def mark_failed(self, delivery_id: int, error: str, attempts: int | None = None) -> None:
        """Give up on a notification (kept, shown); ``attempts`` sets the count, else one more attempt."""
        self._execute(
            "UPDATE alert_outbox SET status = 'failed', attempts = COALESCE(?, attempts + 1), last_error = ? "
            "WHERE id = ? AND status = 'queued'",
            (attempts, error[:500], delivery_id),
        )

    def split(self, delivery_id: int, payloads: Sequence[str], error: str) -> None:
        """Replace a refused-as-too-large notification by ``payloads`` (same receiver, group and place in the
        group's order), in one transaction: the original is kept as 'split'."""
        try:
            connection = self._connect()
            with connection:
                row = connection.execute(
                    "SELECT receiver, kind, created_ts, next_attempt_ts, group_key FROM alert_outbox "
                    "WHERE id = ? AND status = 'queued'",
                    (delivery_id,),
                ).fetchone()
                if row is None:
                    return
                receiver, kind, created_ts, next_ts, group = row
                connection.execute(
                    "UPDATE alert_outbox SET status = 'split', attempts = attempts + 1, last_error = ? "
                    "WHERE id = ?",
                    (error[:500], delivery_id),
                )
                connection.executemany(
                    _insert("INSERT INTO alert_outbox", _QUEUE_COLUMNS),
                    [(receiver, kind, created_ts, p, next_ts, group) for p in payloads],
                )
        except sqlite3.Error as exc:
            raise StoreError(f"alert store {self.path}: write failed: {exc}") from exc

    def adopt(self, instances: Sequence[AlertInstance], queued: Sequence[Delivery]) -> None:
        """Alert state salvaged from a store moved aside as corrupt (``alerts.salvage``), in one transaction:
        the instances as they were, the queued notifications under their old ids (an id the notifier holds
        in memory still names the same row)."""
        try:
            connection = self._connect()
            with connection:
                _upsert_instances(connection, instances)
                connection.executemany(
                    _insert("INSERT OR IGNORE INTO alert_outbox", _OUTBOX_COLUMNS),
                    [
                        (d.id, d.receiver, d.kind, d.created_ts, d.status, d.attempts, d.next_attempt_ts,
                         d.delivered_ts, d.last_error, d.payload, d.group_key)
                        for d in queued
                    ],
                )  # fmt: skip
        except sqlite3.Error as exc:
            raise StoreError(f"alert store {self.path}: write failed: {exc}") from exc

    # -- housekeeping ----------------------------------------------------------------------------------------
    def prune(self, older_than_ts: float) -> int:
        """Drop transitions and finished deliveries older than ``older_than_ts``; queued ones are kept."""
        try:
            connection = self._connect()
            with connection:
                removed = connection.execute(
                    "DELETE FROM alert_transitions WHERE ts < ?", (older_than_ts,)
                ).rowcount
                connection.execute(
                    "DELETE FROM alert_outbox WHERE status != 'queued' AND created_ts < ?", (older_than_ts,)
                )
            return int(removed)
        except sqlite3.Error as exc:
            raise StoreError(f"alert store {self.path}: prune failed: {exc}") from exc

    def close(self) -> None:
        self._connections.close_all()


def _instance(row: Sequence[object]) -> AlertInstance:
    (
        fp,
        rule,
        target,
        state,
        since,
        active_since,
        fired_at,
        last_active,
        last_eval,
        value,
        labels,
        ann,
        susp,
    ) = row
    return AlertInstance(
        rule=str(rule),
        target=str(target),
        state=AlertState(str(state)),
        since=float(str(since)),
        active_since=float(str(active_since)),
        fired_at=_float(fired_at),
        last_eval_ts=float(str(last_eval)),
        value=_float(value),
        labels=_load(labels),
        annotations=_load(ann),
        fingerprint=str(fp),
        suspended=bool(susp),
        last_active_ts=_float(last_active),
    )


def _delivery(row: Sequence[object]) -> Delivery:
    id_, receiver, kind, created, status, attempts, next_ts, delivered, error, payload, group = row
    return Delivery(
        id=int(str(id_)),
        receiver=str(receiver),
        kind=str(kind),
        created_ts=float(str(created)),
        status=str(status),
        attempts=int(str(attempts)),
        next_attempt_ts=float(str(next_ts)),
        delivered_ts=_float(delivered),
        last_error=str(error or ""),
        payload=str(payload),
        group_key=str(group or ""),
    )
