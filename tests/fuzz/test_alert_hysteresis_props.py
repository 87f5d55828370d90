"""Hypothesis properties of alert hysteresis, through a real rule's windowed verdicts and the state machine.

StatePoolSaturation (fire at ≥ fire_at with a queue, recover below recover_below) is fed random timed
state-pool readings; its verdicts drive ``alerts.statemachine.next_state``. Whatever the readings:
an alert never fires before its condition has held for ``for_s``; values inside the recovery band never start,
never resolve and never re-fire an alert (no flapping); and a firing alert resolves only after
``keep_firing_for_s`` without a breach.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.model import AlertState, Condition, InstanceState
from alerts.rules.state_pool import StatePoolSaturation, StatePoolSettings
from alerts.statemachine import INACTIVE, next_state
from alerts.window import TargetHistory
from collectors.model import Signals, TargetSnapshot

FUZZ = settings(max_examples=200, deadline=None)
FIRE_AT, RECOVER_BELOW = 0.95, 0.90

readings = st.lists(
    st.tuples(
        st.floats(0.5, 30.0),  # seconds since the previous evaluation
        st.floats(0.0, 1.0) | st.sampled_from([FIRE_AT, RECOVER_BELOW, 0.93, 0.98, 0.5]),  # state pool usage
        st.sampled_from([0.0, 3.0, 12.0]),  # queued
    ),
    min_size=1,
    max_size=40,
)
timings = st.tuples(st.sampled_from([0.0, 10.0, 30.0, 60.0]), st.sampled_from([0.0, 15.0, 60.0]))
windows = st.sampled_from([0.1, 5.0, 30.0])


def run(
    steps: list[tuple[float, float, float]], for_s: float, keep_s: float, window_s: float
) -> list[tuple[float, Condition, float, InstanceState, InstanceState]]:
    """Evaluate the rule after every reading: (now, verdict, windowed pool usage, state before, after)."""
    rule = StatePoolSaturation(
        StatePoolSettings(
            for_s=for_s,
            keep_firing_for_s=keep_s,
            window_s=window_s,
            fire_at=FIRE_AT,
            recover_below=RECOVER_BELOW,
        )
    )
    history = TargetHistory("k3", horizon_s=window_s + 60)
    now = 1_800_000_000.0
    state = INACTIVE
    trace = []
    for dt, pool, queued in steps:
        now += dt
        history.add(
            TargetSnapshot(
                "k3",
                now,
                True,
                signals=Signals(state_pool_usage=pool, queued=queued, running=40, kv_usage=0.3),
            )
        )
        (verdict,) = rule.evaluate(history, now, {})
        previous, state = state, next_state(state, verdict.condition, now, rule)
        trace.append((now, verdict.condition, float(verdict.value or 0.0), previous, state))
    return trace


@FUZZ
@given(steps=readings, timing=timings, window_s=windows)
def test_never_firing_before_the_condition_held_for_for_s(
    steps: list[tuple[float, float, float]], timing: tuple[float, float], window_s: float
) -> None:
    for_s, keep_s = timing
    run_start: float | None = None  # first breach of the current unbroken breach/hold run
    for now, condition, _, previous, state in run(steps, for_s, keep_s, window_s):
        if condition is Condition.BREACH and run_start is None and previous.state is AlertState.INACTIVE:
            run_start = now
        if condition is Condition.CLEAR and state.state is AlertState.INACTIVE:
            run_start = None
        if state.state is AlertState.FIRING and previous.state is not AlertState.FIRING:
            assert run_start is not None, "fired without a breach"
            assert now - run_start >= for_s, f"fired {now - run_start:.1f} s after the first breach < {for_s}"
        if state.state is AlertState.INACTIVE:
            run_start = None


@FUZZ
@given(steps=readings, timing=timings, window_s=windows)
def test_inside_the_recovery_band_nothing_starts_or_resolves(
    steps: list[tuple[float, float, float]], timing: tuple[float, float], window_s: float
) -> None:
    for_s, keep_s = timing
    for _, condition, pool, previous, state in run(steps, for_s, keep_s, window_s):
        if RECOVER_BELOW <= pool < FIRE_AT:
            assert condition is Condition.HOLD
            # a hold never starts an alert, never resolves or drops one, and never re-fires a firing one
            if previous.state is AlertState.INACTIVE:
                assert state.state is AlertState.INACTIVE
            if previous.state is AlertState.FIRING:
                assert state.state is AlertState.FIRING
                assert state.fired_at == previous.fired_at  # the same firing, not a new notification
            if previous.state is AlertState.PENDING:
                assert state.state in (AlertState.PENDING, AlertState.FIRING)


@FUZZ
@given(steps=readings, timing=timings, window_s=windows)
def test_a_firing_alert_resolves_only_after_keep_firing_for_s(
    steps: list[tuple[float, float, float]], timing: tuple[float, float], window_s: float
) -> None:
    for_s, keep_s = timing
    last_active: float | None = None
    for now, condition, pool, previous, state in run(steps, for_s, keep_s, window_s):
        if condition in (Condition.BREACH, Condition.HOLD):
            last_active = now
        if previous.state is AlertState.FIRING and state.state is AlertState.INACTIVE:
            assert pool < RECOVER_BELOW  # resolved only below the recovery threshold
            assert last_active is not None
            assert now - last_active >= keep_s


@FUZZ
@given(
    pools=st.lists(st.floats(RECOVER_BELOW, FIRE_AT, exclude_max=True), min_size=2, max_size=60),
    start_firing=st.booleans(),
)
def test_oscillating_inside_the_band_never_flaps(pools: list[float], start_firing: bool) -> None:
    """After one breach fires the alert, any wobble between 90% and 95% keeps exactly one firing episode."""
    steps = [(5.0, 0.98, 12.0)] * 2 if start_firing else []
    steps += [(5.0, pool, 12.0) for pool in pools]
    trace = run(steps, for_s=0.0, keep_s=0.0, window_s=0.1)
    kinds = [state.state for *_, state in trace]
    transitions = sum(1 for a, b in itertools.pairwise(kinds) if a is not b)
    if start_firing:
        assert kinds[-1] is AlertState.FIRING
        assert transitions == 0
    else:
        assert set(kinds) == {AlertState.INACTIVE}
