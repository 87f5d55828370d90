"""Probe sweeps on ``probes.interval_s``, in a thread of their own beside the collector (never in its cycle).

The collector's latest snapshot of each target supplies its recipe and its running / queued counts (for the
back-off); results go to the ``probes`` table of the history file. A restart picks up where the last run left
off: targets swept less than ``interval_s`` ago wait, and the hour's spend counts against the budget.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Protocol

from collectors.errors import StoreError
from collectors.model import CollectorHealth, Recipe, Signals, TargetSnapshot
from collectors.probe_result import ProbeResult
from collectors.probes.prober import HOUR_S
from collectors.probes.sender import Prober
from collectors.store.probes import ProbeStore
from config import Config, Target

log = logging.getLogger("specwatch.probes")
MAX_PARALLEL_TARGETS = 8  # sweeps of different targets overlap; one target never gets two at once
_PRUNE_EVERY_S = 3600.0


class Fleet(Protocol):
    """What the scheduler reads of the running collector (``collectors.runner.Collector``): the targets, their
    latest snapshots and recipes, and whether a first cycle has run."""

    @property
    def targets(self) -> Sequence[Target]: ...

    def latest(self) -> Sequence[TargetSnapshot]: ...

    def recipe(self, target: str) -> Recipe | None: ...

    def health(self) -> CollectorHealth: ...


class ProbeScheduler:
    """``run_due()`` sweeps every opted-in target whose interval has passed; ``start()`` does it forever."""

    def __init__(
        self,
        config: Config,
        collector: Fleet,
        store: ProbeStore,
        *,
        clock: Callable[[], float] = time.time,
        own_store: bool = False,
    ) -> None:
        self._config = config
        self._own_store = own_store
        self._collector = collector
        self._store = store
        self._clock = clock
        now = clock()
        try:
            spent = store.spent_since(now - HOUR_S)
            self._last_sweep = store.last_sweep_ts()
        except StoreError as exc:
            log.warning("probes: %s; starting with an empty budget ledger", exc)
            spent, self._last_sweep = [], {}
        self._stop = threading.Event()
        self.prober = Prober(config, clock=clock, spent=spent, stopping=self._stop)
        self._pool = ThreadPoolExecutor(MAX_PARALLEL_TARGETS, thread_name_prefix="specwatch-probe")
        self._thread: threading.Thread | None = None
        self._last_prune = now
        self.sweeps = 0

    def probe_targets(self) -> list[Target]:
        return [t for t in self._collector.targets if t.probe]

    def due(self, now: float) -> list[Target]:
        interval_s = self._config.probes.interval_s
        return [t for t in self.probe_targets() if now - self._last_sweep.get(t.name, -1e18) >= interval_s]

    def run_due(self, *, force: bool = False) -> list[ProbeResult]:
        """Sweep the due targets (every opted-in one with ``force``) in parallel; store and return results."""
        now = self._clock()
        targets = self.probe_targets() if force else self.due(now)
        if not targets:
            return []
        signals = {s.target: s.signals for s in self._collector.latest()}
        for target in targets:
            self._last_sweep[target.name] = now
        futures = [self._pool.submit(self._sweep, t, signals.get(t.name)) for t in targets]
        results: list[ProbeResult] = []
        for future in as_completed(futures):  # each target's sweep is stored as soon as it is done
            sweep = future.result()
            results += sweep
            self.sweeps += 1
            try:
                self._store.append(sweep)
            except StoreError as exc:
                log.warning("probes: %s; this sweep's results are only in memory", exc)
        if now - self._last_prune >= _PRUNE_EVERY_S:
            self._last_prune = now
            try:
                self._store.prune(now - self._config.store.retention_h * 3600.0)
            except StoreError as exc:
                log.warning("probes: %s; old probe rows stay for now", exc)
        order = {t.name: i for i, t in enumerate(targets)}
        return sorted(results, key=lambda r: (order[r.target], r.context_tokens))

    def _sweep(self, target: Target, signals: Signals | None) -> list[ProbeResult]:
        recipe = self._collector.recipe(target.name)
        try:
            results = self.prober.sweep(target, recipe.recipe_id if recipe else None, signals)
        except Exception as exc:  # a prober bug must not stop the other targets' sweeps
            log.exception("probes: sweep of %s failed", target.name)
            now = self._clock()
            return [
                ProbeResult(now, target.name, None, c, error=f"{target.name}: probe failed: {exc}")
                for c in self._config.probes.context_tokens
            ]
        for result in results:
            if result.error and not result.error.startswith("skipped"):
                log.warning("probe: %s", result.error)
        return results

    def start(self) -> ProbeScheduler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="specwatch-probes", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        # The first sweep waits for the collector's first cycle: recipes and queue lengths are known by then.
        while self._collector.health().cycles == 0 and not self._stop.wait(0.2):
            pass
        while not self._stop.is_set():
            try:
                self.run_due()
            except Exception:
                log.exception("probe scheduler failed; trying again shortly")
            now = self._clock()
            interval_s = self._config.probes.interval_s
            waits = [interval_s - (now - self._last_sweep.get(t.name, -1e18)) for t in self.probe_targets()]
            # Re-check at least every 5 s: targets (targets_file) and their snapshots change meanwhile.
            self._stop.wait(min([5.0, *[max(w, 0.05) for w in waits]]))

    def stop(self) -> None:
        """Stop sweeping: no further probe is sent, one in flight is cut at its next chunk (a server still in
        prefill answers no chunk: bounded by probes.timeout_s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._own_store:
            self._store.close()


def start_probes(config: Config, collector: Fleet) -> ProbeScheduler | None:
    """The running daemon's hook: a started scheduler when probes are enabled, else None."""
    if not config.probes.enabled:
        return None
    try:
        store = ProbeStore(config.store.path)
    except StoreError as exc:
        log.error("probes are enabled but cannot be stored: %s; probes stay off", exc)
        return None
    return ProbeScheduler(config, collector, store, own_store=True).start()
