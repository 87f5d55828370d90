"""Per-thread SQLite connections to one file in WAL mode, shared by the history and alert-state stores.

Streamlit runs every rerun in a fresh thread: connections of finished threads are closed when the next one is
opened, so a long-lived dashboard does not leak file handles. A file moved aside as corrupt
(``integrity.quarantine``) is left by every connection of this process at its next use: it reopens at the
path, on the new store.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from collectors.errors import StoreError

# (st_dev, st_ino) of store files this process moved aside: a connection still open on one is replaced.
_MOVED: set[tuple[int, int]] = set()
_MOVED_GUARD = threading.Lock()


def mark_moved(device: int, inode: int) -> None:
    """The file (device, inode) was moved aside: connections to it reopen at their path when next used."""
    with _MOVED_GUARD:
        _MOVED.add((device, inode))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)


class ThreadConnections:
    """One connection per thread (WAL: the collector writes while readers read); ``what`` names the store."""

    def __init__(self, path: str, *, busy_timeout_s: float, what: str) -> None:
        self.path = path
        self._busy_timeout_s = busy_timeout_s
        self._what = what
        self._local = threading.local()
        self._connections: dict[threading.Thread, sqlite3.Connection] = {}
        self._lock = threading.Lock()
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def get(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is not None and _MOVED and getattr(self._local, "identity", None) in _MOVED:
            # Closing is safe: SQLite sees the file was renamed and neither checkpoints into it nor
            # deletes the WAL now at the path (the new store's).
            with self._lock:
                self._connections.pop(threading.current_thread(), None)
            connection.close()
            connection = None
        if connection is None:
            try:
                connection = sqlite3.connect(self.path, timeout=self._busy_timeout_s, check_same_thread=False)
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open {self._what} {self.path}: {exc}") from exc
            self._local.connection = connection
            self._local.identity = _identity(self.path)
            with self._lock:
                for thread in [t for t in self._connections if not t.is_alive()]:
                    self._connections.pop(thread).close()
                self._connections[threading.current_thread()] = connection
        return connection

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """The rows of one read on this thread's connection; StoreError (naming the store) on failure."""
        try:
            return self.get().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self._what} {self.path}: read failed: {exc}") from exc

    def has_table(self, name: str) -> bool:
        """Whether the file holds table ``name`` yet (a reader may open it before any writer made it)."""
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def open_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def close_all(self) -> None:
        """Close every connection: this thread's and dead threads' at once; another live thread's when the
        last reference to it goes, which is at once unless that thread is using it right now (then at the end
        of that use). Closing a connection under another thread's ``execute`` is undefined behaviour in
        SQLite: an alert notifier's write crashed a test worker with a segmentation fault."""
        current = threading.current_thread()
        with self._lock:
            connections, self._connections = self._connections, {}
        self._local = threading.local()
        for thread, connection in connections.items():
            if thread is current or not thread.is_alive():
                connection.close()
