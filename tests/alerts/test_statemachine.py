"""The hysteresis state machine, driven by tables of timed verdicts, plus properties over random sequences."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.model import AlertState, Condition, InstanceState
from alerts.statemachine import next_state

B, H, C, N = Condition.BREACH, Condition.HOLD, Condition.CLEAR, Condition.NO_DATA
OFF, P, F = AlertState.INACTIVE, AlertState.PENDING, AlertState.FIRING


@dataclass(frozen=True)
class Timing:
    for_s: float = 60.0
    keep_firing_for_s: float = 30.0


def run(steps: list[tuple[float, Condition]], timing: Timing = Timing()) -> list[InstanceState]:
    state, seen = InstanceState(), []
    for ts, condition in steps:
        state = next_state(state, condition, ts, timing)
        seen.append(state)
    return seen


# Tables of timed inputs: (timestamped conditions, the state after each), one row per behaviour.
CASES = {
    "a breach held for for_s fires, not a second earlier": (
        [(0, B), (30, B), (59.9, B), (60, B)],
        [P, P, P, F],
    ),
    "a clear while pending drops it; the next breach starts over": (
        [(0, B), (40, C), (50, B), (100, B), (110, B)],
        [P, OFF, P, P, F],
    ),
    "between the thresholds keeps pending counting and firing firing": (
        [(0, B), (30, H), (60, H), (500, H)],
        [P, P, F, F],
    ),
    "between the thresholds never starts an alert": (
        [(0, H), (100, H), (200, H)],
        [OFF, OFF, OFF],
    ),
    "one good sample does not resolve: keep_firing_for counts from the last breach": (
        [(0, B), (60, B), (65, C), (70, B), (99, C), (100, C)],
        [P, F, F, F, F, OFF],
    ),
    "no data neither fires a pending alert nor resolves a firing one": (
        [(0, B), (30, N), (90, N), (100, B), (101, N), (5000, N)],
        [P, P, P, F, F, F],
    ),
    "after a gap, a clear resolves at once (the last breach is long past)": (
        [(0, B), (60, B), (61, N), (500, C)],
        [P, F, F, OFF],
    ),
    "no data on an inactive instance changes nothing": (
        [(0, N), (10, C), (20, N)],
        [OFF, OFF, OFF],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_timed_table(name: str) -> None:
    steps, expected = CASES[name]
    assert [s.state for s in run(steps)] == expected


def test_for_zero_fires_on_the_first_breach_like_prometheus() -> None:
    states = run([(0, B), (5, C)], Timing(for_s=0, keep_firing_for_s=0))
    assert [s.state for s in states] == [F, OFF]
    assert states[0].fired_at == 0


def test_firing_records_when_it_started_and_when_the_episode_began() -> None:
    states = run([(10, B), (40, H), (70, B), (80, B)])
    firing = states[2]
    assert (firing.state, firing.active_since, firing.fired_at, firing.since) == (F, 10, 70, 70)
    assert states[3].fired_at == 70
    assert states[3].last_active_ts == 80


def test_no_data_marks_the_instance_suspended_until_data_returns() -> None:
    states = run([(0, B), (60, B), (70, N), (80, B)])
    assert [s.suspended for s in states] == [False, False, True, False]


def test_a_new_episode_after_resolution_gets_a_new_start() -> None:
    states = run([(0, B), (60, B), (100, C), (200, B), (260, B)])
    assert [s.state for s in states] == [P, F, OFF, P, F]
    assert states[-1].fired_at == 260
    assert states[-1].active_since == 200


conditions = st.sampled_from([B, H, C, N])
steps_strategy = st.lists(st.tuples(st.floats(0.1, 120.0), conditions), min_size=1, max_size=60)
timings = st.builds(Timing, st.sampled_from([0.0, 15.0, 60.0, 300.0]), st.sampled_from([0.0, 30.0, 120.0]))


@settings(max_examples=300, deadline=None)
@given(steps_strategy, timings)
def test_never_firing_before_for_elapsed_since_the_first_breach(
    steps: list[tuple[float, Condition]], timing: Timing
) -> None:
    now, state = 0.0, InstanceState()
    for dt, condition in steps:
        now += dt
        before = state
        state = next_state(state, condition, now, timing)
        if state.state is F:
            assert state.active_since is not None
            assert state.fired_at is not None
            assert state.fired_at - state.active_since >= timing.for_s
        if condition is N:
            assert state.state is before.state  # no data never moves an instance
        if condition in (B, H) and before.state is F:
            assert state.state is F  # a met condition never resolves
        if before.state is OFF and condition is not B:
            assert state.state is OFF  # only a breach starts an episode
