"""Rolling per-target windows of snapshots, kept in memory by the engine and rebuilt from history after a
restart.

Each target keeps the snapshots of the longest rule window, plus a frozen copy of the previous recipe's last
samples when its recipe changes (what AcceptLengthRegression compares against).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from collectors.model import TargetSnapshot


@dataclass(frozen=True, slots=True)
class RecipeSegment:
    """The last samples a target produced under its previous recipe, frozen when the recipe changed."""

    recipe_id: str
    changed_at: float  # ts of the first snapshot under the new recipe
    snapshots: tuple[TargetSnapshot, ...]


class TargetHistory:
    """One target's recent snapshots in time order (appends are O(1); slicing by time is a bisect)."""

    def __init__(self, target: str, horizon_s: float, baseline_s: float = 0.0) -> None:
        self.target = target
        self.horizon_s = horizon_s
        self.baseline_s = baseline_s
        self._snapshots: deque[TargetSnapshot] = deque()
        self._times: deque[float] = deque()
        self.recipe_id: str | None = None  # the last recipe seen (kept while the target is down)
        self.deployment: str = ""
        self.previous: RecipeSegment | None = None

    def __len__(self) -> int:
        return len(self._snapshots)

    def __iter__(self) -> Iterator[TargetSnapshot]:
        return iter(self._snapshots)

    @property
    def latest(self) -> TargetSnapshot | None:
        return self._snapshots[-1] if self._snapshots else None

    def add(self, snapshot: TargetSnapshot) -> None:
        """Append one snapshot; older or repeated timestamps are ignored (a replay overlapping live data)."""

        if self._times and snapshot.ts <= self._times[-1]:
            return
        if snapshot.deployment:
            self.deployment = snapshot.deployment
        new_recipe = snapshot.recipe_id
        if new_recipe is not None and self.recipe_id is not None and new_recipe != self.recipe_id:
            start = snapshot.ts - self.baseline_s
            kept = tuple(s for s in self._snapshots if s.recipe_id == self.recipe_id and s.ts >= start)
            self.previous = RecipeSegment(self.recipe_id, snapshot.ts, kept)
        if new_recipe is not None:
            self.recipe_id = new_recipe
        self._snapshots.append(snapshot)
        self._times.append(snapshot.ts)
        self.prune(snapshot.ts)

    def discard_from(self, ts: float) -> None:
        """Forget the snapshots stamped at or after ``ts`` (the wall clock stepped back past them)."""
        while self._times and self._times[-1] >= ts:
            self._times.pop()
            self._snapshots.pop()

    def prune(self, now: float) -> None:
        cutoff = now - self.horizon_s
        while self._times and self._times[0] < cutoff:
            self._times.popleft()
            self._snapshots.popleft()

    def since(self, start_ts: float) -> list[TargetSnapshot]:
        """Snapshots with ts ≥ start_ts, oldest first."""
        index = bisect.bisect_left(self._times, start_ts)
        return [self._snapshots[i] for i in range(index, len(self._snapshots))]
