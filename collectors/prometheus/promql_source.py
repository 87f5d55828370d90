"""The Prometheus source: every signal of the direct source, computed with PromQL on the fleet's Prometheus.

Targets are discovered from the series' ``instance``/``job`` labels; recipes come from ``/server_info`` where
the server is reachable, otherwise from labels added with SGLang's ``--extra-metric-labels``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TypeVar

from collectors.derive import apply_plain_decoding, apply_server_gpus, spec_enabled
from collectors.errors import QueryError
from collectors.model import Event, Recipe, Signals, SourceHealth, TargetSnapshot
from collectors.prometheus.client import InstantSample, PromClient
from collectors.prometheus.naming import TargetKey, by_instance, target_names
from collectors.prometheus.queries import signal_queries
from collectors.prometheus.recipes import RecipeBook, RecipeFetcher, default_recipe_fetcher
from collectors.signals import config_params
from config.settings import Config, Target

log = logging.getLogger(__name__)

DISCOVERY_LOOKBACK_S = 3600.0  # a target silent for longer leaves the fleet (unless `up` still lists it)
_DISCOVERY_REFRESH_S = 60.0
# Every label of every target's series (its recipe flags and deployment as labels) is a quarter of a cycle's
# bytes at 1,000 servers, and they change only when a target's process or scrape config does. They are read
# once a minute, and at once in a cycle that meets a new target or sees a target's count of series over the
# rate window change (new labels make a new series beside the one gone stale; a restart alone does not).
LABELS_REFRESH_S = 60.0
T = TypeVar("T")
_HEALTH_RELOG_S = 300.0


@dataclass(slots=True)
class _Answers:
    """The instant-query answers of one cycle, keyed by target."""

    signals: dict[str, dict[TargetKey, float | None]] = field(default_factory=dict)
    up: dict[TargetKey, float | None] = field(default_factory=dict)
    present: set[TargetKey] = field(default_factory=set)
    scrape_duration_s: dict[TargetKey, float | None] = field(default_factory=dict)
    resets: dict[TargetKey, float | None] = field(default_factory=dict)
    labels: Mapping[TargetKey, Mapping[str, str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what makes this answer partial, in words
    # False when the answer cannot prove a target gone: `present` or `up` came back partial, or `up` failed.
    complete: bool = True


class PrometheusSource:
    """``Source`` that reads the fleet from Prometheus: one snapshot per discovered target per cycle.

    If Prometheus cannot answer at all, the source is blind: every known target is reported *unknown* (not
    down) and ``health()`` says why. A partial answer (``warnings``, a failed or odd query) leaves what it
    lacks unknown and is listed in ``health().warnings``; a target is down only when ``up == 0`` says so, or
    when it vanished from a complete answer.
    """

    def __init__(
        self,
        config: Config,
        targets: Sequence[Target] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        client: PromClient | None = None,
        recipe_fetcher: RecipeFetcher | None = None,
        max_workers: int = 4,
    ) -> None:
        if config.prometheus is None:
            raise QueryError("source: prometheus needs a prometheus: {url: ...} section in the config")
        self.config = config
        self.queries = signal_queries(config)
        # With the exported rules loaded, a cycle reads each signal's recorded series (one selector per
        # signal) instead of recomputing it from raw series: at 1,000 servers each raw signal costs the
        # engine 0.2–0.5 s of rates over every target's histograms, every interval and every viewer's first
        # page. A recorded value lags the raw one by up to one rule evaluation.
        self._recorded = (
            replace(self.queries, recorded=True) if config.prometheus.use_recording_rules else None
        )
        self._unrecorded = False  # no recording answered the last cycle: signals read raw
        self._params = config_params(config.cost.gpu_hour_usd)
        self.client = client if client is not None else PromClient.from_settings(config.prometheus)
        self._clock = clock
        self._book = RecipeBook(
            recipe_fetcher or default_recipe_fetcher(config),
            workers=min(config.scrape.concurrency, 16),
            first_wait_s=config.scrape.timeout_s + 0.5,
        )
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="specwatch-promql")
        self._lock = threading.Lock()
        # One cycle at a time: the collector's loop and the history's latest() may share this source.
        self._cycle_lock = threading.Lock()
        self._known: set[TargetKey] = set()
        self._known_refreshed_at = float("-inf")
        self._labels: dict[TargetKey, dict[str, str]] = {}
        self._labels_read_at = float("-inf")
        self._series_counts: dict[TargetKey, float | None] = {}
        self._was_up: dict[TargetKey, bool] = {}
        self._resets: dict[TargetKey, float] = {}
        self._names: dict[TargetKey, str] = {}
        self._current: dict[str, Recipe] = {}
        self._events: list[Event] = []
        self._by_netloc: dict[str, Target] = {}
        self._health = SourceHealth("prometheus", self.client.safe_url)
        self._present_before: set[TargetKey] = set()
        self._health_logged_at = float("-inf")
        self._last_cycle: tuple[_Answers, set[TargetKey], float] | None = None
        self.update_targets(config.targets if targets is None else targets)

    # -- the Source protocol ------------------------------------------------------------------------------
    def update_targets(self, targets: Sequence[Target]) -> None:
        """Configured targets only name discovered instances (and give /server_info a URL and token)."""
        self._by_netloc = by_instance(targets)

    def health(self) -> SourceHealth:
        return self._health

    def collect(self, now: float) -> list[TargetSnapshot]:
        with self._cycle_lock:
            return self._collect(now)

    def _collect(self, now: float) -> list[TargetSnapshot]:
        try:
            answers = self._query_all(now)
        except QueryError as exc:
            self._set_health(SourceHealth("prometheus", self.client.safe_url, False, str(exc)))
            self._last_cycle = None
            return self._all_unknown(now, exc)
        # Gone from a complete answer, a target is down (TargetDown waits its for_s); gone from a partial one,
        # nothing is known about it, and the source says which went missing.
        missing = sorted(
            self._names.get(key, key.instance)
            for key in self._present_before - answers.present
            if answers.up.get(key) is None  # `up == 0` explains itself; `up == 1` is still scraped
        )
        if missing and not answers.complete:
            answers.warnings.append(
                f"{len(missing)} target(s) present last cycle are missing from the partial answer, so "
                "unknown: " + ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            )
            self._present_before |= answers.present  # the missing stay listed until a complete answer
        else:
            self._present_before = set(answers.present)
        warnings = tuple(dict.fromkeys(answers.warnings + answers.errors))  # once each, in order
        self._set_health(SourceHealth("prometheus", self.client.safe_url, warnings=warnings))
        keys = answers.present | self._known
        if self.queries.selector:
            keys |= set(answers.up)  # targets never scraped successfully, when the selector picks `up` too
        self._names = self._name(keys)
        self._note_restarts(keys, answers, now)
        self._book.refresh(
            (
                (key, self._target(key), not self._was_up.get(key, True))
                for key in keys
                if key in answers.present and answers.up.get(key, 1) == 1
            ),
            now,
        )
        self._last_cycle = (answers, keys, now)
        return self._snapshots(answers, keys, now)

    def _snapshots(self, answers: _Answers, keys: set[TargetKey], now: float) -> list[TargetSnapshot]:
        snapshots = [self._snapshot(key, answers, now) for key in keys]
        for key, snapshot in zip(keys, snapshots, strict=True):
            if not snapshot.unknown:
                self._was_up[key] = snapshot.up
        # Configured targets in config order (as the direct source), then discovered ones by name.
        order = {target.name: index for index, target in enumerate(self._by_netloc.values())}
        return sorted(snapshots, key=lambda s: (order.get(s.target, len(order)), s.target))

    def resnapshot(self) -> list[TargetSnapshot] | None:
        """The last cycle's snapshots built again from its answers, without a query: the recipes read since
        (``settle_recipes``) are in them. None when the last cycle had no answer. A viewer's first read
        meets every target at once; asking the ~25 fleet-wide queries again only to label them with the
        recipes their /server_info gave doubled a cold Fleet page's queries at 1,000 servers."""
        with self._cycle_lock:
            if self._last_cycle is None:
                return None
            return self._snapshots(*self._last_cycle)

    def recipe(self, target: str) -> Recipe | None:
        return self._current.get(target)

    def drain_events(self) -> list[Event]:
        with self._lock:
            events, self._events = self._events, []
        return events

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._book.close()
        self.client.close()

    @property
    def recipes(self) -> dict[str, Recipe]:
        """Every recipe this source has attributed to a target: recipe_id -> Recipe."""
        return self._book.seen

    def met(self) -> frozenset[str]:
        """The targets a cycle of this source has named so far (their /server_info is being read)."""
        return frozenset(self._names.values())

    def settle_recipes(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the /server_info reads in flight (a cycle awaits first reads only
        briefly, so that a slow server does not hold up the fleet's snapshots)."""
        self._book.settle(timeout_s)

    def server_info_recipe(self, target: str) -> Recipe | None:
        """The recipe read from ``target``'s /server_info, if it ever answered (else None)."""
        for key, name in list(self._names.items()):
            if name == target:
                return self._book.server_info(key)
        return None

    def server_info_recipes(self) -> dict[str, Recipe]:
        """Target name → the recipe its /server_info gave, for every target whose /server_info answered
        (one pass: a history read of 1,000 targets asks for all of them at once)."""
        found: dict[str, Recipe] = {}
        for key, name in list(self._names.items()):
            recipe = self._book.server_info(key)
            if recipe is not None:
                found.setdefault(name, recipe)
        return found

    def _target(self, key: TargetKey) -> Target:
        """The configured target of this instance, or one made up from it (for /server_info)."""
        configured = self._by_netloc.get(key.instance)
        if configured is not None:
            return configured
        return Target(name=self._names.get(key, key.instance), url=f"http://{key.instance}")

    # -- queries ---------------------------------------------------------------------------------------------
    def _query_all(self, now: float) -> _Answers:
        q = self.queries
        # `present` first, and awaited first: when Prometheus is blind (hanging, say) the cycle ends after one
        # query timeout instead of one per round of the pool.
        jobs: dict[str, str] = {"present": q.present(), "up": q.up()}
        jobs.update({f"signal:{name}": expr for name, expr in (self._recorded or q).signals().items()})
        jobs.update(scrape=q.scrape_duration_s(), resets=q.restarts())
        if now - self._known_refreshed_at >= _DISCOVERY_REFRESH_S:
            jobs["known"] = q.seen_within(DISCOVERY_LOOKBACK_S)
        jobs["series"] = q.seen_within(q.rate_window_s)  # grows for a window when a target's labels change
        said: dict[str, list[str]] = {name: [] for name in (*jobs, "labels")}  # partial-answer warnings
        due = now - self._labels_read_at >= LABELS_REFRESH_S
        labels = self._submit_labels(now, said["labels"]) if due else None
        futures = {
            name: self._pool.submit(self.client.query_by_target, expr, at=now, warnings=said[name])
            for name, expr in jobs.items()
        }
        results: dict[str, dict[TargetKey, float | None]] = {}
        failures: dict[str, QueryError] = {}
        self._await(futures, results, failures)
        if self._recorded is not None and results.get("present"):
            self._read_unrecorded(now, results, failures, said)
        moved = self._labels_moved(results)
        if labels is None and moved:
            labels = self._submit_labels(now, said["labels"])  # in time for this cycle's snapshots
        if labels is not None:
            self._take_labels(labels, now, failures)
        answers = _Answers()
        answers.complete = not said["present"] and not said["up"] and "up" not in failures
        for name, failure in failures.items():
            answers.errors.append(f"query for {name.removeprefix('signal:')} failed: {failure}")
        # One line per distinct warning (a store that is down warns on every query alike).
        queries_by_text: dict[str, list[str]] = {}
        for name, texts in said.items():
            for text in texts:
                queries_by_text.setdefault(text, []).append(name)
        asked = len(jobs) + (labels is not None)
        for text, names in queries_by_text.items():
            answers.warnings.append(f"{text} (in the answer to {len(names)} of {asked} queries)")
        for name, by_key in results.items():
            if name.startswith("signal:"):
                answers.signals[name.removeprefix("signal:")] = by_key
            elif name == "up":
                answers.up = by_key
            elif name == "present":
                answers.present = set(by_key)
            elif name == "scrape":
                answers.scrape_duration_s = by_key
            elif name == "resets":
                answers.resets = by_key
            elif name == "known":
                self._known = set(by_key)
                self._known_refreshed_at = now
        answers.labels = self._labels
        return answers

    def _labels_moved(self, results: Mapping[str, Mapping[TargetKey, float | None]]) -> bool:
        """A target new to the labels read, or a target's series counted over the rate window changed."""
        counts = results.get("series")
        before, self._series_counts = self._series_counts, dict(counts or {})
        if set(results.get("present", {})) - self._labels.keys():
            return True
        return counts is not None and any(counts.get(key, n) != n for key, n in before.items())

    def _submit_labels(self, now: float, warnings: list[str]) -> Future[list[InstantSample]]:
        # Each series' sample time: VictoriaMetrics still answers a series gone stale (a target's old labels)
        # for minutes after a restart, and the newest series of a target is the one it serves now.
        expr = f"timestamp({self.queries.labelled()})"
        return self._pool.submit(self.client.query, expr, at=now, warnings=warnings)

    def _take_labels(
        self, future: Future[list[InstantSample]], now: float, failures: dict[str, QueryError]
    ) -> None:
        """Keep each target's series labels from ``future`` (its newest series), in place of the last read; a
        failed read keeps the last and is said like any failed query."""
        answered: dict[str, list[InstantSample]] = {}
        self._await({"labels": future}, answered, failures)
        if "labels" not in answered:
            return
        labels: dict[TargetKey, dict[str, str]] = {}
        newest: dict[TargetKey, float] = {}
        for sample in answered["labels"]:
            key, at = TargetKey.of(sample.labels), sample.value if sample.value is not None else -math.inf
            if key not in labels or at > newest[key]:
                labels[key], newest[key] = dict(sample.labels), at
        self._labels, self._labels_read_at = labels, now

    def _await(
        self,
        futures: Mapping[str, Future[T]],
        results: dict[str, T],
        failures: dict[str, QueryError],
    ) -> None:
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except QueryError as exc:
                if name == "present":  # without it nothing can be said about any target
                    for other in futures.values():
                        other.cancel()  # those not started yet; the running ones end within the timeout
                    raise
                failures[name] = exc

    def _read_unrecorded(
        self,
        now: float,
        results: dict[str, dict[TargetKey, float | None]],
        failures: dict[str, QueryError],
        said: dict[str, list[str]],
    ) -> None:
        """When no recorded series answers while targets are present, the rules are not loaded (or not
        evaluated yet on a fresh engine): the signals are read from raw series instead, and the log says so
        once. One recording without an answer is the signal unknown, as its raw expression would say."""
        names = [key.removeprefix("signal:") for key in results if key.startswith("signal:")]
        unrecorded = bool(names) and not any(results[f"signal:{name}"] for name in names)
        if unrecorded != self._unrecorded:
            self._unrecorded = unrecorded
            if unrecorded:
                log.warning(
                    "prometheus.use_recording_rules is set but no recorded series answers (are the rules of "
                    "`export-recording-rules` loaded and evaluated?); the signals are read from raw series"
                )
            else:
                log.info("the recorded series answer: the signals are read from them")
        if not unrecorded:
            return
        raw = self.queries.signals()
        futures = {
            f"signal:{name}": self._pool.submit(
                self.client.query_by_target, raw[name], at=now, warnings=said[f"signal:{name}"]
            )
            for name in names
        }
        self._await(futures, results, failures)

    def _set_health(self, health: SourceHealth) -> None:
        """Keep this cycle's health; log when its state changes (whole, partial, blind), not every cycle of an
        outage. New words within the same state (another error, other targets missing) are logged at most
        every ``_HEALTH_RELOG_S``."""
        before, self._health = self._health, health
        now = health.problem
        if now == before.problem:
            return
        same_state = (health.answered, bool(health.warnings)) == (before.answered, bool(before.warnings))
        if same_state and time.monotonic() - self._health_logged_at < _HEALTH_RELOG_S:
            return
        self._health_logged_at = time.monotonic()
        if now is None:
            log.warning("Prometheus source at %s answers completely again", health.url)
        elif not health.answered:
            log.error("%s; every target is unknown (not down) until it answers", now)
        else:
            log.warning("%s; what is missing stays unknown", now)

    def _all_unknown(self, now: float, exc: QueryError) -> list[TargetSnapshot]:
        """Prometheus cannot answer: every known target is unknown (its last recipe kept), none is down."""
        return [
            self._unknown(key, name, now, f"cannot read it from Prometheus: {exc}")
            for key, name in sorted(self._names.items(), key=lambda item: item[1])
        ]

    def _unknown(self, key: TargetKey, name: str, now: float, why: str) -> TargetSnapshot:
        recipe = self._current.get(name)
        return TargetSnapshot(
            target=name,
            ts=now,
            up=False,
            error=f"{name}: unknown, {why}",
            recipe_id=recipe.recipe_id if recipe is not None else None,
            deployment=self._deployment(key, None),
            unknown=True,
        )

    # -- naming ----------------------------------------------------------------------------------------------
    def _name(self, keys: set[TargetKey]) -> dict[TargetKey, str]:
        return target_names(keys, self._by_netloc)

    def _deployment(self, key: TargetKey, labels: Mapping[str, str] | None) -> str:
        # A deployment set in the config wins; otherwise the series' own label (target or extra-metric label).
        configured = self._by_netloc.get(key.instance)
        return (configured.deployment if configured is not None else "") or (labels or {}).get(
            "deployment", ""
        )

    def _note_restarts(self, keys: set[TargetKey], answers: _Answers, now: float) -> None:
        """A restart event when the counter resets in the rate window grow (each reset is reported once)."""
        for key in keys:
            count = answers.resets.get(key)
            if count is None:
                continue
            before = self._resets.get(key)
            self._resets[key] = count
            if before is not None and count > before:
                with self._lock:
                    self._events.append(
                        Event(
                            now,
                            self._names[key],
                            "restart",
                            "request counters went down: the server restarted",
                        )
                    )
                self._book.mark_stale(key)  # re-read its recipe: a restart may change flags

    # -- snapshots -------------------------------------------------------------------------------------------
    def _snapshot(self, key: TargetKey, answers: _Answers, now: float) -> TargetSnapshot:
        name = self._names[key]
        labels = answers.labels.get(key)
        recipe, spec_known = self._book.resolve(key, labels)
        if recipe is not None:
            self._current[name] = recipe
        up_value = answers.up.get(key)
        present = key in answers.present
        errors: list[str] = []
        if up_value is not None:
            up = up_value == 1
            if not up:
                errors.append("Prometheus could not scrape it (up == 0 at its last scrape)")
            elif not present:
                errors.append("Prometheus scrapes it but it has no sglang series: is --enable-metrics set?")
        elif not present and not answers.complete:
            # A partial answer lacks it: that says nothing about the target (Prometheus did not say up == 0).
            return self._unknown(key, name, now, "Prometheus's answer is partial and lacks it")
        else:
            up = present
            if not present:
                errors.append("no fresh samples in Prometheus: its last scrape failed or it left discovery")
        values: dict[str, float | None] = {}
        if present and up:
            # A target Prometheus failed to scrape has no signals, even where the engine still returns its
            # last values (VictoriaMetrics writes no staleness markers for failed scrapes).
            values = {signal: by_key.get(key) for signal, by_key in answers.signals.items()}
            errors.extend(answers.errors)
            if spec_known and spec_enabled(recipe) is False:
                # Plain decoding emits one token per request per step (as collectors.derive): step = TPOT.
                values = apply_plain_decoding(values)
            if recipe is not None and recipe.gpu_count is not None:
                # /server_info's GPU count wins over the node's, as in the direct source.
                values, gpu_problem = apply_server_gpus(values, recipe.gpu_count, self._params)
                if gpu_problem is not None:
                    errors.append(gpu_problem)
            info_error = self._book.error(key)
            if recipe is None and info_error is not None:
                # Labels are the documented fallback; only a recipe known from neither is worth a word.
                errors.append(f"recipe unknown: no --extra-metric-labels, and {info_error}")
        if recipe is not None and recipe.max_running is not None:
            values["max_running"] = float(recipe.max_running)
        return TargetSnapshot(
            target=name,
            ts=now,
            up=up,
            error=f"{name}: " + "; ".join(errors) if errors else None,
            signals=Signals(**values),
            recipe_id=recipe.recipe_id if recipe is not None else None,
            deployment=self._deployment(key, labels),
            scrape_duration_s=answers.scrape_duration_s.get(key),
        )
