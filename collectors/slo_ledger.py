"""The SLO ledger: a collector cycle observer that adds each cycle's SLI events to every SLO scope they count
in, keeps the running sums in memory for the alert engine, and writes them to the SLO tables.

Sums are prefix sums per (SLO, scope) over minute buckets, so a burn rate over any window, up to the whole
period, is two bisects and a subtraction however long the window. At start they are rebuilt from the store,
so a restart keeps the budget spent and the burn windows full.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from collectors.errors import StoreError
from collectors.model import Event, TargetSnapshot
from collectors.slo import EventCounts, Slo
from collectors.store.slo_counts import MINUTE_S, TARGET_BUCKET_S, MinuteRow, SloCountStore, TargetRow

log = logging.getLogger(__name__)

_NO_LABELS: Mapping[str, str] = {}
MAX_UNSAVED_ROWS = 200_000
TARGET_FLUSH_S = 60.0  # increments kept while the store fails (bounded; counted when dropped)
PRUNE_EVERY_S = 3600.0


class SloCounts(Protocol):
    """What reports read: the ledger in the collecting process, the store in a viewer."""

    def counts(self, slo: str, scope: str, start_ts: float, end_ts: float) -> EventCounts: ...

    def scopes(self, slo: str, since_ts: float) -> list[str]: ...

    def first_minute(self, slo: str, scope: str) -> int | None: ...

    def by_target(self, slo: str, start_ts: float, end_ts: float) -> dict[str, EventCounts]: ...

    def minutes(
        self, slo: str, scope: str, start_ts: float, end_ts: float
    ) -> list[tuple[int, float, float]]: ...


class _Sums:
    """Prefix sums over minute buckets of one SLO and scope (appends only at the end; old ones trimmed)."""

    __slots__ = ("good", "minutes", "total")

    def __init__(self) -> None:
        self.minutes: list[int] = []
        self.good: list[float] = []  # cumulative, including that minute
        self.total: list[float] = []

    def add(self, minute_ts: int, good: float, total: float) -> None:
        if self.minutes and minute_ts == self.minutes[-1]:
            self.good[-1] += good
            self.total[-1] += total
            return
        if self.minutes and minute_ts < self.minutes[-1]:
            # A late minute (a clock step back): counted in the newest bucket rather than rewriting sums.
            minute_ts = self.minutes[-1]
            self.good[-1] += good
            self.total[-1] += total
            return
        self.minutes.append(minute_ts)
        self.good.append((self.good[-1] if self.good else 0.0) + good)
        self.total.append((self.total[-1] if self.total else 0.0) + total)

    def between(self, start_ts: float, end_ts: float) -> EventCounts:
        i = bisect.bisect_left(self.minutes, start_ts)
        j = bisect.bisect_left(self.minutes, end_ts)
        if j <= i:
            return EventCounts()
        good = self.good[j - 1] - (self.good[i - 1] if i else 0.0)
        total = self.total[j - 1] - (self.total[i - 1] if i else 0.0)
        return EventCounts(max(good, 0.0), max(total, 0.0))

    def trim(self, before_ts: float) -> None:
        cut = bisect.bisect_left(self.minutes, before_ts)
        if cut:
            del self.minutes[:cut], self.good[:cut], self.total[:cut]


class SloLedger:
    """Counts every SLO's events per scope; use it as a ``CycleObserver`` of the collector.

    ``labels`` gives a target's configured labels (scopes and ``match`` read them); without it a target's
    labels are just its deployment.
    """

    def __init__(
        self,
        slos: Sequence[Slo],
        store: SloCountStore | None,
        *,
        labels: Callable[[str], Mapping[str, str]] | None = None,
        clock: Callable[[], float] = time.time,
        keep_sums: bool = True,
    ) -> None:
        self.slos = tuple(slos)
        self._keep_sums = keep_sums  # False: only the store is written (a backfill in any time order)
        self._store = store
        self._labels = labels
        self._clock = clock
        self._lock = threading.Lock()
        self._sums: dict[tuple[str, str], _Sums] = {}
        self._unsaved: dict[tuple[str, str, int], list[float]] = {}
        self._targets: dict[tuple[str, str, int], list[float]] = {}  # the open 5-minute buckets per target
        # target → (its labels mapping, deployment, SLI key → (SLO name, scope keys) covering it).
        self._scope_cache: dict[
            str, tuple[Mapping[str, str], str, dict[str, list[tuple[str, tuple[str, ...]]]]]
        ] = {}
        self._dropped = 0
        self._next_prune_ts = 0.0
        self._next_target_flush_ts = 0.0
        self.store_error: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def restore(self) -> int:
        """Rebuild the sums from the store (each SLO's period); returns the minutes read."""
        if self._store is None:
            return 0
        now = self._clock()
        read = 0
        with self._lock:
            for slo in self.slos:
                try:
                    for scope in self._store.scopes(slo.name, now - slo.window_s):
                        sums = self._sums.setdefault((slo.name, scope), _Sums())
                        for minute_ts, good, total in self._store.minutes(
                            slo.name, scope, now - slo.window_s, now + MINUTE_S
                        ):
                            sums.add(minute_ts, good, total)
                            read += 1
                except StoreError as exc:
                    log.warning("SLO history not restored (budgets start from now): %s", exc)
        return read

    def reload(self) -> int:
        """Rebuild the sums from the store after another writer added to it (the demo's synthesised day,
        written beside the live collector): what this ledger counted is in the store too, so nothing is
        lost or counted twice. Returns the minutes read."""
        with self._lock:
            self._flush(final=True)
            if self._unsaved:
                return 0  # the store is failing: keep the sums we have
            self._sums.clear()
        return self.restore()

    def close(self) -> None:
        """Write what is still open (the current 5-minute target buckets)."""
        with self._lock:
            self._flush(final=True)

    # -- the observer ----------------------------------------------------------------------------------------
    def __call__(self, snapshots: Sequence[TargetSnapshot], events: Sequence[Event]) -> None:
        self.observe(snapshots)

    def observe(self, snapshots: Sequence[TargetSnapshot]) -> None:
        if not self.slos:
            return
        with self._lock:
            # One cycle's events summed per (SLO, scope, minute) first: a thousand servers make a few dozen
            # additions to the running sums, not thousands.
            cycle: dict[tuple[str, str, int], list[float]] = {}
            targets = self._targets
            for snapshot in snapshots:
                if not snapshot.slo_events:
                    continue
                minute = int(snapshot.ts // MINUTE_S * MINUTE_S)
                bucket = int(snapshot.ts // TARGET_BUCKET_S * TARGET_BUCKET_S)
                covering = self._scopes_of(snapshot)
                for sli_key, good, total in snapshot.slo_events:
                    if total <= 0:
                        continue
                    for name, scope_keys in covering.get(sli_key, ()):
                        for scope_key in scope_keys:
                            row = cycle.setdefault((name, scope_key, minute), [0.0, 0.0])
                            row[0] += good
                            row[1] += total
                        row = targets.setdefault((name, snapshot.target, bucket), [0.0, 0.0])
                        row[0] += good
                        row[1] += total
            for (name, scope_key, minute), (good, total) in cycle.items():
                if self._keep_sums:
                    self._sums.setdefault((name, scope_key), _Sums()).add(minute, good, total)
                row = self._unsaved.setdefault((name, scope_key, minute), [0.0, 0.0])
                row[0] += good
                row[1] += total
            self._flush(final=False)
            self._prune_if_due()

    def _scopes_of(self, snapshot: TargetSnapshot) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
        """SLI key → (SLO name, scope keys) of the SLOs covering a target. Cached per target while its
        labels are the same mapping (the collector hands out one per configured target, replaced when the
        targets change; the cache holds it, so its identity cannot be reused) and deployment."""
        configured = self._labels(snapshot.target) if self._labels is not None else _NO_LABELS
        cached = self._scope_cache.get(snapshot.target)
        if cached is not None and cached[0] is configured and cached[1] == snapshot.deployment:
            return cached[2]
        labels = dict(configured)
        if snapshot.deployment:
            labels.setdefault("deployment", snapshot.deployment)
        found: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for slo in self.slos:
            if scopes := slo.scopes(labels):
                found.setdefault(slo.sli.key, []).append((slo.name, tuple(s.key for s in scopes)))
        if len(self._scope_cache) > 100_000:  # targets come and go (targets_file): stay bounded
            self._scope_cache.clear()
        self._scope_cache[snapshot.target] = (configured, snapshot.deployment, found)
        return found

    def _flush(self, *, final: bool) -> None:
        if self._store is None:
            self._unsaved.clear()
            self._targets.clear()
            return
        # Per-server increments go out once a minute (a viewer lists the servers that burned without
        # waiting for their 5-minute bucket to close; adding increments keeps partial writes exact), not
        # every cycle: at 1,000 servers × 4 SLOs that is 4,000 upserts a minute instead of every 5 s.
        now = self._clock()
        due = final or now >= self._next_target_flush_ts
        if due:
            self._next_target_flush_ts = now + TARGET_FLUSH_S
        closed = list(self._targets) if due else []
        minutes = [MinuteRow(s, scope, m, g, t) for (s, scope, m), (g, t) in self._unsaved.items()]
        targets = [TargetRow(s, target, b, *self._targets[(s, target, b)]) for s, target, b in closed]
        try:
            self._store.add(minutes, targets)
        except StoreError as exc:
            if self.store_error is None:
                log.warning("SLO counts not written (kept in memory, retried every cycle): %s", exc)
            self.store_error = str(exc)
            if len(self._unsaved) > MAX_UNSAVED_ROWS:
                self._dropped += len(self._unsaved)
                self._unsaved.clear()
                log.error("SLO counts dropped after the store failed too long (%d rows)", self._dropped)
            return
        self.store_error = None
        self._unsaved.clear()
        for key in closed:
            del self._targets[key]

    def _prune_if_due(self) -> None:
        now = self._clock()
        if now < self._next_prune_ts:
            return
        self._next_prune_ts = now + PRUNE_EVERY_S
        periods = {slo.name: slo.window_s for slo in self.slos}
        for (name, _), sums in self._sums.items():
            sums.trim(now - periods.get(name, 0.0) - MINUTE_S)
        if self._store is not None:
            try:
                self._store.prune(periods, now)
            except StoreError as exc:
                log.warning("SLO counts not pruned: %s", exc)

    # -- reads (``SloCounts``) -------------------------------------------------------------------------------
    def counts(self, slo: str, scope: str, start_ts: float, end_ts: float) -> EventCounts:
        with self._lock:
            sums = self._sums.get((slo, scope))
            return sums.between(start_ts, end_ts) if sums is not None else EventCounts()

    def scopes(self, slo: str, since_ts: float) -> list[str]:
        with self._lock:
            return sorted(
                scope
                for (name, scope), sums in self._sums.items()
                if name == slo and sums.minutes and sums.minutes[-1] >= since_ts
            )

    def first_minute(self, slo: str, scope: str) -> int | None:
        with self._lock:
            sums = self._sums.get((slo, scope))
            return sums.minutes[0] if sums is not None and sums.minutes else None

    def minutes(self, slo: str, scope: str, start_ts: float, end_ts: float) -> list[tuple[int, float, float]]:
        with self._lock:
            sums = self._sums.get((slo, scope))
            if sums is None:
                return []
            out: list[tuple[int, float, float]] = []
            previous_good = previous_total = 0.0
            for index, minute_ts in enumerate(sums.minutes):
                good, total = sums.good[index], sums.total[index]
                if start_ts <= minute_ts < end_ts:
                    out.append((minute_ts, good - previous_good, total - previous_total))
                previous_good, previous_total = good, total
            return out

    def by_target(self, slo: str, start_ts: float, end_ts: float) -> dict[str, EventCounts]:
        stored = self._store.by_target(slo, start_ts, end_ts) if self._store is not None else {}
        with self._lock:
            for (name, target, bucket), (good, total) in self._targets.items():
                if name == slo and start_ts <= bucket < end_ts:
                    stored[target] = stored.get(target, EventCounts()) + EventCounts(good, total)
        return stored
