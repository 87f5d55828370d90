"""The live panels' pace (views/refresh.py): renders past half a core, or holding the render slot 90% of the
time, slow every panel to the fastest rung of the ladder that brings both under; a calm window brings the pace
back; the statement says which."""

from __future__ import annotations

import threading
import time

from views import refresh
from views.refresh import RenderPace, statement

INTERVAL_S = 5.0
WINDOW_S = refresh.WINDOW_INTERVALS * INTERVAL_S


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _renders(pace: RenderPace, clock: Clock, *, count: int, wall_s: float, cpu_s: float) -> None:
    """``count`` renders spread over one window, each ``wall_s`` long and ``cpu_s`` of CPU."""
    start = clock.now
    for i in range(count):
        began = start + i * WINDOW_S / count
        pace.record(began, began + wall_s, cpu_s, INTERVAL_S)
    clock.now = start + WINDOW_S


def test_renders_past_half_a_core_slow_the_panels_to_the_rung_that_fits() -> None:
    clock = Clock()
    pace = RenderPace(clock)
    assert pace.factor() == 1
    # 30 tabs × one render an interval, 0.12 CPU s each: 0.72 cores of rendering.
    _renders(pace, clock, count=30 * refresh.WINDOW_INTERVALS, wall_s=0.13, cpu_s=0.12)
    load = pace.load()
    assert 0.7 < load.cpu < 0.75
    assert pace.factor() == 2  # at 2× the interval: 0.36 cores, under half a core
    assert statement(INTERVAL_S, 2, 0.0).startswith(":material/hourglass_top: refreshing every 10 s: busy")


def test_a_slot_held_most_of_the_time_slows_them_even_with_little_cpu() -> None:
    clock = Clock()
    pace = RenderPace(clock)
    # Renders waiting on other work: 0.95 of the wall clock in the slot, 0.1 cores of their own.
    _renders(pace, clock, count=60, wall_s=0.95 * WINDOW_S / 60, cpu_s=0.1 * WINDOW_S / 60)
    assert pace.factor() == 2


def test_the_pace_holds_for_a_window_and_comes_back_when_calm() -> None:
    clock = Clock()
    pace = RenderPace(clock)
    _renders(pace, clock, count=60, wall_s=0.2, cpu_s=0.96)  # 1.92 cores: 0.64 at 3×, 0.32 at 6×
    assert pace.factor() == 6
    _renders(pace, clock, count=10, wall_s=0.01, cpu_s=0.01)  # the next window, nearly idle
    assert pace.factor() == 1
    assert statement(INTERVAL_S, 1, 0.0).startswith("Refreshes every 5 s")


def test_a_window_just_under_the_limits_keeps_the_interval() -> None:
    clock = Clock()
    pace = RenderPace(clock)
    _renders(pace, clock, count=60, wall_s=0.3 * WINDOW_S / 60, cpu_s=0.45 * WINDOW_S / 60)
    assert pace.factor() == 1


def test_one_render_at_a_time() -> None:
    pace = RenderPace()
    inside = 0
    most = 0
    lock = threading.Lock()

    def render() -> None:
        nonlocal inside, most
        with pace.slot(0.5):
            with lock:
                inside += 1
                most = max(most, inside)
            time.sleep(0.02)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=render) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1
