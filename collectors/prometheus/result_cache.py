"""Range answers shared by every reader of the process: what one session read, the next gets without a query.

Prometheus 2.42 keeps no query results; VictoriaMetrics keeps them for step-aligned ranges. This cache is the
dashboard's own, for both: keyed by the engine (URL and credentials), the query, the step and the aligned
range (``read_plan.aligned_grid``), kept for about a scrape interval — a new interval may bring new samples —
and bounded in bytes. Two readers asking for the same range at once send one query (the second waits).

A ``live`` read (the same window slid forward every interval) also reuses the part of an earlier answer that
can no longer change: instants older than ``final_before`` (a few scrape intervals back: samples and
recording rules have landed, VictoriaMetrics' latency offset has passed). Only the newer instants are
queried, and each series is the old points then the new ones.

Arrays handed out are read-only: every reader shares them.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from collectors.prometheus.matrix import RangeSeries

# (first instant, last instant, the list its warnings go to) → the answer
Fetch = Callable[[float, float, list[str]], list[RangeSeries]]


@dataclass(frozen=True, slots=True)
class RangeKey:
    """One query on one engine at one step (``engine``: its URL and credentials, ``PromClient.identity``)."""

    engine: str
    expr: str
    step_s: float


@dataclass(frozen=True, slots=True)
class _Entry:
    first_ts: float
    last_ts: float
    final_ts: float  # instants up to this one can no longer change
    series: list[RangeSeries]
    warnings: tuple[str, ...]  # the engine's: a partial answer stays partial when read from here
    stored_at: float
    ttl_s: float
    size: int


def _frozen(series: list[RangeSeries]) -> list[RangeSeries]:
    for item in series:
        item.timestamps.flags.writeable = False
        item.values.flags.writeable = False
    return series


def _size(series: list[RangeSeries]) -> int:
    return sum(s.timestamps.nbytes + s.values.nbytes + 64 * (len(s.labels) + 1) for s in series)


def _label_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _slice(series: RangeSeries, first_ts: float, last_ts: float) -> RangeSeries:
    keep = (series.timestamps >= first_ts) & (series.timestamps <= last_ts)
    if keep.all():
        return series
    return RangeSeries(series.labels, series.timestamps[keep], series.values[keep])


def _joined(old: list[RangeSeries], new: list[RangeSeries]) -> list[RangeSeries]:
    """Each series' old points then its new ones (a series in one answer only keeps its own)."""
    by_labels = {_label_key(s.labels): s for s in old}
    out: list[RangeSeries] = []
    for item in new:
        before = by_labels.pop(_label_key(item.labels), None)
        if before is None or not len(before.timestamps):
            out.append(item)
            continue
        out.append(
            RangeSeries(
                item.labels,
                np.concatenate([before.timestamps, item.timestamps]),
                np.concatenate([before.values, item.values]),
            )
        )
    out.extend(s for s in by_labels.values() if len(s.timestamps))
    return out


class RangeResults:
    """The process's range answers (see the module docstring); ``max_bytes`` bounds what is kept."""

    def __init__(self, *, max_bytes: int = 96 * 2**20, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[RangeKey, float, float], _Entry] = OrderedDict()
        self._pending: dict[
            tuple[RangeKey, float, float], Future[tuple[list[RangeSeries], tuple[str, ...]]]
        ] = {}
        self._bytes = 0
        self.hits = 0  # answers served whole from the cache
        self.extended = 0  # live answers that queried only their newest instants

    def read(
        self,
        key: RangeKey,
        first_ts: float,
        last_ts: float,
        fetch: Fetch,
        *,
        ttl_s: float,
        final_before: float | None = None,
        warnings: list[str] | None = None,
    ) -> list[RangeSeries]:
        """The answer for instants ``first_ts``…``last_ts`` (multiples of ``key.step_s``): a kept one younger
        than ``ttl_s``, else fetched. ``final_before``: the read is live; instants before it are final, so a
        kept answer covering some of them is extended with a query of the rest only. The answer's warnings
        (a partial answer) go to ``warnings``, kept or fetched."""
        said = warnings if warnings is not None else []
        slot = (key, first_ts, last_ts)
        with self._lock:
            entry = self._entries.get(slot)
            if entry is not None and self._clock() - entry.stored_at < ttl_s:
                self._entries.move_to_end(slot)
                self.hits += 1
                said.extend(entry.warnings)
                return entry.series
            waiting = self._pending.get(slot)
            if waiting is None:
                mine: Future[tuple[list[RangeSeries], tuple[str, ...]]] = Future()
                self._pending[slot] = mine
                base = self._base(key, first_ts) if final_before is not None else None
        if waiting is not None:
            series, shared = waiting.result()
            said.extend(shared)
            return series
        mine_said: list[str] = []
        try:
            series = self._fetch(key, first_ts, last_ts, fetch, base, mine_said)
        except BaseException as exc:
            with self._lock:
                self._pending.pop(slot, None)
            mine.set_exception(exc)
            raise
        # The last instant (a multiple of the step) at or before final_before; none for a read not live.
        final = first_ts - key.step_s
        if final_before is not None:
            final = min(last_ts, math.floor(final_before / key.step_s + 1e-9) * key.step_s)
        entry = _Entry(
            first_ts, last_ts, final, series, tuple(mine_said), self._clock(), ttl_s, _size(series)
        )
        self._store(slot, entry)
        mine.set_result((series, entry.warnings))
        said.extend(mine_said)
        return series

    def _base(self, key: RangeKey, first_ts: float) -> _Entry | None:
        """The kept answer of this query whose final part reaches furthest past ``first_ts`` (lock held)."""
        best: _Entry | None = None
        for (other, _first, _last), entry in self._entries.items():
            if other != key or entry.first_ts > first_ts or entry.final_ts < first_ts:
                continue
            if best is None or entry.final_ts > best.final_ts:
                best = entry
        return best

    def _fetch(
        self,
        key: RangeKey,
        first_ts: float,
        last_ts: float,
        fetch: Fetch,
        base: _Entry | None,
        said: list[str],
    ) -> list[RangeSeries]:
        if base is None:
            return _frozen(fetch(first_ts, last_ts, said))
        start_new = base.final_ts + key.step_s
        old = [
            s for s in (_slice(item, first_ts, base.final_ts) for item in base.series) if len(s.timestamps)
        ]
        new = fetch(start_new, last_ts, said) if start_new <= last_ts else []
        with self._lock:
            self.extended += 1
        return _frozen(_joined(old, new))

    def _store(self, slot: tuple[RangeKey, float, float], entry: _Entry) -> None:
        with self._lock:
            self._pending.pop(slot, None)
            if entry.size > self._max_bytes:
                return
            previous = self._entries.pop(slot, None)
            if previous is not None:
                self._bytes -= previous.size
            # Expired answers go, but for the newest of each query: its final instants still extend a live
            # read of the next interval.
            now = self._clock()
            newest: dict[RangeKey, tuple[float, tuple[RangeKey, float, float]]] = {}
            for other in self._entries:
                if other[2] >= newest.get(other[0], (float("-inf"), other))[0]:
                    newest[other[0]] = (other[2], other)
            keep = {found for _, found in newest.values()}
            for other, kept in list(self._entries.items()):
                if other not in keep and now - kept.stored_at >= kept.ttl_s:
                    self._bytes -= self._entries.pop(other).size
            self._entries[slot] = entry
            self._bytes += entry.size
            while self._bytes > self._max_bytes and self._entries:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.size

    def drop(self, engine: str | None = None) -> None:
        """Forget every kept answer (of one engine), as a restarted process would."""
        with self._lock:
            for slot in [s for s in self._entries if engine is None or s[0].engine == engine]:
                self._bytes -= self._entries.pop(slot).size

    @property
    def kept_bytes(self) -> int:
        with self._lock:
            return self._bytes


# The process's one cache: every session's readers of every engine (keys name the engine).
RANGE_RESULTS = RangeResults()
