"""The alert rules, one module each, and the registry that builds them from ``alerts.rules.<Name>`` config.

Adding a rule is one module plus one line in ``RULES``; names are fixed, so config can only tune them. The
levels a page shares with a rule are read from the built rules here (``capacity_thresholds``), never
restated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from alerts.rules.accept_regression import AcceptLengthRegression
from alerts.rules.acceptance_decay import AcceptanceDecayWithContext
from alerts.rules.base import Rule, RuleSettings, SettingDoc, document_settings, parse_settings
from alerts.rules.error_budget_burn import ErrorBudgetBurn
from alerts.rules.kv_pool import KVPoolSaturation
from alerts.rules.queue_backlog import QueueBacklog
from alerts.rules.radix_waste import RadixCacheWaste
from alerts.rules.source_down import SourceDown
from alerts.rules.state_pool import StatePoolSaturation
from alerts.rules.target_down import TargetDown
from analysis.capacity import CapacityThresholds
from config import ConfigError

RULES: dict[str, type[Rule[Any]]] = {
    rule.name: rule
    for rule in (
        TargetDown,
        StatePoolSaturation,
        AcceptanceDecayWithContext,
        KVPoolSaturation,
        QueueBacklog,
        AcceptLengthRegression,
        RadixCacheWaste,
        SourceDown,
        ErrorBudgetBurn,
    )
}


def build_rules(raw: Mapping[str, Any] | None = None, source: str = "config") -> list[Rule[Any]]:
    """Every rule with its settings validated; unknown names or keys and wrong types raise ConfigError."""
    raw = raw or {}
    for name in raw:
        if name not in RULES:
            raise ConfigError(
                source,
                f"alerts.rules.{name}",
                "a rule name (" + ", ".join(RULES) + ")",
                name,
                "rule names are fixed",
            )
    rules = [
        rule(parse_settings(rule.settings_class, raw.get(name) or {}, name, source))
        for name, rule in RULES.items()
    ]
    return [_inherit_for_s(rule, raw, rules) for rule in rules]


def _inherit_for_s(rule: Rule[Any], raw: Mapping[str, Any], rules: list[Rule[Any]]) -> Rule[Any]:
    """SourceDown waits TargetDown's for_s unless its own is configured: a blind source pages no later
    than the targets it hides would have."""
    own = raw.get(SourceDown.name)
    if rule.name != SourceDown.name or (isinstance(own, Mapping) and "for_s" in own):
        return rule
    target_down = next(r for r in rules if r.name == TargetDown.name)
    return SourceDown(dataclasses.replace(rule.settings, for_s=target_down.for_s))


def capacity_thresholds(raw: Mapping[str, Any] | None = None, source: str = "config") -> CapacityThresholds:
    """The levels the Capacity verdict judges by, from the rules as configured (defaults where not set):
    a pool binds where its saturation alert fires and is near from where a firing one recovers, and radix
    waste is RadixCacheWaste's condition. ConfigError as ``build_rules``."""
    rules = {rule.name: rule for rule in build_rules(raw, source)}
    state = rules[StatePoolSaturation.name].settings
    kv = rules[KVPoolSaturation.name].settings
    radix = rules[RadixCacheWaste.name].settings
    return CapacityThresholds(
        state_pool_binds_at=state.fire_at,
        state_pool_near_at=state.recover_below,
        min_queued=state.min_queued,
        kv_binds_at=kv.fire_at,
        kv_near_at=kv.recover_below,
        radix_max_hit_rate=radix.max_hit_rate,
        radix_state_pool_at=radix.state_pool_at,
    )


def settings_reference() -> dict[str, list[SettingDoc]]:
    """Every rule's settings with defaults and help: the docs' config reference."""
    return {name: document_settings(rule.settings_class) for name, rule in RULES.items()}


__all__ = ["RULES", "Rule", "RuleSettings", "build_rules", "capacity_thresholds", "settings_reference"]
