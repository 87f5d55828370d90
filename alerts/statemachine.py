"""Hysteresis as a pure function: one alert instance's next state from its verdict, with no I/O and no clock.

Prometheus's semantics (pending until ``for_s`` has elapsed, ``keep_firing_for_s`` after the condition was
last met) plus a recovery threshold (the rule's HOLD verdict keeps an active instance active) and NO_DATA,
which suspends.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from alerts.model import AlertState, Condition, InstanceState

INACTIVE = InstanceState()


class Timing(Protocol):
    """The two durations the state machine needs (every rule's settings have them)."""

    @property
    def for_s(self) -> float: ...

    @property
    def keep_firing_for_s(self) -> float: ...


def next_state(prev: InstanceState, condition: Condition, now: float, rule: Timing) -> InstanceState:
    """Advance one instance by one evaluation at ``now`` (unix s).

    - INACTIVE starts an episode only on BREACH: PENDING, or FIRING at once when ``for_s`` is 0 (as
      Prometheus).
    - PENDING fires once BREACH/HOLD has lasted ``for_s`` since the first breach; CLEAR drops it (never
      notified).
    - FIRING stays while BREACH/HOLD; on CLEAR it resolves once ``keep_firing_for_s`` has passed since the
      last BREACH/HOLD, so a single good sample cannot resolve it.
    - NO_DATA changes nothing but the ``suspended`` flag: a down target neither resolves nor fires its alerts.
    """
    if condition is Condition.NO_DATA:
        return prev if prev.suspended else replace(prev, suspended=True)
    active = condition is Condition.BREACH or condition is Condition.HOLD

    if prev.state is AlertState.INACTIVE:
        if condition is not Condition.BREACH:
            return prev if not prev.suspended else replace(prev, suspended=False)
        if rule.for_s <= 0:
            return InstanceState(
                AlertState.FIRING, since=now, active_since=now, fired_at=now, last_active_ts=now
            )
        return InstanceState(AlertState.PENDING, since=now, active_since=now, last_active_ts=now)

    if prev.state is AlertState.PENDING:
        if not active:
            return InstanceState(AlertState.INACTIVE, since=now)
        started = prev.active_since if prev.active_since is not None else now
        if now - started >= rule.for_s:
            return InstanceState(
                AlertState.FIRING, since=now, active_since=started, fired_at=now, last_active_ts=now
            )
        return replace(prev, active_since=started, last_active_ts=now, suspended=False)

    # FIRING
    if active:
        return replace(prev, last_active_ts=now, suspended=False)
    last_met = prev.last_active_ts if prev.last_active_ts is not None else now
    if now - last_met < rule.keep_firing_for_s:
        return prev if not prev.suspended else replace(prev, suspended=False)
    return InstanceState(AlertState.INACTIVE, since=now)
