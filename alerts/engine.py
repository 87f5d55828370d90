"""The alert engine: a collector cycle observer that evaluates every rule for every target once per cycle.

It keeps rolling per-target windows in memory, runs each instance through the pure state machine, and commits
states, transitions and notifications in one transaction. After a restart it rebuilds the windows from history
and reloads the states, so nothing already notified is notified again. While the source cannot answer (its
health, from ``watch_source``) every per-target instance holds and only SourceDown moves.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alerts.model import (
    AlertInstance,
    AlertState,
    AlertTransition,
    Condition,
    Evaluation,
    InstanceState,
    OutboxItem,
    Pairs,
)
from alerts.payloads import fingerprint, outbox_items
from alerts.rules import Rule
from alerts.scopes import ScopeCache, scope_members, scope_target
from alerts.state_store import AlertStateStore
from alerts.statemachine import next_state
from alerts.window import LONG_SIGNALS, TargetHistory
from analysis.slo_budget import slo_scopes
from collectors.errors import StoreError
from collectors.history import HistoryStore
from collectors.model import Event, Recipe, SourceHealth, TargetSnapshot
from collectors.sample_columns import SAMPLE_TEXTS, SAMPLE_VALUES, SampleColumns, snapshots_of
from collectors.secrets import safe_url
from collectors.slo import Scope, Slo
from collectors.slo_ledger import SloCounts
from config import DeliverySettings

RESTORE_PIECES = 6  # reads per restored span of columns
log = logging.getLogger(__name__)

DEFAULT_EXTERNAL_URL = "http://localhost:8501"
# Prometheus's --rules.alert.resend-delay: how often every firing alert is posted to Alertmanager again.
RESEND_INTERVAL_S = 60.0
PRUNE_EVERY_S = 3600.0


@dataclass(slots=True)
class _Live:
    """One pending or firing instance in memory."""

    rule: str
    target: str
    labels: dict[str, str]
    fingerprint: str
    state: InstanceState
    annotations: Pairs
    value: float | None
    last_eval_ts: float

    def record(self) -> AlertInstance:
        s = self.state
        return AlertInstance(
            rule=self.rule,
            target=self.target,
            state=s.state,
            since=s.since if s.since is not None else self.last_eval_ts,
            active_since=s.active_since if s.active_since is not None else self.last_eval_ts,
            fired_at=s.fired_at,
            last_eval_ts=self.last_eval_ts,
            value=self.value,
            labels=tuple(sorted(self.labels.items())),
            annotations=self.annotations,
            fingerprint=self.fingerprint,
            suspended=s.suspended,
            last_active_ts=s.last_active_ts,
        )


def _live_from(instance: AlertInstance) -> _Live:
    state = InstanceState(
        state=instance.state,
        since=instance.since,
        active_since=instance.active_since,
        fired_at=instance.fired_at,
        last_active_ts=instance.last_active_ts,
        suspended=instance.suspended,
    )
    return _Live(
        instance.rule,
        instance.target,
        instance.labels_dict,
        instance.fingerprint,
        state,
        instance.annotations,
        instance.value,
        instance.last_eval_ts,
    )


class AlertEngine:
    """Evaluates rules once per process; use it as a ``CycleObserver`` of the collector."""

    def __init__(
        self,
        rules: Sequence[Rule[Any]],
        store: AlertStateStore,
        *,
        history: HistoryStore | None = None,
        webhook_urls: Sequence[str] = (),
        alertmanager_url: str | None = None,
        clock: Callable[[], float] = time.time,
        evaluation_interval_s: float | None = None,
        scrape_interval_s: float = 5.0,
        resend_interval_s: float = RESEND_INTERVAL_S,
        retention_s: float = 7 * 86400.0,
        external_url: str = DEFAULT_EXTERNAL_URL,
        recipes: Callable[[], Mapping[str, Recipe]] | None = None,
        on_notify: Callable[[], None] | None = None,
        delivery: DeliverySettings | None = None,
        slos: Sequence[Slo] = (),
        slo_counts: SloCounts | None = None,
        target_labels: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        self._delivery = delivery if delivery is not None else DeliverySettings()
        self.rules = [
            rule for rule in rules if rule.enabled and not rule.watches_source and not rule.watches_slos
        ]
        # SourceDown: evaluated once per evaluation from the source's health, never per target.
        self.source_rules = [rule for rule in rules if rule.enabled and rule.watches_source]
        # ErrorBudgetBurn: once per evaluation per (SLO, scope) from the SLO counts (the ledger).
        self.slo_rules = [rule for rule in rules if rule.enabled and rule.watches_slos]
        self._slos = tuple(slos)
        self._slo_counts = slo_counts
        self._target_labels = target_labels
        self._scope_cache: ScopeCache = {}  # each target's SLO scopes (alerts.scopes.scope_members)
        self._source_health: Callable[[], SourceHealth | None] | None = None
        self._blind_since: float | None = None  # when the source last stopped answering
        self._rules_by_name = {rule.name: rule for rule in self.rules + self.source_rules + self.slo_rules}
        self._store = store
        self._history_store = history
        # Receivers as the outbox names them: without user:password (the notifier posts to the real URL).
        self._webhook_urls = tuple(safe_url(url) for url in webhook_urls)
        self._alertmanager_receiver = (
            safe_url(alertmanager_url.rstrip("/") + "/api/v2/alerts") if alertmanager_url else None
        )
        self._clock = clock
        self._interval_s = evaluation_interval_s
        cadence = max(evaluation_interval_s or scrape_interval_s, scrape_interval_s)
        # Prometheus's rule: an alert sent to Alertmanager stays valid for 4 × max(interval, resend delay).
        self.alertmanager_valid_for_s = 4 * max(cadence, resend_interval_s)
        # No fresh snapshot for this long: the data is unknown (suspended). Gone this long: the target was
        # removed from the fleet, so its alerts resolve.
        self._stale_after_s = max(3 * cadence, 30.0)
        self._forget_after_s = max(60 * cadence, 900.0)
        self._retention_s = retention_s
        self._external_url = external_url
        self._recipe_source = (
            recipes if recipes is not None else (history.recipes if history is not None else None)
        )
        self._on_notify = on_notify

        self.horizon_s = max([rule.horizon_s for rule in self.rules] + [cadence]) + 2 * cadence
        self.long_horizon_s = max([r.long_horizon_s + 2 * cadence for r in self.rules] + [self.horizon_s])
        self.baseline_s = max([rule.baseline_s for rule in self.rules] + [0.0])
        self._histories: dict[str, TargetHistory] = {}
        self._live: dict[str, _Live] = {}
        self._recipes: dict[str, Recipe] = {}
        self._lock = threading.RLock()
        self._last_eval_ts: float | None = None
        self._next_prune_ts = 0.0
        self._unsaved_transitions: list[AlertTransition] = []
        self._unsaved_outbox: list[OutboxItem] = []
        self._unsaved_events: list[Event] = []
        self._removed: set[str] = set()
        self._to_notify: list[tuple[AlertTransition, float]] = []  # (transition, startsAt) to send
        self._failed_rules: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------------------------
    def restore(self) -> int:
        """Reload alert states and rebuild the windows from history; returns how many instances came back.

        The last ``horizon_s`` comes back as whole snapshots, the rest of ``long_horizon_s`` as columns at
        full resolution; older history (AcceptLengthRegression looks for recipe changes up to its
        ``lookback_s``) is read coarsely first, only to find the previous recipe's samples.
        """
        now = self._clock()
        with self._lock:
            self._live = {i.fingerprint: _live_from(i) for i in self._store.active()}
            if self._history_store is not None:
                lookback_s = max([rule.lookback_s for rule in self.rules] + [self.long_horizon_s])
                whole_from = now - self.horizon_s
                spans = [  # reads are [start, end]: the whole snapshots' span owns its first instant
                    (now - lookback_s, now - self.long_horizon_s, 240),
                    (now - self.long_horizon_s, whole_from - 1e-3, 2000),
                ]
                try:
                    for start, end, points in spans:
                        # In pieces, in time order: one read of the whole span was a ~70 MB transient at
                        # 1,000 servers (the process's peak RSS at start).
                        step = (end - start) / RESTORE_PIECES
                        for piece in range(RESTORE_PIECES if end > start else 0):
                            low = start + piece * step
                            high = end if piece == RESTORE_PIECES - 1 else low + step - 1e-3
                            self._restore_samples(
                                self._history_store.read_columns(
                                    low,
                                    high,
                                    LONG_SIGNALS,
                                    math.ceil(points / RESTORE_PIECES),
                                    texts=("recipe_id", "deployment"),
                                )
                            )
                    columns = self._history_store.read_columns(
                        whole_from, now, SAMPLE_VALUES, 2000, texts=SAMPLE_TEXTS
                    )
                    for snapshot in snapshots_of(columns):
                        self._history(snapshot.target).add(snapshot)
                except StoreError as exc:
                    # A history that cannot be read (the fleet's Prometheus down at start) must not stop the
                    # alerts: the windows fill from live cycles instead, and SourceDown says why.
                    log.warning("history not replayed, the rule windows start empty: %s", exc)
            self._last_eval_ts = None
            return len(self._live)

    def _restore_samples(self, columns: SampleColumns) -> None:
        """Older history into the windows' columns only (no whole snapshots: see ``alerts.window``)."""
        values = [columns.values[name].tolist() for name in LONG_SIGNALS]
        recipes, deployments = columns.texts["recipe_id"].tolist(), columns.texts["deployment"].tolist()
        for i, (target, ts, up) in enumerate(
            zip(columns.target.tolist(), columns.ts.tolist(), columns.up.tolist(), strict=True)
        ):
            self._history(str(target)).add_sample(
                ts,
                up,
                recipes[i] or None,
                deployments[i] or "",
                [None if math.isnan(v[i]) else v[i] for v in values],
            )

    def __call__(self, snapshots: Sequence[TargetSnapshot], events: Sequence[Event]) -> None:
        self.observe(snapshots)

    def observe(self, snapshots: Sequence[TargetSnapshot], now: float | None = None) -> list[AlertTransition]:
        """Add one cycle's snapshots; evaluate if due. Returns the transitions of this evaluation."""
        with self._lock:
            self.ingest(snapshots)
            now = self._clock() if now is None else now
            if (
                self._interval_s is not None
                and self._last_eval_ts is not None
                and 0 <= now - self._last_eval_ts < 0.9 * self._interval_s  # tolerate scrape-loop jitter
            ):
                return []
            return self.evaluate(now)

    def ingest(self, snapshots: Sequence[TargetSnapshot]) -> None:
        """Add snapshots to the rolling windows without evaluating (replays, benchmarks)."""
        with self._lock:
            now = self._clock()
            for snapshot in snapshots:
                history = self._history(snapshot.target)
                latest = history.latest
                if latest is not None and latest.ts > now and snapshot.ts <= latest.ts:
                    # The wall clock stepped back: rows stamped in its "future" would hide every new
                    # snapshot until it caught up (blind to a target dying meanwhile). Replays are never
                    # ahead of now.
                    history.discard_from(snapshot.ts)
                history.add(snapshot)

    def watch_source(self, health: Callable[[], SourceHealth | None] | None) -> None:
        """Where the source's health of the last cycle comes from (the collector's ``source_health``)."""
        self._source_health = health

    def set_on_notify(self, callback: Callable[[], None] | None) -> None:
        """Called after a commit that queued notifications (the notifier's wake-up)."""
        self._on_notify = callback

    def history(self, target: str) -> TargetHistory | None:
        """The rolling window of one target (None if it never reported or was forgotten)."""
        return self._histories.get(target)

    def active(self) -> list[AlertInstance]:
        """The in-memory pending and firing instances (the store has the same after each commit)."""
        with self._lock:
            return [live.record() for live in self._live.values()]

    # -- evaluation ------------------------------------------------------------------------------------------
    def evaluate(self, now: float) -> list[AlertTransition]:
        with self._lock:
            self._last_eval_ts = now
            recipes = self._current_recipes()
            existing: dict[tuple[str, str], list[str]] = defaultdict(list)
            for fp, live in self._live.items():
                existing[(live.rule, live.target)].append(fp)
            transitions: list[AlertTransition] = []
            health = self._source_health() if self._source_health is not None else None
            blind = health is not None and not health.answered
            if blind and self._blind_since is None:
                self._blind_since = now
            elif not blind:
                self._blind_since = None
            if health is not None:
                self._evaluate_source(health, existing, now, transitions)
            gone: set[str] = set()  # targets forgotten in this evaluation
            for target, history in list(self._histories.items()):
                latest = history.latest
                if latest is None:
                    continue
                age_s = now - latest.ts
                # A blind source says nothing about its targets: none is forgotten (resolved) for its silence.
                if age_s > self._forget_after_s and not blind:
                    del self._histories[target]
                    gone.add(target)
                    for rule in self.rules:
                        rule.forget(target)
                    continue  # its instances are left over below, and resolved
                history.prune(now)
                # Unknown (stale, a blind source, or a partial answer that lacks it): every rule holds.
                unknown = age_s > self._stale_after_s or blind or latest.unknown
                for rule in self.rules:
                    suspended = unknown or (not latest.up and not rule.applies_when_down)
                    verdicts = None if suspended else self._evaluate_rule(rule, history, now, recipes)
                    fps = existing.pop((rule.name, target), [])
                    self._apply(rule, history, verdicts, fps, now, transitions)
            self._evaluate_scopes(existing, blind, now, transitions)
            for (rule_name, target), fps in existing.items():
                for fp in fps:
                    self._leftover(self._live[fp], rule_name, target in gone, now, transitions)
            self._commit(transitions, now)
            return transitions

    def _evaluate_source(
        self,
        health: SourceHealth,
        existing: dict[tuple[str, str], list[str]],
        now: float,
        out: list[AlertTransition],
    ) -> None:
        """SourceDown (and any rule about the source): one instance, labelled with the source's URL."""
        target = health.url or health.source
        for rule in self.source_rules:
            verdicts = rule.evaluate_source(health, self._blind_since, now)
            fps = existing.pop((rule.name, target), [])
            labels = {"target": target, "source": health.source}
            self._apply_labelled(rule, target, labels, verdicts, fps, now, out)

    def _evaluate_scopes(
        self,
        existing: dict[tuple[str, str], list[str]],
        blind: bool,
        now: float,
        out: list[AlertTransition],
    ) -> None:
        """ErrorBudgetBurn (and any rule about an SLO): one evaluation per SLO and scope, labelled with the
        SLO and the scope's labels. Unknown (NO_DATA: held, never resolved) while the source is blind or
        every target of the scope is down or stale; a scope with no target left is handled as leftover
        (held, then resolved once forgotten)."""
        if not self.slo_rules or self._slo_counts is None:
            return
        members = scope_members(
            self._histories,
            self._slos,
            self._target_labels,
            now,
            stale_after_s=self._stale_after_s,
            cache=self._scope_cache,
        )
        for slo in self._slos:
            for scope in slo_scopes(self._slo_counts, slo, now):
                known = members.get((slo.name, scope.key))
                if not known:
                    continue  # no target of the scope reports any more: its instances are left over
                target = scope_target(slo, scope.key)
                base = {"slo": slo.name, **scope.as_dict()}
                for rule in self.slo_rules:
                    fps = existing.pop((rule.name, target), [])
                    verdicts = None
                    if not blind and any(known):
                        verdicts = self._evaluate_slo(rule, slo, scope, now)
                    self._apply_labelled(rule, target, base, verdicts, fps, now, out)

    def _evaluate_slo(
        self, rule: Rule[Any], slo: Slo, scope: Scope, now: float
    ) -> Sequence[Evaluation] | None:
        assert self._slo_counts is not None
        try:
            return rule.evaluate_scope(slo, scope, self._slo_counts, now, self._history_store)
        except Exception:
            if rule.name not in self._failed_rules:
                log.exception("rule %s failed on SLO %s; its alerts are suspended", rule.name, slo.name)
                self._failed_rules.add(rule.name)
            return None

    def _evaluate_rule(
        self, rule: Rule[Any], history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation] | None:
        try:
            verdicts = rule.evaluate(history, now, recipes)
        except Exception:
            # A rule bug must not stop the others (nor the collector): its instances wait; logged once.
            if rule.name not in self._failed_rules:
                log.exception("rule %s failed on %s; its alerts are suspended", rule.name, history.target)
                self._failed_rules.add(rule.name)
            return None
        return verdicts

    def _apply(
        self,
        rule: Rule[Any],
        history: TargetHistory,
        verdicts: Sequence[Evaluation] | None,
        fps: list[str],
        now: float,
        out: list[AlertTransition],
    ) -> None:
        latest = history.latest
        # A down server's recipe is only this process's memory: an evaluator that never saw it up (the other
        # daemon of an HA pair, one started during the outage) would label the same TargetDown without it,
        # and Alertmanager would page twice. Labels say what any evaluator of the fleet sees now.
        recipe_id = history.recipe_id if latest is not None and latest.up else None
        base = {"target": history.target, "deployment": history.deployment, "recipe_id": recipe_id or ""}
        self._apply_labelled(rule, history.target, base, verdicts, fps, now, out)

    def _apply_labelled(
        self,
        rule: Rule[Any],
        target: str,
        base: Mapping[str, str],
        verdicts: Sequence[Evaluation] | None,
        fps: list[str],
        now: float,
        out: list[AlertTransition],
    ) -> None:
        produced: dict[str, tuple[Evaluation, dict[str, str]]] = {}
        for verdict in verdicts or ():
            labels = {"alertname": rule.name, **base, "severity": rule.severity, **dict(verdict.labels)}
            # An empty label is an absent label (Prometheus and Alertmanager drop them, and the fingerprint).
            labels = {name: value for name, value in labels.items() if value}
            produced[fingerprint(labels)] = (verdict, labels)
        for fp in fps:
            if fp not in produced:
                # Suspended rules say nothing (NO_DATA); an instance a live rule no longer produces recovered.

                condition = Condition.NO_DATA if verdicts is None else Condition.CLEAR
                self._step(self._live[fp], condition, None, now, rule, out)
        for fp, (verdict, labels) in produced.items():
            live = self._live.get(fp)
            if live is None:
                if verdict.condition is not Condition.BREACH:
                    continue  # only a breach starts an instance; everything else leaves it inactive
                live = _Live(rule.name, target, labels, fp, InstanceState(), (), None, now)
            self._step(live, verdict.condition, verdict, now, rule, out)

    def _step(
        self,
        live: _Live,
        condition: Condition,
        verdict: Evaluation | None,
        now: float,
        rule: Rule[Any],
        out: list[AlertTransition],
    ) -> None:
        previous = live.state
        live.state = next_state(previous, condition, now, rule)
        live.last_eval_ts = now
        if verdict is not None and condition is not Condition.NO_DATA:
            live.value = verdict.value
            if verdict.summary:  # a bare CLEAR ("idle") keeps the last words that explained the alert
                live.annotations = verdict.annotations
        self._settle(live, previous, now, out)

    def _leftover(
        self, live: _Live, rule_name: str, gone: bool, now: float, out: list[AlertTransition]
    ) -> None:
        """An instance whose target has no window (yet): suspended, unless the target is gone."""
        rule = self._rules_by_name.get(rule_name)
        forgotten = gone or (
            live.target not in self._histories and now - live.last_eval_ts > self._forget_after_s
        )
        if rule is not None and not forgotten:
            previous = live.state
            live.state = next_state(previous, Condition.NO_DATA, now, rule)
            return
        # The rule was disabled, or the target left the fleet: resolve now rather than keep a ghost firing.
        previous = live.state
        live.state = InstanceState(AlertState.INACTIVE, since=now)
        reason = "rule disabled" if rule is None else "target no longer scraped"
        live.annotations = tuple(sorted({**dict(live.annotations), "resolved_because": reason}.items()))
        self._settle(live, previous, now, out)

    def _settle(self, live: _Live, previous: InstanceState, now: float, out: list[AlertTransition]) -> None:
        if live.state.state is AlertState.INACTIVE:
            self._live.pop(live.fingerprint, None)
            self._removed.add(live.fingerprint)
        else:
            self._live[live.fingerprint] = live
            self._removed.discard(live.fingerprint)
        if live.state.state is previous.state:
            return
        transition = AlertTransition(
            ts=now,
            rule=live.rule,
            target=live.target,
            fingerprint=live.fingerprint,
            from_state=previous.state,
            to_state=live.state.state,
            value=live.value,
            labels=tuple(sorted(live.labels.items())),
            annotations=live.annotations,
        )
        out.append(transition)
        log.info("alert %s on %s: %s", live.rule, live.target, transition.kind)
        if transition.kind in ("firing", "resolved"):
            started = live.state.fired_at if transition.kind == "firing" else previous.fired_at
            self._to_notify.append((transition, started if started is not None else now))
            self._unsaved_events.append(Event(now, live.target, "alert", f"{live.rule} {transition.kind}"))

    # -- notifications and persistence -----------------------------------------------------------------------
    def _commit(self, transitions: list[AlertTransition], now: float) -> None:
        self._unsaved_transitions.extend(transitions)
        self._unsaved_outbox.extend(
            outbox_items(
                self._to_notify,
                webhook_urls=self._webhook_urls,
                alertmanager_receiver=self._alertmanager_receiver,
                external_url=self._external_url,
                alertmanager_ends_at=now + self.alertmanager_valid_for_s,
                group_by=self._delivery.group_by,
                max_payload_bytes=self._delivery.max_payload_bytes,
                max_alerts=self._delivery.max_alerts_per_payload,
            )
        )
        self._to_notify = []
        try:
            self._store.commit(
                [live.record() for live in self._live.values()],
                sorted(self._removed),
                self._unsaved_transitions,
                self._unsaved_outbox,
                now,
            )
        except StoreError as exc:
            log.error("%s; alert state is kept in memory and written at the next evaluation", exc)
            return
        notify = bool(self._unsaved_outbox)
        self._unsaved_transitions, self._unsaved_outbox = [], []
        self._removed.clear()
        self._write_events()
        self._prune_if_due(now)
        if notify and self._on_notify is not None:
            self._on_notify()

    def _write_events(self) -> None:
        if not self._unsaved_events or self._history_store is None:
            self._unsaved_events = []
            return
        try:
            self._history_store.add_events(self._unsaved_events)
            self._unsaved_events = []
        except StoreError as exc:
            log.warning("alert events not written to history (retrying next evaluation): %s", exc)

    def _prune_if_due(self, now: float) -> None:
        if now < self._next_prune_ts:
            return
        self._next_prune_ts = now + PRUNE_EVERY_S
        try:
            self._store.prune(now - self._retention_s)
        except StoreError as exc:
            log.warning("alert history not pruned: %s", exc)

    # -- helpers ---------------------------------------------------------------------------------------------
    def _history(self, target: str) -> TargetHistory:
        history = self._histories.get(target)
        if history is None:
            history = TargetHistory(target, self.horizon_s, self.baseline_s, self.long_horizon_s)
            self._histories[target] = history
        return history

    def _current_recipes(self) -> Mapping[str, Recipe]:
        wanted = {h.recipe_id for h in self._histories.values() if h.recipe_id is not None}
        wanted |= {h.previous.recipe_id for h in self._histories.values() if h.previous is not None}
        if wanted - set(self._recipes) and self._recipe_source is not None:
            try:
                self._recipes = dict(self._recipe_source())
            except StoreError as exc:
                log.warning("recipes not read (rules that need them report no data): %s", exc)
        return self._recipes
