"""One SLO burn scenario, built once and fed both to specwatch's engine (snapshots carrying the per-scrape
SLI events ``collectors.slo.event_counts`` derives from the cumulative series) and to ``promtool test rules``
(the same cumulative series as SGLang exposes them), so the two judge the same numbers.

A TTFT ≤ 1 s SLO at 99 % over 28 days (the workbook's conditions scaled: page 13.4× over 1 h/5 m and 5.6×
over 6 h/30 m, ticket 0.93× over 3 d/6 h), one scrape a minute for 150 minutes, four deployments:

- east: 200 requests a minute, 0.5 % slow, then from minute 60 30 % slow (a fast burn: pages),
- west: 200 a minute, 3 % slow throughout (a slow burn: a ticket, never a page),
- south: 1,600 a minute, 0.5 % slow (healthy),
- tiny: three requests an hour, one in three slow (burns fast, but below the traffic floor: never alerts).

The series vary the way real fleets do: east splits its histogram over ``priority`` and writes ``le="1.0"``
(prometheus_client), west is stored with the underscore spelling and ``le="1"`` (a Go exporter, or
Prometheus 3's normalisation the other way), and every target has a bucket of another boundary
(``le="10"``) the threshold's matcher must not take.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from alerts.engine import AlertEngine
from alerts.model import AlertInstance, AlertTransition
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from collectors.model import SourceHealth, TargetSnapshot
from collectors.signals import TTFT
from collectors.slo import Sli, bucket_sample, build_slos, event_counts
from collectors.slo_ledger import SloLedger
from config import Config, parse_config
from tests.alerts.conftest import Clock

T0 = 1_800_000_000.0  # a whole minute: the ledger's minute buckets line up with the scrapes
STEP_S = 60
MINUTES = 150
SLO_NAME = "ttft-1s"
SLI = Sli("ttft", 1.0)

PerMinute = Callable[[int], tuple[float, float]]  # minute → (good, total) served in that minute


def _east(minute: int) -> tuple[float, float]:
    return (199.0, 200.0) if minute <= 60 else (140.0, 200.0)


def _west(minute: int) -> tuple[float, float]:
    return 194.0, 200.0


def _south(minute: int) -> tuple[float, float]:
    return 1592.0, 1600.0


def _tiny(minute: int) -> tuple[float, float]:
    if minute % 20:
        return 0.0, 0.0
    return (0.0, 1.0) if minute % 60 == 0 else (1.0, 1.0)


@dataclass(frozen=True, slots=True)
class ScenarioTarget:
    name: str
    deployment: str
    per_minute: PerMinute
    spelling: str = "sglang:"  # or sglang_ (stored from OpenMetrics)
    le: str = "1.0"
    priorities: tuple[str, ...] = ()  # split the histogram over these priority values

    def cumulative(self) -> list[tuple[float, float]]:
        """(good, total) counters at each scrape, minute 0 being the first (zero) scrape."""
        good = total = 0.0
        out = [(0.0, 0.0)]
        for minute in range(1, MINUTES + 1):
            g, t = self.per_minute(minute)
            good, total = good + g, total + t
            out.append((good, total))
        return out


TARGETS = (
    ScenarioTarget("east-0", "east", _east, priorities=("0", "1")),
    ScenarioTarget("west-0", "west", _west, spelling="sglang_", le="1"),
    ScenarioTarget("south-0", "south", _south),
    ScenarioTarget("tiny-0", "tiny", _tiny),
)


def config(**rule_settings: object) -> Config:
    """The config both sides use: the SLO, and the scrape (and evaluation) interval of the scenario."""
    return parse_config(
        {
            "scrape": {"interval_s": STEP_S, "timeout_s": 5},
            "targets": [
                {"name": t.name, "url": f"http://{t.name}:30000", "labels": {"deployment": t.deployment}}
                for t in TARGETS
            ],
            "slos": [{"name": SLO_NAME, "sli": {"kind": "ttft", "threshold_s": 1}, "objective": 0.99}],
            "alerts": {"rules": {"ErrorBudgetBurn": rule_settings}} if rule_settings else {},
        }
    )


def snapshots(
    minute: int, *, up: bool = True, targets: tuple[ScenarioTarget, ...] = TARGETS
) -> list[TargetSnapshot]:
    """Every target's snapshot at one scrape, with the SLI events since the previous one."""
    out = []
    for target in targets:
        events: tuple[tuple[str, float, float], ...] = ()
        if up and minute > 0:
            series = target.cumulative()
            values, previous = (_samples(*series[m]) for m in (minute, minute - 1))
            counted = event_counts(SLI, values, previous)
            if counted is not None:
                events = ((SLI.key, counted.good, counted.total),)
        out.append(
            TargetSnapshot(
                target=target.name,
                ts=T0 + STEP_S * minute,
                up=up,
                error=None if up else "connection refused",
                deployment=target.deployment,
                slo_events=events,
            )
        )
    return out


def _samples(good: float, total: float) -> dict[str, float]:
    return {bucket_sample(TTFT, 1.0): good, f"sglang:{TTFT.name}_count": total}


def input_series() -> list[dict[str, str]]:
    """The targets' cumulative series as promtool input: ``job``/``instance``/``deployment`` target labels,
    as a scrape config with ``labels: {deployment: ...}`` gives them."""
    out = []
    for target in TARGETS:
        rows = target.cumulative()
        shares = [(p, 1.0 / len(target.priorities)) for p in target.priorities] or [("", 1.0)]
        for priority, share in shares:
            labels = f'job="sglang", instance="{target.name}", deployment="{target.deployment}"'
            if priority:
                labels += f', priority="{priority}"'
            name = f"{target.spelling}{TTFT.name}"
            for suffix, column, extra in (("_bucket", 0, f', le="{target.le}"'), ("_count", 1, "")):
                values = " ".join(f"{row[column] * share:g}" for row in rows)
                out.append({"series": f'{{__name__="{name}{suffix}", {labels}{extra}}}', "values": values})
            # A bucket of another boundary, which the le matcher must not take for the threshold's.
            wrong = " ".join(f"{row[1] * share:g}" for row in rows)
            out.append({"series": f'{{__name__="{name}_bucket", {labels}, le="10"}}', "values": wrong})
    return out


# -- the engine's side -------------------------------------------------------------------------------------
HOOK = "http://127.0.0.1:9/hook"
NOT_SCOPE = {"alertname", "slo", "severity", "long_window", "short_window"}


def scope_of(labels: dict[str, str]) -> str:
    """The scope an alert's labels name, as the ledger keys it ("" for the whole fleet)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in NOT_SCOPE)


@dataclass
class Run:
    """One engine (and its ledger) driven minute by minute through the scenario."""

    path: Path
    config: Config = field(default_factory=config)
    clock: Clock = field(default_factory=lambda: Clock(T0))
    transitions: list[AlertTransition] = field(default_factory=list)
    source_answers: bool = True

    def __post_init__(self) -> None:
        slos = build_slos(self.config)
        self.ledger = SloLedger(slos, None, clock=self.clock)
        self.store = AlertStateStore(str(self.path))
        self.engine = AlertEngine(
            build_rules(self.config.alerts.rules),
            self.store,
            clock=self.clock,
            scrape_interval_s=STEP_S,
            webhook_urls=[HOOK],
            slos=slos,
            slo_counts=self.ledger,
        )
        self.engine.watch_source(lambda: SourceHealth("direct", answered=self.source_answers))

    def step(self, minute: int, batch: Sequence[TargetSnapshot] | None = None) -> list[AlertTransition]:
        self.clock.now = T0 + STEP_S * minute
        batch = list(batch) if batch is not None else snapshots(minute)
        self.ledger.observe(batch)  # the ledger observes before the engine, as in the Service
        found = self.engine.observe(batch, self.clock.now)
        self.transitions += found
        return found

    def run(self, minutes: range) -> None:
        for minute in minutes:
            self.step(minute)

    def fired(self) -> set[tuple[str, str]]:
        """(severity, scope) of every ErrorBudgetBurn instance that fired during the run."""
        return {
            (t.labels_dict["severity"], scope_of(t.labels_dict))
            for t in self.transitions
            if t.rule == "ErrorBudgetBurn" and t.kind == "firing"
        }

    def active(self, severity: str, scope: str) -> AlertInstance | None:
        for instance in self.engine.active():
            if instance.severity == severity and scope_of(instance.labels_dict) == scope:
                return instance
        return None

    def notified(self) -> list[dict[str, object]]:
        """Every alert the webhook receiver would get, in order (one per transition and message)."""
        bodies = [json.loads(d.payload) for d in reversed(self.store.deliveries(1000, receiver=HOOK))]
        return [alert for body in bodies for alert in body["alerts"]]
