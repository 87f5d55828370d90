"""What a history read asks Prometheus for: the evaluation grid and the queries, decided before any is sent.

- The grid: a step that is a whole number of scrape intervals, and evaluation instants on multiples of it, so
  the same range asked twice (another tab, the next rerun, another page) is the same query —
  VictoriaMetrics' result cache answers it, and so does this process's (``result_cache.py``).
- The queries: the signals asked for, plus the signals their plain-decoding rules recompute them from
  (``step_latency_s`` of a plain-decoding server is 1 × ``tpot_s``), never the whole catalogue; ``up``; the
  scrape duration only when asked; and the recipe labels only when a text column or a plain-decoding rule
  needs them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from collectors.model import SIGNAL_NAMES
from collectors.signal_expr import refs_of
from collectors.signals import BY_NAME

# Texts read from the recipe labels (``--extra-metric-labels``) or the deployment label.
_LABEL_TEXTS = frozenset({"recipe_id", "deployment"})


@dataclass(frozen=True, slots=True)
class Grid:
    """Evaluation instants ``first, first + step, ..., last``: every one a multiple of ``step_s``."""

    first_ts: float
    last_ts: float
    step_s: float

    @property
    def points(self) -> int:
        return round((self.last_ts - self.first_ts) / self.step_s) + 1


def aligned_grid(start_ts: float, end_ts: float, max_points: int, interval_s: float) -> Grid:
    """At most ``max_points`` instants covering [start_ts, end_ts], at a whole number of scrape intervals
    apart, on multiples of that step. The last instant is the first multiple at or after ``end_ts`` (as the
    pages' windows end at or after now), the first the earliest that keeps within ``max_points``."""
    interval = max(interval_s, 1e-3)
    span = max(end_ts - start_ts, 0.0)
    wanted = span / max(max_points - 1, 1)
    step = max(math.ceil(wanted / interval - 1e-9), 1) * interval
    last = math.ceil(end_ts / step - 1e-9) * step
    first = math.ceil(start_ts / step - 1e-9) * step
    while (last - first) / step + 1 > max_points + 1e-9:
        first += step
    return Grid(first, max(last, first), step)


def signals_to_query(values: Sequence[str]) -> tuple[str, ...]:
    """The signals a read of ``values`` queries, in catalogue order: those asked for that PromQL can say
    (``max_running`` comes from the recipe) and, for each whose plain-decoding rule recomputes it, the signals
    that recomputation reads, transitively."""
    wanted = {name for name in values if name in BY_NAME and BY_NAME[name].expr is not None}
    pending = list(wanted)
    while pending:
        signal = BY_NAME[pending.pop()]
        if signal.plain == "recomputed" and signal.expr is not None:
            for ref in refs_of(signal.expr):
                if ref not in wanted:
                    wanted.add(ref)
                    pending.append(ref)
    return tuple(name for name in SIGNAL_NAMES if name in wanted)


def needs_labels(values: Sequence[str], texts: Sequence[str]) -> bool:
    """Whether the recipe labels must be read: a text column comes from them, or a signal asked for has a
    plain-decoding rule (which only a recipe that says speculative decoding is off triggers)."""
    if _LABEL_TEXTS.intersection(texts):
        return True
    return any(name in BY_NAME and BY_NAME[name].plain != "as computed" for name in values)
