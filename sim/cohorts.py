"""Requests as cohorts: those admitted together share prompt length, progress and mean acceptability.

A cohort's members finish spread over an output-length range (their own lengths and their own acceptability),
so a batch de-synchronises over time as real ones do. ``Cohort.decode`` is pure arithmetic; the engine does
the bookkeeping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from sim import mechanism as mech
from sim.workload import Content


@lru_cache(maxsize=65536)
def _accept_length_bucketed(context_bucket: int, window: int, content: Content) -> float:
    return mech.accept_length(2 ** (context_bucket / 64), window, content)


def base_accept_length(context_tokens: float, window: int, content: Content) -> float:
    """Noise-free accept length, context quantised to 1/64 octave (a smooth curve; keeps long runs cheap)."""
    return _accept_length_bucketed(round(64 * math.log2(max(context_tokens, 1.0))), window, content)


class Decoded(NamedTuple):
    """What some verify steps of one cohort produced."""

    tokens: float  # output tokens generated
    request_steps: float  # Σ over members of the steps they took part in
    finished: int  # members that reached their output length
    finished_osl: float = 0.0  # their (mean) output length
    finished_at: float = 0.0  # fraction of the steps after which they finished


@dataclass(slots=True, eq=False)
class Cohort:
    count: int  # still running
    admitted: int
    isl: float
    cached: float  # prompt tokens per request served from the prefix cache
    osl_lo: float  # members finish uniformly over [osl_lo, osl_hi] output tokens
    osl_hi: float
    factor: float  # the cohort's mean acceptability relative to the workload's
    arrival_s: float
    first_token_s: float
    streaming: bool
    done: int = 0
    progress: float = 1.0  # output tokens per request so far: the prefill produced the first
    steps: float = 0.0  # verify steps per request so far

    def finished_fraction(self, progress: float) -> float:
        if self.osl_hi <= self.osl_lo:
            return 1.0 if progress >= self.osl_lo else 0.0
        return min(1.0, max(0.0, (progress - self.osl_lo) / (self.osl_hi - self.osl_lo)))

    def decode(self, steps: float, accept_length: float) -> Decoded:
        """Advance every member ``steps`` verify steps of ``accept_length`` tokens; retire finishers."""
        count = self.count
        if steps <= 0 or count <= 0:
            return Decoded(0.0, 0.0, 0)
        p0 = self.progress
        p1 = p0 + steps * accept_length
        self.progress, self.steps = p1, self.steps + steps
        if p1 < self.osl_lo:  # nobody finishes this time
            return Decoded(count * (p1 - p0), count * steps, 0)
        target = min(self.admitted, round(self.admitted * self.finished_fraction(p1)))
        done = max(0, min(count, target - self.done))
        if not done:
            return Decoded(count * (p1 - p0), count * steps, 0)
        # The finishers' output lengths lie in the part of the range these steps crossed.
        osl = (max(self.osl_lo, p0) + min(self.osl_hi, p1)) / 2 if self.osl_hi > self.osl_lo else self.osl_lo
        osl = max(p0, min(p1, osl))
        frac = (osl - p0) / (p1 - p0)
        self.count -= done
        self.done += done
        tokens = count * (p1 - p0) - done * (p1 - osl)
        return Decoded(tokens, count * steps - done * steps * (1 - frac), done, osl, frac)


@dataclass(slots=True)
class Waiting:
    count: int
    arrival_s: float


def merge_closest(cohorts: list[Cohort]) -> None:
    """Bound the work per window: merge the two neighbouring cohorts whose progress is closest.

    Each cohort's remaining members finish uniformly over [max(osl_lo, progress), osl_hi]; moved to the merged
    progress, those ranges shift by the same amount, and the merged cohort spans both.
    """
    i = min(range(len(cohorts) - 1), key=lambda k: abs(cohorts[k].progress - cohorts[k + 1].progress))
    a, b = cohorts[i], cohorts[i + 1]
    n = a.count + b.count

    def mean(x: float, y: float) -> float:
        return (a.count * x + b.count * y) / n

    progress = mean(a.progress, b.progress)
    lo = min(max(c.osl_lo, c.progress) + progress - c.progress for c in (a, b))
    hi = max(c.osl_hi + progress - c.progress for c in (a, b))
    cohorts[i] = Cohort(
        count=n,
        admitted=n,
        isl=mean(a.isl, b.isl),
        cached=mean(a.cached, b.cached),
        osl_lo=lo,
        osl_hi=max(hi, lo),
        factor=mean(a.factor, b.factor),
        arrival_s=mean(a.arrival_s, b.arrival_s),
        first_token_s=mean(a.first_token_s, b.first_token_s),
        streaming=a.streaming if a.count >= b.count else b.streaming,
        progress=progress,
        steps=mean(a.steps, b.steps),
    )
    del cohorts[i + 1]
