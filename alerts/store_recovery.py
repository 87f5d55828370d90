"""A torn store found and survived: checked before the stores open, and again when a cycle's write says the
file is damaged; moved aside (never deleted), a new store started at the same path, the alert state that can
still be read carried over, and one loud log line plus a notice for the dashboard's sidebar.

Never a crash loop: a corrupt store at start is moved aside once and the daemon runs on the new one; while
running, a store is checked (and moved) at most once per ``min_interval_s``: found corrupt again sooner, its
rows wait in memory, as for any failing store, until the interval has passed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from alerts.salvage import SalvagedState, salvage_alert_state
from collectors.errors import StoreError
from collectors.store.integrity import (
    STORE_CHECK_TIMEOUT_S,
    check_store,
    is_corruption,
    quarantine,
    stamp_store_id,
    store_folder_problem,
)

log = logging.getLogger("specwatch.store")

RECOVER_EVERY_S = 600.0  # at most one move aside per 10 min while running


class StoreRecovery:
    """``at_start()`` before the stores open; ``during_run(exc, reopen)`` from the collector's cycle."""

    def __init__(
        self,
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        check_timeout_s: float = STORE_CHECK_TIMEOUT_S,
        min_interval_s: float = RECOVER_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.notice: str | None = None  # the last move aside in words (the sidebar banner)
        self._clock = clock
        self._check_timeout_s = check_timeout_s
        self._min_interval_s = min_interval_s
        self._monotonic = monotonic
        self._next_check = float("-inf")  # monotonic s: no check (and no move) mid-run before it
        self._held_back_logged = False

    def at_start(self) -> SalvagedState | None:
        """Move a torn store aside before anything opens it; the alert state read from it, or None if the
        store was sound. ``StoreError`` (the daemon's exit message) if its folder is read-only or refuses."""
        problem = store_folder_problem(self.path)
        if problem is not None:
            raise StoreError(problem)
        found = check_store(self.path, timeout_s=self._check_timeout_s)
        salvaged = None if found is None else self._move_aside(found)
        stamp_store_id(self.path)  # the id a WAL from another database is told apart by
        return salvaged

    def during_run(self, exc: BaseException, reopen: Callable[[], None]) -> SalvagedState | None:
        """After a failed write: if SQLite called the file damaged and ``quick_check`` agrees, move it aside
        and ``reopen`` (create the new store's tables); the salvaged state, or None (nothing moved)."""
        if not is_corruption(exc):
            return None
        now = self._monotonic()
        if now < self._next_check:
            if not self._held_back_logged:
                log.error(
                    "history store %s: writes say it is damaged, but it was checked or moved aside less "
                    "than %g s ago; not again before then: rows wait in memory",
                    self.path,
                    self._min_interval_s,
                )
                self._held_back_logged = True
            return None
        self._next_check, self._held_back_logged = now + self._min_interval_s, False
        # SQLite's word on a write is evidence enough when a large store cannot be checked in time.
        found = check_store(
            self.path,
            timeout_s=self._check_timeout_s,
            unfinished=f"{exc} (a write; quick_check did not finish within {self._check_timeout_s:g} s)",
        )
        if found is None:
            log.error("history store %s: a write said damaged, quick_check found it sound", self.path)
            return None
        try:
            salvaged = self._move_aside(found)
        except StoreError as exc_move:  # not retried before the interval is over either
            log.error("%s; rows wait in memory", exc_move)
            return None
        try:
            stamp_store_id(self.path)
            reopen()
        except StoreError as exc_open:  # the new store cannot be made: the next cycles report it
            log.error("%s; rows wait in memory", exc_open)
        return salvaged

    def _move_aside(self, problem: str) -> SalvagedState:
        wall = self._clock()
        moved = quarantine(self.path, wall)
        # A new store torn again at once (a failing disk) waits in memory rather than piling up moved files.
        self._next_check = self._monotonic() + self._min_interval_s
        salvaged = salvage_alert_state(moved)
        when = datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        self.notice = (
            f"The history store was corrupt ({problem}) and was moved aside to {moved} at {when}; a new "
            f"store started at {self.path}. {salvaged.summary()}; the history, events, recipes, alert "
            "transitions and SLO counts from before stay in the moved file."
        )
        log.error("HISTORY STORE CORRUPT: %s", self.notice)
        return salvaged
