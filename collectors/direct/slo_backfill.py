"""The SLO counts of a past, from its /metrics bodies: what the demo's simulated history writes beside its
samples, counted as the direct source counts a live scrape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from collectors.direct.metrics_reader import parse_exposition, sample_plan
from collectors.model import TargetSnapshot
from collectors.slo import Slo, counter_for, kept_samples, slis
from collectors.slo_ledger import SloLedger
from collectors.store.slo_counts import SloCountStore


class SloBackfill:
    """A past's SLO counts from its /metrics bodies, read and counted exactly as the direct source does
    (the SLIs' sample plan, the compiled counters, a change per pair of successive bodies of one server) and
    summed by a store-only ledger. For the simulated history the demo writes; bodies of one server come in
    time order, servers and stretches in any order."""

    def __init__(self, slos: Sequence[Slo], store: SloCountStore) -> None:
        self._plan = sample_plan(kept_samples(slos))
        self._counters = tuple((sli.key, counter_for(sli)) for sli in slis(slos))
        self._keys = tuple(kept_samples(slos))
        self._previous: dict[str, tuple[float, dict[str, float]]] = {}
        self._labels: dict[str, Mapping[str, str]] = {}
        self._batch: list[TargetSnapshot] = []
        self._ledger = SloLedger(
            slos, store, labels=lambda target: self._labels.get(target, {}), keep_sums=False
        )

    def body(self, target: str, labels: dict[str, str], ts: float, body: bytes) -> None:
        values = parse_exposition(body, plan=self._plan).values
        kept = {name: values[name] for name in self._keys if name in values}
        previous = self._previous.get(target)
        self._previous[target] = (ts, kept)
        if previous is None or previous[0] >= ts:
            return  # a server's first body, or an earlier stretch written after a later one: no pair
        events = tuple(
            (key, found.good, found.total)
            for key, count in self._counters
            if (found := count(kept, previous[1])) is not None
        )
        self._labels.setdefault(target, labels)
        self._batch.append(
            TargetSnapshot(target, ts, True, deployment=labels.get("deployment", ""), slo_events=events)
        )

    def flush(self) -> None:
        """Write what was counted since the last flush (one transaction)."""
        batch, self._batch = self._batch, []
        self._ledger.observe(batch)
        self._ledger.close()
