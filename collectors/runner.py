"""The collector loop: one cycle = collect every target, record events, append history, notify observers.

Nothing a target or the store does can stop the loop: bad targets become per-target errors, a failing store
keeps its unwritten rows in memory (bounded) until it recovers, and an exception in a cycle or an observer is
logged.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from collectors.errors import StoreError
from collectors.history import HistoryStore
from collectors.model import CollectorHealth, Event, Recipe, SourceHealth, TargetHealth, TargetSnapshot
from collectors.source import Source, make_source
from collectors.store.integrity import is_corruption
from collectors.store.watch import StoreFileWatch
from collectors.targets_file import TargetsFileLoad
from config import Config, ConfigError, Target, check_no_clash, load_targets_file

log = logging.getLogger(__name__)

CycleObserver = Callable[[Sequence[TargetSnapshot], Sequence[Event]], None]
# Called with a failed store write that SQLite blamed on a damaged file; returns the notice if the file was
# moved aside and a new store started at the path (``alerts.store_recovery``), else None.
CorruptStoreHandler = Callable[[BaseException], str | None]

MAX_PENDING_ROWS = 50_000  # snapshots kept in memory while the store fails (≈ 8 min of a 500-server fleet)
MAX_PENDING_EVENTS = 10_000
PRUNE_EVERY_S = 600.0
TARGETS_FILE_TIMEOUT_S = 10.0  # a targets_file read taking longer is reported (the old targets stay)


def describe_recipe_change(old: Recipe, new: Recipe) -> str:
    return f"{old.recipe_id} → {new.recipe_id}: " + ", ".join(new.changes_from(old))


# A targets_file whose inode changed this recently is read again at the next cycle even if its signature did
# not change: a save in the same clock tick as our stat (file times move in kernel ticks, 1-10 ms, before
# Linux 6.13; NFS's can be coarser) with the same size would otherwise never be seen — "racy git"'s problem,
# and its answer (issue 23, a file rewritten 100 times a second).
_RACY_NS = 2_000_000_000


def _file_signature(path: str) -> tuple[int, int, int, int] | None:
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    # ctime too: a rewrite that keeps the old mtime (rsync -t, cp -p, tar) still moves it; utime cannot.
    return (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)


def _racy(signature: tuple[int, int, int, int] | None) -> bool:
    # A ctime in the future (an NFS server's clock ahead of ours) is not racy, or it is re-read every cycle.
    return signature is not None and 0 <= time.time_ns() - signature[1] < _RACY_NS


class Collector:
    """Scrapes the fleet every ``scrape.interval_s``, keeps history, and tells observers about each cycle.

    ``source``: where snapshots come from, handed in by whoever made it (and closes it): the history's own
    Prometheus source (``open_history``), so a process builds one; None: the source ``config`` names, made
    here and closed with the collector.
    """

    def __init__(
        self,
        config: Config,
        store: HistoryStore,
        *,
        clock: Callable[[], float] = time.time,
        observers: Sequence[CycleObserver] = (),
        source: Source | None = None,
        max_pending_rows: int = MAX_PENDING_ROWS,
        on_corrupt_store: CorruptStoreHandler | None = None,
        store_notice: str | None = None,
    ) -> None:
        self._config = config
        self._on_corrupt_store = on_corrupt_store
        self._store_notice = store_notice
        self._max_pending_rows = max_pending_rows
        self._store = store
        self._clock = clock
        self._observers: list[CycleObserver] = list(observers)
        self._cycle_lock = threading.Lock()

        # Targets: the inline ones plus the targets_file, which is re-read when it changes.
        self._file_sig: tuple[int, int, int, int] | None = None
        self._file_racy = False
        self._file_load: TargetsFileLoad | None = None
        file_targets: tuple[Target, ...] = ()
        if config.targets_file:
            self._file_sig = _file_signature(config.targets_file)
            self._file_racy = _racy(self._file_sig)
            file_targets = load_targets_file(config.targets_file)
        file_names = {t.name for t in file_targets}
        self._inline_targets = tuple(t for t in config.targets if t.name not in file_names)
        self._targets: tuple[Target, ...] = self._inline_targets + file_targets

        self._own_source = source is None
        if source is not None:
            source.update_targets(self._targets)  # the targets_file's too
        self._source = source if source is not None else make_source(config, self._targets, clock=clock)

        # Per-target bookkeeping (touched only under the cycle lock; readers get replaced copies).
        self._last_up: dict[str, bool] = {}
        self._recipes: dict[str, Recipe] = {}
        self._last_success: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._latest: tuple[TargetSnapshot, ...] = ()
        self._health_targets: tuple[TargetHealth, ...] = ()
        self._source_health = SourceHealth(config.source)

        # Store bookkeeping.
        self._pending_rows: deque[TargetSnapshot] = deque()
        self._pending_events: deque[Event] = deque()
        self._pending_recipes: dict[str, tuple[Recipe, float]] = {}
        self._stored_recipe_ids: set[str] = set()
        self._dropped_rows = 0
        self._store_error: str | None = None
        path = getattr(store, "path", None)
        self._store_watch = StoreFileWatch(path) if isinstance(path, str) and path else None
        self._store_file_problem: str | None = None
        self._next_prune = 0.0
        self._config_error: str | None = None
        self._config_events: list[Event] = []

        self._labels: dict[str, dict[str, str]] = {}
        self._labels_of: tuple[Target, ...] | None = None
        self._cycles = 0
        self._last_cycle_ts: float | None = None
        self._last_cycle_duration_s: float | None = None

    # -- read side (any thread) -----------------------------------------------------------------------------
    @property
    def targets(self) -> tuple[Target, ...]:
        """The current targets; a changed targets_file is picked up here or at the next cycle."""
        if self._cycle_lock.acquire(blocking=False):
            try:
                self._refresh_targets()
            finally:
                self._cycle_lock.release()
        return self._targets

    def target_labels(self, target: str) -> Mapping[str, str]:
        """A target's configured labels ({} for one not configured now): SLO scopes read them."""
        targets = self._targets
        if self._labels_of is not targets:
            self._labels = {t.name: dict(t.labels) for t in targets}
            self._labels_of = targets
        return self._labels.get(target, {})

    def recipe(self, target: str) -> Recipe | None:
        """The recipe in force for ``target`` (None until its /server_info was read)."""
        return self._recipes.get(target)

    def latest(self) -> tuple[TargetSnapshot, ...]:
        """The snapshots of the last cycle, in target order."""
        return self._latest

    def health(self) -> CollectorHealth:
        return CollectorHealth(
            cycles=self._cycles,
            last_cycle_ts=self._last_cycle_ts,
            last_cycle_duration_s=self._last_cycle_duration_s,
            store_error=self._store_file_problem or self._store_error,
            pending_rows=len(self._pending_rows),
            dropped_rows=self._dropped_rows,
            config_error=self._config_error,
            targets=self._health_targets,
            source=self._source_health,
            store_notice=self._store_notice,
        )

    def source_health(self) -> SourceHealth:
        """How the source answered the last cycle (the alert engine's SourceDown reads it)."""
        return self._source_health

    def add_observer(self, observer: CycleObserver) -> None:
        self._observers.append(observer)

    # -- the loop -------------------------------------------------------------------------------------------
    def run_cycle(self) -> list[TargetSnapshot]:
        """Scrape all targets concurrently, derive, append to the store, record events, call the observers."""
        with self._cycle_lock:
            started = time.monotonic()
            self._refresh_targets()
            now = self._clock()
            snapshots = self._source.collect(now)
            self._source_health = self._source.health()
            events = self._source.drain_events() + self._config_events
            self._config_events = []
            events += self._track(snapshots, now)
            self._queue(snapshots, events)
            self._flush_locked()
            self._check_store_file()
            self._prune_if_due(now)
            self._latest = tuple(snapshots)
            self._cycles += 1
            self._last_cycle_ts = now
            self._last_cycle_duration_s = time.monotonic() - started
        for observer in list(self._observers):
            try:
                observer(snapshots, events)
            except Exception:
                log.exception("cycle observer %r failed; the collector carries on", observer)
        return snapshots

    def run_forever(self, stop: threading.Event) -> None:
        """A cycle every ``scrape.interval_s`` until ``stop`` is set; then flush what the store still owes."""
        interval_s = self._config.scrape.interval_s
        next_start = time.monotonic()
        while not stop.is_set():
            try:
                self.run_cycle()
            except Exception:
                log.exception("collector cycle failed; the next cycle runs as planned")
            next_start += interval_s
            now = time.monotonic()
            if next_start < now:
                log.warning(
                    "a cycle took longer than scrape.interval_s (%.1f s); starting the next one now",
                    interval_s,
                )
                next_start = now
            stop.wait(next_start - now)
        self.flush()

    def flush(self) -> bool:
        """Try to write everything pending; True when nothing is left in memory."""
        with self._cycle_lock:
            return self._flush_locked()

    def close(self) -> None:
        """Flush, and close the source if this collector made it."""
        self.flush()
        if self._own_source:
            self._source.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- targets --------------------------------------------------------------------------------------------
    def _refresh_targets(self) -> None:
        path = self._config.targets_file
        if not path:
            return
        if self._file_load is None:
            signature = _file_signature(path)
            if signature == self._file_sig and not self._file_racy:
                return
            self._file_sig = signature
            self._file_racy = _racy(signature)
            self._file_load = TargetsFileLoad(path)
        # Read in its own thread: a slow or stuck file system costs the cycle at most this budget, and the
        # previous targets stay in force until a read completes.
        load = self._file_load
        if not load.done.wait(min(1.0, self._config.scrape.interval_s / 4)):
            waited_s = time.monotonic() - load.started
            if waited_s >= TARGETS_FILE_TIMEOUT_S:
                self._targets_file_failed(
                    ConfigError(path, "", f"a file read within {TARGETS_FILE_TIMEOUT_S:g} s", "no end yet")
                )
            return
        self._file_load = None
        try:
            if load.error is not None:
                raise load.error
            file_targets = load.targets
            check_no_clash(path, self._inline_targets, file_targets)
        except ConfigError as exc:
            self._targets_file_failed(exc)
            return
        self._config_error = None
        targets = self._inline_targets + file_targets
        if targets == self._targets:
            return
        before, after = {t.name for t in self._targets}, {t.name for t in targets}
        detail = (
            f"targets_file reloaded: {len(targets)} targets (+{len(after - before)}, -{len(before - after)})"
        )
        log.info(detail)
        self._config_events.append(Event(self._clock(), "", "config", detail))
        self._targets = targets
        self._source.update_targets(targets)

    # -- events and health ----------------------------------------------------------------------------------
    def _track(self, snapshots: Sequence[TargetSnapshot], now: float) -> list[Event]:
        """up/down and recipe_change events; per-target health; recipes to store."""
        events: list[Event] = []
        names = {s.target for s in snapshots}
        for book in (self._last_up, self._last_success, self._failures):
            for gone in set(book) - names:
                del book[gone]
        recipes = {name: recipe for name, recipe in self._recipes.items() if name in names}
        health: list[TargetHealth] = []
        for snap in snapshots:
            was_up = self._last_up.get(snap.target)
            if snap.unknown:
                # The source could not say (Prometheus blind or partial): no up/down event, no failed scrape.
                self._failures.setdefault(snap.target, 0)
            else:
                if snap.up and was_up is False:
                    events.append(Event(snap.ts, snap.target, "up", "scrapes succeed again"))
                elif not snap.up and was_up is not False:
                    events.append(Event(snap.ts, snap.target, "down", snap.error or "scrape failed"))
                self._last_up[snap.target] = snap.up
                if snap.up:
                    self._last_success[snap.target] = snap.ts
                    self._failures[snap.target] = 0
                else:
                    self._failures[snap.target] = self._failures.get(snap.target, 0) + 1

            recipe = self._source.recipe(snap.target)
            if recipe is not None:
                old = recipes.get(snap.target)
                if old is not None and old.recipe_id != recipe.recipe_id:
                    events.append(
                        Event(snap.ts, snap.target, "recipe_change", describe_recipe_change(old, recipe))
                    )
                if recipe.recipe_id not in self._stored_recipe_ids:
                    self._pending_recipes.setdefault(recipe.recipe_id, (recipe, snap.ts))
                recipes[snap.target] = recipe

            last_success = self._last_success.get(snap.target)
            health.append(
                TargetHealth(
                    target=snap.target,
                    up=snap.up,
                    error=snap.error,
                    scrape_duration_s=snap.scrape_duration_s,
                    last_success_ts=last_success,
                    staleness_s=now - last_success if last_success is not None else None,
                    consecutive_failures=self._failures[snap.target],
                    recipe_id=snap.recipe_id,
                )
            )
        self._recipes = recipes
        self._health_targets = tuple(health)
        return events

    def _targets_file_failed(self, exc: ConfigError) -> None:
        if str(exc) != self._config_error:
            log.error(
                "targets_file not reloaded, keeping the previous %d targets: %s", len(self._targets), exc
            )
            self._config_events.append(
                Event(self._clock(), "", "config", f"targets_file not reloaded: {exc}")
            )
        self._config_error = str(exc)

    # -- store ----------------------------------------------------------------------------------------------
    def _queue(self, snapshots: Sequence[TargetSnapshot], events: Sequence[Event]) -> None:
        for snap in snapshots:
            if len(self._pending_rows) >= self._max_pending_rows:
                self._pending_rows.popleft()  # the oldest go first: recent history matters most on recovery
                self._dropped_rows += 1
            self._pending_rows.append(snap)
        for event in events:
            if len(self._pending_events) >= MAX_PENDING_EVENTS:
                self._pending_events.popleft()
            self._pending_events.append(event)

    def _flush_locked(self) -> bool:
        try:
            for recipe_id, (recipe, ts) in list(self._pending_recipes.items()):
                self._store.put_recipe(recipe, ts)
                del self._pending_recipes[recipe_id]
                self._stored_recipe_ids.add(recipe_id)
            if self._pending_events:
                self._store.add_events(list(self._pending_events))
                self._pending_events.clear()
            if self._pending_rows:
                self._store.append(list(self._pending_rows))
                self._pending_rows.clear()
        except (StoreError, sqlite3.Error, OSError) as exc:
            if self._on_corrupt_store is not None and is_corruption(exc) and self._recover_store(exc):
                return self._flush_locked()  # into the new store (a second corruption is held back)
            self._store_failed(exc)
            return False
        if self._store_error is not None:
            log.warning("history store writes succeed again; the rows kept in memory are written")
            self._store_error = None
        return True

    def _recover_store(self, exc: BaseException) -> bool:
        """The store file was moved aside and a new one started: write everything again from here."""
        assert self._on_corrupt_store is not None
        notice = self._on_corrupt_store(exc)
        if notice is None:
            return False
        self._store_notice = notice
        path = self._store_watch.path if self._store_watch is not None else None
        self._store_watch = StoreFileWatch(path) if path else None  # the new file is the one to watch
        self._store_file_problem = None
        now = self._clock()
        self._stored_recipe_ids.clear()  # the recipes in force go into the new store with the next write
        for recipe in self._recipes.values():
            self._pending_recipes.setdefault(recipe.recipe_id, (recipe, now))
        return True

    def _check_store_file(self) -> None:
        """Within a cycle of the file vanishing, being replaced or turning read-only: say so, once."""
        if self._store_watch is None:
            return
        problem = self._store_watch.problem()
        if problem == self._store_file_problem:
            return
        if problem is not None:
            log.error("%s", problem)
        else:
            log.warning("history store %s is writable again", self._store_watch.path)
        self._store_file_problem = problem

    def _store_failed(self, exc: BaseException) -> None:
        message = str(exc) if isinstance(exc, StoreError) else f"history store write failed: {exc}"
        # Once per change of the problem (the state stays on /metrics and the page), not once a cycle.
        if message != self._store_error:
            log.error(
                "%s; keeping %d rows in memory (at most %d) and retrying each cycle",
                message,
                len(self._pending_rows),
                self._max_pending_rows,
            )
        self._store_error = message

    def _prune_if_due(self, now: float) -> None:
        if time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + PRUNE_EVERY_S
        try:
            store = self._config.store
            removed = self._store.prune(
                now - store.retention_h * 3600.0,
                raw_older_than_ts=now - store.raw_retention_h * 3600.0,
                minute_older_than_ts=now - store.minute_retention_h * 3600.0,
            )
        except (StoreError, sqlite3.Error, OSError) as exc:
            self._store_failed(exc)
            return
        if removed:
            log.info("pruned %d history rows older than %g h", removed, self._config.store.retention_h)
