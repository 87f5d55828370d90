"""Rule settings under ``alerts.rules.<Name>``: validated at start, errors name the exact key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alerts.rules import RULES, build_rules, settings_reference
from config import ConfigError, parse_config

INVALID: list[tuple[dict[str, Any], str, str]] = [
    ({"Foo": {}}, "alerts.rules.Foo", "a rule name"),
    ({"StatePoolSaturation": {"fire_at": "high"}}, "alerts.rules.StatePoolSaturation.fire_at", "a number"),
    ({"StatePoolSaturation": {"fire_at": 1.5}}, "alerts.rules.StatePoolSaturation.fire_at", "<= 1"),
    (
        {"StatePoolSaturation": {"recover_below": 0.97}},
        "alerts.rules.StatePoolSaturation.recover_below",
        "fire_at",
    ),
    ({"TargetDown": {"window_s": 10}}, "alerts.rules.TargetDown.window_s", "a setting of TargetDown"),
    ({"QueueBacklog": {"for_s": True}}, "alerts.rules.QueueBacklog.for_s", "a number"),
    ({"QueueBacklog": {"for_s": -1}}, "alerts.rules.QueueBacklog.for_s", ">= 0"),
    (
        {"AcceptanceDecayWithContext": {"min_samples": 3.5}},
        "alerts.rules.AcceptanceDecayWithContext.min_samples",
        "an integer",
    ),
    (
        {"AcceptanceDecayWithContext": {"recover_band": 0.2}},
        "alerts.rules.AcceptanceDecayWithContext.recover_band",
        "noise_band",
    ),
    ({"KVPoolSaturation": {"severity": "page"}}, "alerts.rules.KVPoolSaturation.severity", "one of info"),
    ({"RadixCacheWaste": {"enabled": "no"}}, "alerts.rules.RadixCacheWaste.enabled", "a boolean"),
    (
        {"AcceptLengthRegression": {"noise_band": float("nan")}},
        "alerts.rules.AcceptLengthRegression.noise_band",
        "a number",
    ),
]


@pytest.mark.parametrize(("raw", "key", "expected"), INVALID)
def test_invalid_rule_settings_name_the_key(raw: dict[str, Any], key: str, expected: str) -> None:
    config = parse_config({"alerts": {"rules": raw}}, "fleet.yaml")
    with pytest.raises(ConfigError) as caught:
        build_rules(config.alerts.rules, "fleet.yaml")
    assert caught.value.key == key
    assert expected in caught.value.expected
    assert str(caught.value).startswith(f"fleet.yaml: {key}: expected")


def test_overrides_reach_the_rule_and_its_sentence() -> None:
    rules = {
        r.name: r
        for r in build_rules({"StatePoolSaturation": {"fire_at": 0.9, "recover_below": 0.8, "for_s": 10}})
    }
    pool = rules["StatePoolSaturation"]
    assert (pool.for_s, pool.settings.fire_at) == (10, 0.9)
    assert "at or above 90%" in pool.describe()
    assert "below 80%" in pool.describe()
    assert rules["KVPoolSaturation"].settings.fire_at == 0.95  # untouched rules keep their defaults


def test_integers_are_accepted_where_numbers_are_expected() -> None:
    (down,) = [r for r in build_rules({"TargetDown": {"for_s": 90}}) if r.name == "TargetDown"]
    assert down.for_s == 90.0


def test_every_rule_setting_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "alerts.md").read_text(encoding="utf-8")
    for name, settings in settings_reference().items():
        assert f"### {name}" in doc, f"{name} has no section in docs/alerts.md"
        section = doc.split(f"### {name}", 1)[1].split("\n### ", 1)[0]
        for item in settings:
            assert f"`{item.key}`" in section, f"alerts.rules.{name}.{item.key} is not documented"
            assert f"`{item.default_text}`" in section, (
                f"the default of alerts.rules.{name}.{item.key} is not documented"
            )
    assert set(settings_reference()) == set(RULES)


def test_every_bound_names_its_rules_settings_and_refuses_a_recovery_on_the_firing_side() -> None:
    """A threshold rule states each fire/recover pair once (``Bound``); the config check comes from it."""
    checked = 0
    for name, rule in RULES.items():
        defaults = rule.settings_class()
        for bound in getattr(rule.settings_class, "bounds", ()):
            fire = getattr(defaults, bound.fire)  # a typo in a bound fails here, not at the first evaluation
            if bound.recover is None:
                continue
            assert getattr(defaults, bound.recover) is not None
            wrong = fire - 0.01 if bound.falling else fire + 0.01
            with pytest.raises(ConfigError) as caught:
                build_rules({name: {bound.recover: wrong}}, "fleet.yaml")
            assert caught.value.key == f"alerts.rules.{name}.{bound.recover}"
            assert bound.fire in caught.value.expected
            checked += 1
    assert checked >= 6  # StatePool, KVPool, QueueBacklog ×2, RadixCacheWaste ×2 (and the band rules)
