"""What every rule shares: typed settings with documented defaults, validation into ConfigError, the Rule
base.

A rule's settings are a frozen dataclass; each field is declared once with ``setting(default, help, ...)``, so
the defaults, the validation and the docs' config reference come from the same line.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from alerts.model import SEVERITIES, Condition, Evaluation
from alerts.promql import Exported, PromQL, alert_rule
from alerts.window import TargetHistory
from collectors.history import HistoryReader
from collectors.model import Recipe, SourceHealth, TargetSnapshot
from collectors.slo import Scope, Slo
from collectors.slo_ledger import SloCounts
from config import ConfigError


def setting(
    default: float | int | bool | str,
    help: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[str, ...] = (),
) -> Any:
    """Declare one rule setting: its default, a one-line help text and its allowed range."""
    limits = {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices}
    return field(default=default, metadata={"help": help, **limits})


@dataclass(frozen=True, kw_only=True)
class RuleSettings:
    """Keys every rule accepts under ``alerts.rules.<Name>``."""

    enabled: bool = setting(True, "Evaluate this rule at all.")
    severity: str = setting("warning", "The severity label sent with the alert.", choices=SEVERITIES)
    for_s: float = setting(60.0, "Seconds the condition must hold before pending becomes firing.", ge=0)
    keep_firing_for_s: float = setting(
        0.0, "Seconds a firing alert stays firing after its condition was last met.", ge=0
    )

    def problems(self) -> list[tuple[str, str, object]]:
        """Cross-field checks: (key, what was expected, what was found) for each inconsistency."""
        return []


@dataclass(frozen=True, slots=True)
class SettingDoc:
    key: str
    type_name: str
    default: object
    help: str

    @property
    def default_text(self) -> str:
        """The default as it is written in YAML: true, 0.95, 600, critical."""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)


SettingsT = TypeVar("SettingsT", bound=RuleSettings)

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
_BOUNDS = (
    ("ge", ">=", operator.ge),
    ("gt", ">", operator.gt),
    ("le", "<=", operator.le),
    ("lt", "<", operator.lt),
)


def _field_type(item: dataclasses.Field[Any]) -> type:
    # Annotations are strings under `from __future__ import annotations`; the four kinds are all we allow.
    name = item.type if isinstance(item.type, str) else getattr(item.type, "__name__", str(item.type))
    return {"bool": bool, "int": int, "float": float, "str": str}[name]


def _coerce(value: object, kind: type, meta: Mapping[str, Any]) -> tuple[object, str | None]:
    """Return (value, None) when acceptable, else (None, what was expected)."""
    expected = _TYPE_NAMES[kind]
    if kind is bool:
        return (value, None) if isinstance(value, bool) else (None, expected)
    if isinstance(value, bool):
        return None, expected
    if kind is str:
        if not isinstance(value, str):
            return None, expected
        if meta["choices"] and value not in meta["choices"]:
            return None, "one of " + ", ".join(meta["choices"])
        return value, None
    if kind is int and not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        return None, expected
    if not isinstance(value, int | float) or not math.isfinite(float(value)):
        return None, expected
    number: float | int = int(value) if kind is int else float(value)
    for key, symbol, holds in _BOUNDS:
        limit = meta.get(key)
        if limit is not None and not holds(number, limit):
            return None, f"{expected} {symbol} {limit:g}"
    return number, None


def parse_settings(cls: type[SettingsT], raw: Mapping[str, object], rule: str, source: str) -> SettingsT:
    """Validate the raw ``alerts.rules.<rule>`` mapping into ``cls``; ConfigError names the exact key."""
    prefix = f"alerts.rules.{rule}"
    if not isinstance(raw, Mapping):
        raise ConfigError(source, prefix, "a mapping of rule settings", raw)
    known = {item.name: item for item in dataclasses.fields(cls)}
    values: dict[str, object] = {}
    for key, value in raw.items():
        item = known.get(str(key))
        if item is None:
            raise ConfigError(
                source,
                f"{prefix}.{key}",
                f"a setting of {rule} ({', '.join(sorted(known))})",
                value,
                "no such key",
            )
        coerced, expected = _coerce(value, _field_type(item), item.metadata)
        if expected is not None:
            raise ConfigError(source, f"{prefix}.{key}", expected, value)
        values[item.name] = coerced
    settings = cls(**values)  # type: ignore[arg-type]
    for key, expected, found in settings.problems():
        raise ConfigError(source, f"{prefix}.{key}", expected, found)
    return settings


def document_settings(cls: type[RuleSettings]) -> list[SettingDoc]:
    return [
        SettingDoc(item.name, _field_type(item).__name__, item.default, str(item.metadata.get("help", "")))
        for item in dataclasses.fields(cls)
    ]


class Rule(ABC, Generic[SettingsT]):
    """One alert rule: a name, typed settings, ``evaluate`` per target, and an English ``describe``."""

    name: ClassVar[str]
    settings_class: ClassVar[type[RuleSettings]]
    # Why ``export`` returns None: the rule file's header prints it, so the omission is never silent.
    not_exported: ClassVar[str] = ""
    # True for TargetDown alone: a down target's instances of every other rule are suspended instead.
    applies_when_down: ClassVar[bool] = False
    # True for SourceDown: evaluated once from the source's health (``evaluate_source``), never per target.
    watches_source: ClassVar[bool] = False
    # True for ErrorBudgetBurn: evaluated once per SLO and scope from the SLO counts (``evaluate_scope``).
    watches_slos: ClassVar[bool] = False

    def __init__(self, settings: SettingsT) -> None:
        self.settings = settings

    @property
    def for_s(self) -> float:
        return self.settings.for_s

    @property
    def keep_firing_for_s(self) -> float:
        return self.settings.keep_firing_for_s

    @property
    def severity(self) -> str:
        return self.settings.severity

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    @property
    def horizon_s(self) -> float:
        """Seconds of whole snapshots this rule reads (``history.since``; the engine keeps at least this
        much per target)."""
        return float(getattr(self.settings, "window_s", 0.0))

    @property
    def long_horizon_s(self) -> float:
        """Seconds of columns this rule reads (``history.samples_since``: ``alerts.window.LONG_SIGNALS``)."""
        return 0.0

    @property
    def lookback_s(self) -> float:
        """Seconds of history a restart replays for this rule (at least its horizons)."""
        return max(self.horizon_s, self.long_horizon_s)

    @property
    def baseline_s(self) -> float:
        """Seconds of the previous recipe kept at a recipe change (AcceptLengthRegression's baseline)."""
        return 0.0

    def evaluate_source(
        self, health: SourceHealth, blind_since: float | None, now: float
    ) -> Sequence[Evaluation]:
        """Verdicts about the source itself (rules with ``watches_source``); [] for per-target rules."""
        return []

    def evaluate_scope(
        self,
        slo: Slo,
        scope: Scope,
        counts: SloCounts,
        now: float,
        history: HistoryReader | None,
    ) -> Sequence[Evaluation]:
        """Verdicts about one SLO in one scope (rules with ``watches_slos``); [] for per-target rules."""
        return []

    @abstractmethod
    def evaluate(
        self, history: TargetHistory, now: float, recipes: Mapping[str, Recipe]
    ) -> Sequence[Evaluation]:
        """Verdicts for this target's instances at ``now``; [] means nothing to say (inactive)."""

    def forget(self, target: str) -> None:
        """The target left the fleet: drop anything kept for it (rules caching per target override it)."""

    @abstractmethod
    def describe(self) -> str:
        """One English sentence with the configured thresholds (UI and notifications)."""

    @abstractmethod
    def export(self, q: PromQL) -> Exported | None:
        """The same rule as Prometheus alerting (and recording) rules; None when PromQL cannot judge what
        the engine judges (``not_exported`` says why)."""

    def alert(self, expr: str, *, summary: str, description: str) -> dict[str, Any]:
        """This rule as a Prometheus alerting rule on ``expr``, with its configured for, keep_firing_for and
        severity."""
        return alert_rule(
            self.name,
            expr,
            for_s=self.for_s,
            keep_firing_for_s=self.keep_firing_for_s,
            severity=self.severity,
            summary=summary,
            description=description,
        )

    def window(self, history: TargetHistory, now: float) -> list[TargetSnapshot]:
        """The up snapshots inside ``window_s`` (at least the latest one)."""
        start = now - self.horizon_s
        snapshots = [s for s in history.since(start) if s.up]
        if not snapshots and history.latest is not None and history.latest.up:
            snapshots = [history.latest]
        return snapshots


def recipe_of(history: TargetHistory, recipes: Mapping[str, Recipe]) -> Recipe | None:
    """The recipe the target runs (its last known one while it is down)."""
    return recipes.get(history.recipe_id) if history.recipe_id is not None else None


def mean_signal(snapshots: Sequence[TargetSnapshot], name: str) -> float | None:
    """Window mean of one signal over the snapshots that know it; None when none does."""
    values = [v for v in (getattr(s.signals, name) for s in snapshots) if v is not None]
    return math.fsum(values) / len(values) if values else None


def no_data(reason: str) -> Evaluation:
    return Evaluation(Condition.NO_DATA, None, "", reason)


def percent(fraction: float) -> str:
    return f"{fraction * 100:.0f}%"
