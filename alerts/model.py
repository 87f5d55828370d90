"""The alert data model: states, rule verdicts, and the read models the views show.

Frozen dataclasses with value equality. Labels and annotations travel as sorted tuples of pairs so the records
stay hashable; ``labels_dict``/``annotations_dict`` turn them back into mappings at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

Pairs = tuple[tuple[str, str], ...]

# The identifying labels every specwatch alert carries (Alertmanager groups, routes and silences on them).
ALERT_LABELS: tuple[str, ...] = ("alertname", "target", "deployment", "recipe_id", "severity", "slo")
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")


def to_pairs(mapping: Mapping[str, str]) -> Pairs:
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))


class AlertState(StrEnum):
    """Prometheus's words. ``resolved`` is not a state: it is the firing → inactive transition."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"


class Condition(StrEnum):
    """A rule's verdict for one instance at one evaluation.

    BREACH: past the firing threshold. HOLD: between the recovery and the firing threshold (keeps an active
    alert active, never starts one). CLEAR: recovered, or idle below the traffic floor. NO_DATA: the signals
    are unknown (target down, metric absent): the instance is suspended, neither resolved nor fired.
    """

    BREACH = "breach"
    HOLD = "hold"
    CLEAR = "clear"
    NO_DATA = "no_data"


@dataclass(frozen=True, slots=True)
class InstanceState:
    """The state machine's memory for one alert instance (see ``alerts.statemachine.next_state``)."""

    state: AlertState = AlertState.INACTIVE
    since: float | None = None  # when the current state began
    active_since: float | None = None  # first BREACH of the current episode (pending start)
    fired_at: float | None = None  # when it became FIRING (Alertmanager's startsAt)
    last_active_ts: float | None = None  # last BREACH/HOLD evaluation; keep_firing_for_s counts from here
    suspended: bool = False  # the last evaluation had no data


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What a rule says about one instance: the verdict, the value behind it, and the English around it."""

    condition: Condition
    value: float | None = None
    summary: str = ""
    description: str = ""
    labels: Pairs = ()  # extra identifying labels (rules that evaluate per recipe group add recipe_id here)
    details: Pairs = ()  # extra annotations: the numbers behind the sentence, for the UI

    @property
    def annotations(self) -> Pairs:
        return to_pairs({**dict(self.details), "summary": self.summary, "description": self.description})


@dataclass(frozen=True, slots=True)
class AlertInstance:
    """One active (pending or firing) alert, as stored and as the Alerts and Fleet pages show it."""

    rule: str
    target: str
    state: AlertState
    since: float  # unix s when it entered its current state
    active_since: float  # unix s when the episode began (first breach)
    fired_at: float | None  # unix s when it started firing; None while pending
    last_eval_ts: float  # unix s of the last evaluation that touched it
    value: float | None
    labels: Pairs
    annotations: Pairs
    fingerprint: str
    suspended: bool = False  # no data (target down): neither resolved nor fired
    last_active_ts: float | None = None  # unix s of the last evaluation that found the condition still met

    @property
    def labels_dict(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def annotations_dict(self) -> dict[str, str]:
        return dict(self.annotations)

    def label(self, name: str) -> str:
        return self.labels_dict.get(name, "")

    @property
    def severity(self) -> str:
        return self.label("severity")

    @property
    def deployment(self) -> str:
        return self.label("deployment")

    @property
    def recipe_id(self) -> str:
        return self.label("recipe_id")

    @property
    def summary(self) -> str:
        return self.annotations_dict.get("summary", "")

    @property
    def description(self) -> str:
        return self.annotations_dict.get("description", "")


@dataclass(frozen=True, slots=True)
class AlertTransition:
    """One state change of one instance, kept in history (the Alerts page's timeline)."""

    ts: float
    rule: str
    target: str
    fingerprint: str
    from_state: AlertState
    to_state: AlertState
    value: float | None
    labels: Pairs = ()
    annotations: Pairs = ()

    @property
    def kind(self) -> str:
        """pending, firing, resolved (firing → inactive) or cleared (pending → inactive, never notified)."""
        if self.to_state is AlertState.INACTIVE:
            return "resolved" if self.from_state is AlertState.FIRING else "cleared"
        return self.to_state.value

    @property
    def labels_dict(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def summary(self) -> str:
        return dict(self.annotations).get("summary", "")


@dataclass(frozen=True, slots=True)
class Delivery:
    """One queued notification to one receiver and how its delivery went (the outbox)."""

    id: int
    receiver: str  # the URL it goes to
    kind: str  # "webhook" or "alertmanager"
    created_ts: float
    # "queued", "delivered", "failed" (refused for good, or out of attempts/age) or "split" (a 413: its
    # alerts went on in smaller notifications of the same group)
    status: str
    attempts: int
    next_attempt_ts: float
    delivered_ts: float | None = None
    last_error: str = ""
    payload: str = field(default="", repr=False)  # the JSON body
    group_key: str = ""  # the Alertmanager group key: order is kept within a group, never across groups


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A notification to queue: one JSON body for one receiver."""

    receiver: str  # the URL it goes to
    kind: str  # "webhook" or "alertmanager"
    payload: str
    group_key: str = ""  # notifications of one group go out in order; other groups never wait for them
