"""What alert state can still be read from a store moved aside as corrupt: the active instances (so a firing
alert is not notified again) and the queued notifications (so none is lost).

Read per table and row by row, keeping every row SQLite returns before it gives up on a damaged page; first
with the file's WAL, then (for a table that fails, e.g. a WAL from another database) from the main file
alone; a file cut short is read up to where it ends. What cannot be read is named, never guessed.
Transitions, delivered notifications, history, events, recipes, SLO counts and probes stay in the moved
file only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from alerts.model import AlertInstance, Delivery
from alerts.state_store import _INSTANCE_COLUMNS, _OUTBOX_COLUMNS, _delivery, _instance
from collectors.store.integrity import read_only_uri

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SalvagedState:
    instances: tuple[AlertInstance, ...] = ()
    queued: tuple[Delivery, ...] = ()
    unread: tuple[str, ...] = ()  # per table: why (some of) it could not be read

    def summary(self) -> str:
        """One clause for the log line and the banner."""
        text = (
            f"{len(self.instances)} active alert(s) and {len(self.queued)} queued notification(s) recovered"
        )
        return text + (f" (not readable: {'; '.join(self.unread)})" if self.unread else "")


def salvage_alert_state(path: str) -> SalvagedState:
    """The active instances and queued notifications still readable in the (corrupt) store at ``path``."""
    instances, instance_error = _read(
        path,
        f"SELECT {_INSTANCE_COLUMNS} FROM alert_instances",  # noqa: S608
        _instance,
    )
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
    return SalvagedState(tuple(instances), tuple(queued), unread)


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
