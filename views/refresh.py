"""Live panels: one render at a time, at a pace the process can keep, said on the panel.

Every live panel (a fragment with ``run_every``) reruns each scrape interval in every open tab. What a rerun
reads and draws is shared by every session (``views/data.py``), so a rerun costs a few ms; but a process has
one GIL, and when the dashboard runs the collector and the alert engine (app.py) they share it with every
page thread. Two rules keep collection and alerting on their pace, however many tabs are open:

- **One render at a time.** Live panels render inside a process-wide slot, so page threads never outnumber
  the collector's for the GIL (thirty tabs firing at once used to be thirty runnable threads). A render that
  waits longer than ``SLOT_WAIT_INTERVALS`` intervals for the slot renders anyway (a read stuck on the store
  must not freeze every tab).
- **A slower pace when busy.** Over the last ``WINDOW_INTERVALS`` intervals the pace measures two shares:
  the CPU the renders took (thread time: the dashboard's own demand, which more tabs raise) and the wall
  clock the slot was held (renders queueing, also when other work takes the CPU). When either would pass
  its limit at the interval's pace (``BUSY_CPU``, ``BUSY_HELD``), every panel declares a longer
  ``run_every`` — 2×, 3×, 6× or 12× the interval, the fastest that brings both back under — and says so:
  "refreshing every 15 s: busy". It steps back once both would stay under ``CALM_CPU`` and ``CALM_HELD``
  at the faster pace. The pace changes at most once per window, for every panel at once (a panel declared
  at the old pace reruns its page once to declare the new one).

Nothing here reads data: pages call ``live_panel`` instead of ``st.fragment``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import streamlit as st

from views.page_context import PageContext

log = logging.getLogger("specwatch.views")

# The pace as a multiple of the scrape interval: slowest last. 12× is a minute at the default 5 s.
LADDER: tuple[int, ...] = (1, 2, 3, 6, 12)
# Busy: renders take more than half a core (the collector, the alert engine and the web server need the
# rest of the GIL: a 1,000-server cycle takes ~15% of a core), or hold the slot almost all the time (the
# next render waits: refreshes fall behind).
BUSY_CPU = 0.5
BUSY_HELD = 0.9
# Back to a faster pace only if both would stay below these there (no flapping between two paces).
CALM_CPU = 0.25
CALM_HELD = 0.5
WINDOW_INTERVALS = 6  # the shares are measured over this many scrape intervals (30 s at 5 s)
SLOT_WAIT_INTERVALS = 2.0


@dataclass(frozen=True, slots=True)
class Load:
    """Shares of the last window: CPU the renders took (cores) and wall clock the slot was held."""

    cpu: float
    held: float

    def at(self, factor: int, to: int) -> Load:
        """The load if the panels refreshed every ``to`` intervals instead of every ``factor``."""
        return Load(self.cpu * factor / to, self.held * factor / to)

    def busy(self) -> bool:
        return self.cpu > BUSY_CPU or self.held > BUSY_HELD

    def calm(self) -> bool:
        return self.cpu <= CALM_CPU and self.held <= CALM_HELD


class RenderPace:
    """The process's render slot and pace. Thread-safe; one per process (``PACE``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._slot = threading.Lock()
        self._lock = threading.Lock()  # guards what follows
        # (start, end, CPU seconds) of each render in the window, oldest first
        self._renders: deque[tuple[float, float, float]] = deque()
        self._factor = 1
        self._since = clock()  # when the current pace (or the process) started
        self._window_s = 30.0

    @contextmanager
    def slot(self, interval_s: float) -> Iterator[None]:
        """Hold the render slot for one panel's render (waiting at most ``SLOT_WAIT_INTERVALS``)."""
        acquired = self._slot.acquire(timeout=max(SLOT_WAIT_INTERVALS * interval_s, 1.0))
        started, cpu = self._clock(), time.thread_time()
        try:
            yield
        finally:
            if acquired:
                self._slot.release()
            self.record(started, self._clock(), time.thread_time() - cpu, interval_s)

    def record(self, started: float, ended: float, cpu_s: float, interval_s: float) -> None:
        with self._lock:
            self._window_s = WINDOW_INTERVALS * interval_s
            self._renders.append((started, ended, cpu_s))
            self._forget(ended)

    def _forget(self, now: float) -> None:
        horizon = now - self._window_s
        while self._renders and self._renders[0][1] < horizon:
            self._renders.popleft()

    def load(self) -> Load:
        """The shares of the last window (at the current pace)."""
        now = self._clock()
        with self._lock:
            self._forget(now)
            horizon = now - self._window_s
            held = sum(end - max(start, horizon) for start, end, _ in self._renders)
            cpu = sum(cpu_s for _, _, cpu_s in self._renders)
        return Load(cpu / self._window_s, held / self._window_s)

    def factor(self) -> int:
        """The pace now, as a multiple of the interval (re-judged at most once per window)."""
        now = self._clock()
        load = self.load()
        with self._lock:
            if now - self._since < self._window_s:
                return self._factor
            current = self._factor
            wanted = next((f for f in LADDER if not load.at(current, f).busy()), LADDER[-1])
            if wanted > current or (wanted < current and load.at(current, wanted).calm()):
                self._factor = wanted
                self._since = now
                log.info(
                    "live panels now refresh every %d× the interval: renders took %.0f%% of a core and held "
                    "the slot %.0f%% of the last %.0f s at %d×",
                    wanted,
                    load.cpu * 100,
                    load.held * 100,
                    self._window_s,
                    current,
                )
            return self._factor

    def reset(self) -> None:
        """Forget every render and go back to the interval's pace (tests; a restarted process)."""
        with self._lock:
            self._renders.clear()
            self._factor = 1
            self._since = self._clock()


PACE = RenderPace()


def every_s(interval_s: float, factor: int) -> float:
    return interval_s * factor


def statement(interval_s: float, factor: int, now_ts: float) -> str:
    """The panel's line about its own refresh: how often, and when it was drawn (UTC, to the second)."""
    drawn = time.strftime("%H:%M:%S", time.gmtime(now_ts))
    if factor == 1:
        return f"Refreshes every {interval_s:g} s · updated {drawn} UTC"
    return (
        f":material/hourglass_top: refreshing every {every_s(interval_s, factor):g} s: busy (collection and "
        f"alerts keep their {interval_s:g} s pace) · updated {drawn} UTC"
    )


def live_panel(ctx: PageContext, body: Callable[..., None], *args: Any) -> None:
    """``body(ctx, *args)`` as a live panel: a fragment rerun at the process's pace, rendered in the slot,
    under its refresh statement. Replaces ``st.fragment(run_every=ctx.interval_s)(body)(ctx, *args)``."""
    factor = PACE.factor()
    panel = _panel(body)
    st.fragment(run_every=every_s(ctx.interval_s, factor))(panel)(ctx, factor, *args)


@functools.cache
def _panel(body: Callable[..., None]) -> Callable[..., None]:
    # The fragment's identity is its function's module and name: each page's panel keeps its own.
    @functools.wraps(body)
    def panel(ctx: PageContext, declared: int, *args: Any) -> None:
        with PACE.slot(ctx.interval_s):
            factor = PACE.factor()
            if factor != declared:
                st.rerun()  # the page declares the panel again, at the new pace
            st.caption(statement(ctx.interval_s, factor, ctx.now()), help=_WHY if factor > 1 else None)
            body(ctx, *args)

    return panel


_WHY = (
    "Every open tab reruns its live panels on a timer, in this one process. Rendering took more than its "
    "share of the time, so live panels refresh less often until it no longer does: scraping and alert "
    "evaluation never wait on a page."
)
