"""The production runtime: history store, collector, alert engine and notifier wired together and started
once.

The dashboard and the headless daemon (``python -m alerts run``) both use it, so rules are evaluated once per
process, in the collector's thread, and never in a page script.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from alerts.engine import DEFAULT_EXTERNAL_URL, RESEND_INTERVAL_S, AlertEngine
from alerts.notify import Notifier
from alerts.rules import build_rules
from alerts.rules.probe_evidence import attach_probe_evidence
from alerts.state_store import AlertStateStore
from alerts.store_recovery import StoreRecovery
from collectors.errors import StoreError
from collectors.history import HistoryStore, StoredSloCounts
from collectors.model import TargetSnapshot
from collectors.probes.scheduler import ProbeScheduler, start_probes
from collectors.runner import Collector
from collectors.secrets import Redactor
from collectors.slo import build_slos
from collectors.slo_ledger import SloLedger
from collectors.source import Source, open_history
from collectors.store.integrity import STORE_CHECK_TIMEOUT_S
from collectors.store.probes import ProbeStore
from collectors.store.slo_counts import SloCountStore
from collectors.store.sqlite_store import SqliteStore
from config import Config

log = logging.getLogger(__name__)


def _store_file(store: HistoryStore | None) -> str | None:
    path = getattr(store, "path", None)
    return path if isinstance(path, str) and path else None


class Service:
    """Collector + alerts for one config: ``start()`` runs them in the background, ``stop()`` joins."""

    def __init__(
        self,
        config: Config,
        *,
        store: HistoryStore | None = None,
        clock: Callable[[], float] = time.time,
        source: str = "config",
        external_url: str = DEFAULT_EXTERNAL_URL,
        notifier: Notifier | None = None,
        store_check_timeout_s: float = STORE_CHECK_TIMEOUT_S,
        resend_interval_s: float = RESEND_INTERVAL_S,
    ) -> None:
        rules = build_rules(config.alerts.rules, source)  # ConfigError before anything is opened
        self.slos = build_slos(config, source)
        self.config = config
        self._own_store = store is None
        # Before anything opens the file: a torn store is moved aside and a new one started (or, in a
        # read-only folder, StoreError: the daemon's exit message, the dashboard's sidebar).
        self.recovery = StoreRecovery(
            _store_file(store) or config.store.path, clock=clock, check_timeout_s=store_check_timeout_s
        )
        salvaged = self.recovery.at_start() if store is None else None
        # source: prometheus keeps samples in Prometheus (no duplicate rows here); events/recipes stay local.
        # One Prometheus source per process: the history's, handed to the collector.
        history_source: Source | None = None
        # ErrorBudgetBurn's counts: the ledger's (per-scrape SLI events); with source: prometheus, whose
        # snapshots carry none, Prometheus's own (increase() of the SLI series, as the SLO page reads them).
        self._source_slo_counts: StoredSloCounts | None = None
        if store is None:
            history = open_history(config)
            store, history_source = history.store, history.source
            if history_source is not None and self.slos:
                self._source_slo_counts = history.slo_counts(source)
        self.store: HistoryStore = store
        path = getattr(self.store, "path", None)
        store_path = path if isinstance(path, str) and path else config.store.path
        self.alert_store = AlertStateStore(store_path)
        if salvaged is not None:  # before restore(): a firing alert carried over is not notified again
            self.alert_store.adopt(salvaged.instances, salvaged.queued)
        # SLO events per scope: counted before the rules run, so ErrorBudgetBurn sees this cycle's.
        self.slo_store = SloCountStore(store_path) if self.slos else None
        self.slo_ledger = SloLedger(
            self.slos, self.slo_store, labels=lambda target: self.collector.target_labels(target), clock=clock
        )
        self.slo_ledger.restore()
        settings = config.alerts
        resend_s = resend_interval_s
        self.engine = AlertEngine(
            rules,
            self.alert_store,
            history=self.store,
            webhook_urls=settings.webhook_urls,
            alertmanager_url=settings.alertmanager_url,
            clock=clock,
            evaluation_interval_s=settings.evaluation_interval_s,
            scrape_interval_s=config.scrape.interval_s,
            resend_interval_s=resend_s,
            retention_s=config.store.retention_h * 3600.0,
            external_url=external_url,
            delivery=settings.delivery,
            slos=self.slos,
            slo_counts=self._source_slo_counts or self.slo_ledger,
            target_labels=lambda target: self.collector.target_labels(target),
        )
        self.notifier = notifier or Notifier.from_settings(
            self.alert_store,
            settings.delivery,
            webhook_urls=settings.webhook_urls,
            alertmanager_url=settings.alertmanager_url,
            clock=clock,
            resend_interval_s=resend_s,
            alertmanager_valid_for_s=self.engine.alertmanager_valid_for_s,
            external_url=external_url,
            redact=Redactor.for_config(config),
        )
        self.engine.set_on_notify(self.notifier.wake)
        self._probe_evidence = attach_probe_evidence(rules, config)
        self.engine.restore()
        self.collector = Collector(
            config,
            self.store,
            source=history_source,
            clock=clock,
            observers=[self.slo_ledger, self.engine],
            on_corrupt_store=self._store_corrupt,
            store_notice=self.recovery.notice,
        )
        self.engine.watch_source(self.collector.source_health)  # SourceDown, and holding while it is blind
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.probes: ProbeScheduler | None = None  # started with the collector when probes.enabled

    def _store_corrupt(self, exc: BaseException) -> str | None:
        """A cycle's write found the file damaged: move it aside, start a new store, keep the queue."""
        salvaged = self.recovery.during_run(exc, reopen=self._create_tables)
        if salvaged is None:
            return None
        try:
            # The engine rewrites every active alert at its next evaluation (it holds them in memory);
            # only the queued notifications need carrying over.
            self.alert_store.adopt((), salvaged.queued)
        except StoreError as adopt_exc:
            log.error("queued notifications not carried over to the new store: %s", adopt_exc)
        return self.recovery.notice

    def _create_tables(self) -> None:
        """Every table this runtime uses, in the new file (the stores' connections reopen there by
        themselves: ``connections.mark_moved``)."""
        path = self.recovery.path
        for opened in (SqliteStore(path), AlertStateStore(path)):
            opened.close()
        if self.slo_store is not None:
            SloCountStore(path).close()
        if self.config.probes.enabled:
            ProbeStore(path).close()

    def start(self) -> Service:
        """Scrape and evaluate every ``scrape.interval_s`` in a background thread; deliver notifications."""
        if self._thread is not None:
            return self
        self.notifier.start()
        self._thread = threading.Thread(
            target=self.collector.run_forever, args=(self._stop,), name="specwatch-collector", daemon=True
        )
        self._thread.start()
        self.probes = start_probes(self.config, self.collector)  # its own thread, off the scrape cycle
        return self

    def run_cycle(self) -> list[TargetSnapshot]:
        """One synchronous cycle: scrape, store, evaluate the rules (the engine observes the collector)."""
        return self.collector.run_cycle()

    def stop(self, flush_timeout_s: float = 5.0) -> None:
        """Stop scraping, give queued notifications ``flush_timeout_s`` to go out, close what this opened."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self.probes is not None:
            self.probes.stop()
        if self._thread is not None:
            self._thread.join()
        self.notifier.stop(flush_timeout_s)
        self.slo_ledger.close()
        if self._source_slo_counts is not None:
            self._source_slo_counts.close()
        if self.slo_store is not None:
            self.slo_store.close()
        self.collector.close()
        self.alert_store.close()
        if self._probe_evidence is not None:
            self._probe_evidence.close()
        if self._own_store:
            self.store.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
