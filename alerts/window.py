"""Rolling per-target windows, kept in memory by the engine and rebuilt from history after a restart.

Two tiers, because whole snapshots are heavy (26 boxed floats, ~930 bytes each: 1,000 servers × 30 minutes
were ~320 MB of the dashboard's process):

- the last ``horizon_s`` as whole snapshots: the threshold rules average any signal over ≤ 5 minutes;
- the last ``long_horizon_s`` as columns of the few values the long-window rules read (``LONG_SIGNALS``,
  up, the recipe): AcceptanceDecay's 30-minute fit, AcceptLengthRegression's windows, how long a target has
  been down, RadixCacheWaste's 5 minutes. 80 bytes a sample.

A recipe change freezes the previous recipe's last ``baseline_s`` of columns (what AcceptLengthRegression
compares against).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from collectors.model import Signals, TargetSnapshot
from collectors.sample_columns import FloatArray

# The signals the long-window rules read; everything else is only kept for ``horizon_s``.
LONG_SIGNALS: tuple[str, ...] = (
    "running",
    "avg_context_tokens",
    "accept_length",
    "step_latency_s",
    "output_tok_s",
    "cache_hit_rate",  # RadixCacheWaste's 5 minutes
    "state_pool_usage",
)
_TS, _UP, _RECIPE = 0, 1, 2  # columns before the signals
_WIDTH = 3 + len(LONG_SIGNALS)
_NO_RECIPE = -1.0


def _column(name: str) -> int:
    return 3 + LONG_SIGNALS.index(name)


@dataclass(frozen=True, slots=True)
class Samples:
    """A stretch of one target's samples as columns, oldest first: ``ts``, ``up`` (1.0 up, 0.0 down, NaN
    unknown), the recipe in force and ``LONG_SIGNALS`` (NaN unknown)."""

    data: FloatArray  # rows × columns
    recipe_ids: tuple[str, ...]  # a row's recipe code indexes this

    def __len__(self) -> int:
        return len(self.data)

    def signal(self, name: str) -> FloatArray:
        return self.data[:, _column(name)]

    def busy(self, min_running: float, recipe_id: str | None = None) -> Samples:
        """The up samples with at least ``min_running`` running requests (under ``recipe_id`` when given)."""
        data = self.data
        mask = (data[:, _UP] == 1.0) & (data[:, _column("running")] >= min_running)  # NaN is never busy
        if recipe_id is not None:
            if recipe_id not in self.recipe_ids:
                return Samples(data[:0], self.recipe_ids)
            mask &= data[:, _RECIPE] == self.recipe_ids.index(recipe_id)
        return Samples(data[mask], self.recipe_ids)

    def up(self) -> Samples:
        """The samples of a target that answered (neither down nor unknown)."""
        return Samples(self.data[self.data[:, _UP] == 1.0], self.recipe_ids)

    def mean(self, name: str) -> float | None:
        """Mean of one signal over the samples that know it; None when none does."""
        values = self.signal(name)
        known = values[~np.isnan(values)]
        return math.fsum(known.tolist()) / len(known) if len(known) else None


@dataclass(frozen=True, slots=True)
class RecipeSegment:
    """The last samples a target produced under its previous recipe, frozen when the recipe changed."""

    recipe_id: str
    changed_at: float  # ts of the first sample under the new recipe
    samples: Samples


class _Columns:
    """Rows appended in time order into one preallocated array; the oldest dropped by moving the start.
    Room is made by sliding the live rows to the front, or by doubling when they fill most of it."""

    def __init__(self) -> None:
        self._data: FloatArray = np.empty((16, _WIDTH), np.float64)
        self._start = self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    def view(self) -> FloatArray:
        """The live rows (a view: valid until the next append)."""
        return self._data[self._start : self._end]

    def append(self, row: Sequence[float]) -> None:
        if self._end == len(self._data):
            live = self._end - self._start
            if live <= 3 * len(self._data) // 4:
                self._data[:live] = self._data[self._start : self._end].copy()
            else:
                grown = np.empty((2 * len(self._data), _WIDTH), np.float64)
                grown[:live] = self._data[self._start : self._end]
                self._data = grown
            self._start, self._end = 0, live
        self._data[self._end] = row
        self._end += 1

    def drop_before(self, ts: float) -> None:
        self._start += int(np.searchsorted(self.view()[:, _TS], ts, side="left"))

    def drop_from(self, ts: float) -> None:
        self._end = self._start + int(np.searchsorted(self.view()[:, _TS], ts, side="left"))


class TargetHistory:
    """One target's recent history in time order (appends are O(1); slicing by time is a bisect)."""

    def __init__(
        self,
        target: str,
        horizon_s: float,
        baseline_s: float = 0.0,
        long_horizon_s: float | None = None,
    ) -> None:
        self.target = target
        self.horizon_s = horizon_s
        self.long_horizon_s = max(horizon_s, long_horizon_s if long_horizon_s is not None else horizon_s)
        self.baseline_s = baseline_s
        self._snapshots: deque[TargetSnapshot] = deque()
        self._times: deque[float] = deque()
        self._latest: TargetSnapshot | None = None  # kept past horizon_s: how long a target has been silent
        self._columns = _Columns()
        self._newest_ts: float | None = None  # the columns' newest ts (a float: compared on every add)
        self._recipe_ids: list[str] = []  # the recipe codes of the columns
        self.recipe_id: str | None = None  # the last recipe seen (kept while the target is down)
        self.deployment: str = ""
        self.previous: RecipeSegment | None = None

    def __len__(self) -> int:
        return len(self._snapshots)

    def __iter__(self) -> Iterator[TargetSnapshot]:
        return iter(self._snapshots)

    @property
    def latest(self) -> TargetSnapshot | None:
        if self._latest is None and len(self._columns):
            # Restored from columns only (the target was silent through the last horizon_s): its newest
            # sample, with the values the columns keep, says when it was last seen and how.
            row = self._columns.view()[-1]
            up = float(row[_UP])
            self._latest = TargetSnapshot(
                target=self.target,
                ts=float(row[_TS]),
                up=up == 1.0,
                signals=Signals(**{name: _number(row[_column(name)]) for name in LONG_SIGNALS}),
                recipe_id=self._recipe_of(row[_RECIPE]),
                deployment=self.deployment,
                unknown=math.isnan(up),
            )
        return self._latest

    def add(self, snapshot: TargetSnapshot) -> None:
        """Append one snapshot; older or repeated timestamps are ignored (a replay overlapping live data)."""
        signals = snapshot.signals
        up = math.nan if snapshot.unknown else float(snapshot.up)
        values = [getattr(signals, name) for name in LONG_SIGNALS]
        if self.add_sample(snapshot.ts, up, snapshot.recipe_id, snapshot.deployment, values):
            self._snapshots.append(snapshot)
            self._times.append(snapshot.ts)
            self._latest = snapshot
            self.prune(snapshot.ts)

    def add_sample(
        self,
        ts: float,
        up: float,
        recipe_id: str | None,
        deployment: str,
        values: Sequence[float | None],
    ) -> bool:
        """Append one sample to the columns only (history older than ``horizon_s``); ``values`` in
        ``LONG_SIGNALS`` order. False when ``ts`` is not newer than the newest sample (ignored)."""
        if self._newest_ts is not None and ts <= self._newest_ts:
            return False
        if deployment:
            self.deployment = deployment
        if recipe_id is not None and self.recipe_id is not None and recipe_id != self.recipe_id:
            view, old = self._columns.view(), self._code(self.recipe_id)
            kept = view[(view[:, _TS] >= ts - self.baseline_s) & (view[:, _RECIPE] == old)]
            self.previous = RecipeSegment(self.recipe_id, ts, Samples(kept.copy(), tuple(self._recipe_ids)))
        if recipe_id is not None:
            self.recipe_id = recipe_id
        code = _NO_RECIPE if recipe_id is None else self._code(recipe_id)
        self._columns.append([ts, up, code, *(math.nan if v is None else v for v in values)])
        self._newest_ts = ts
        return True

    def discard_from(self, ts: float) -> None:
        """Forget the samples stamped at or after ``ts`` (the wall clock stepped back past them)."""
        while self._times and self._times[-1] >= ts:
            self._times.pop()
            self._snapshots.pop()
        self._columns.drop_from(ts)
        self._newest_ts = float(self._columns.view()[-1, _TS]) if len(self._columns) else None
        if self._latest is not None and self._latest.ts >= ts:
            self._latest = self._snapshots[-1] if self._snapshots else None

    def prune(self, now: float) -> None:
        cutoff = now - self.horizon_s
        while self._times and self._times[0] < cutoff:
            self._times.popleft()
            self._snapshots.popleft()
        self._columns.drop_before(now - self.long_horizon_s)

    def since(self, start_ts: float) -> list[TargetSnapshot]:
        """Whole snapshots with ts ≥ start_ts, oldest first (at most ``horizon_s`` of them)."""
        index = bisect.bisect_left(self._times, start_ts)
        return [self._snapshots[i] for i in range(index, len(self._snapshots))]

    def samples_since(self, start_ts: float) -> Samples:
        """The columns with ts ≥ start_ts (up to ``long_horizon_s``): a view, valid until the next add."""
        view = self._columns.view()
        index = int(np.searchsorted(view[:, _TS], start_ts, side="left"))
        return Samples(view[index:], tuple(self._recipe_ids))

    def up_window(self, start_ts: float) -> Samples:
        """The up samples with ts ≥ start_ts; none there, the newest sample alone if it is up (a window
        longer than the scrape interval still judges a target scraped less often)."""
        window = self.samples_since(start_ts).up()
        if len(window):
            return window
        view = self._columns.view()
        newest = view[-1:] if len(view) and view[-1, _UP] == 1.0 else view[:0]
        return Samples(newest, tuple(self._recipe_ids))

    def down_since(self) -> float | None:
        """When the current run of down samples began (None while the newest sample is not down). A gap of
        unknown samples (the source was blind) ends the run: it does not count as down time."""
        view = self._columns.view()
        if not len(view) or view[-1, _UP] != 0.0:
            return None
        not_down = np.flatnonzero(view[:, _UP] != 0.0)  # up or unknown (NaN != 0)
        return float(view[not_down[-1] + 1 if len(not_down) else 0, _TS])

    def _code(self, recipe_id: str) -> int:
        try:
            return self._recipe_ids.index(recipe_id)
        except ValueError:
            self._recipe_ids.append(recipe_id)
            return len(self._recipe_ids) - 1

    def _recipe_of(self, code: float) -> str | None:
        return None if code < 0 else self._recipe_ids[int(code)]


def _number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)
