"""The Capacity page judges by the alert rules' settings: change a rule's config and the page's verdict moves
with it, so the page and the alert cannot disagree about where a pool binds or the radix cache is wasted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from streamlit.testing.v1 import AppTest

from alerts.rules import build_rules
from tests.views import seed_fleet as fx
from tests.views.conftest import SeedCase, page_test


def capacity_with_rules(seed_case: SeedCase, folder: Path, rules: dict[str, Any]) -> AppTest:
    """The Capacity page on the seed fleet, its config's ``alerts.rules`` set to ``rules``."""
    config = yaml.safe_load(seed_case.config_path.read_text(encoding="utf-8"))
    config["alerts"] = {"rules": rules}
    path = folder / "specwatch.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return page_test(path, "capacity").run()


def text_of(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in [*at.markdown, *at.caption])


def test_the_rules_config_moves_the_pages_verdict(seed_case: SeedCase, tmp_path: Path) -> None:
    rules = {
        # The seed's saturated servers sit at 98%: above the default 95%, below 99%.
        "StatePoolSaturation": {"fire_at": 0.99, "recover_below": 0.9},
        # The radix server hits 3%: wasted under the default 10%, not under 2%.
        "RadixCacheWaste": {"max_hit_rate": 0.02},
    }
    at = capacity_with_rules(seed_case, tmp_path, rules)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.warning, [w.value for w in at.warning]
    # The alert the same config builds: the page's oracle, never a number copied here.
    built = {rule.name: rule.settings for rule in build_rules(rules)}
    fire_at = built["StatePoolSaturation"].fire_at
    near_at = built["StatePoolSaturation"].recover_below
    max_hit = built["RadixCacheWaste"].max_hit_rate
    up = fx.up_servers()
    binding = [name for name, load in up.items() if load.state >= fire_at]
    near = [name for name, load in up.items() if near_at <= load.state < fire_at]
    assert binding == ["k3-radix-1"]  # 99%: still binds
    assert near  # the 98% servers: near binding now, where StatePoolSaturation would not fire
    shown = {m.label: m.value for m in at.metric}
    assert shown["State pool binds"] == f"{len(binding)} / {len(up)}"
    text = text_of(at)
    assert f"The state pool binds on {len(binding)} of {len(up)} servers up" in text
    assert (
        f"On {len(near)} of {len(up)} servers up a pool is near binding (state pool at {near_at:.0%}+" in text
    )
    assert f"state pool at {fire_at:.0%} (`StatePoolSaturation.fire_at`" in text  # the caption says why
    assert fx.RADIX_LOAD.hit_rate is not None
    assert fx.RADIX_LOAD.hit_rate >= max_hit
    assert "runs the radix cache" not in text  # 3% is not below 2%: RadixCacheWaste would not fire either


def test_bad_rule_settings_are_said_and_the_defaults_judge(seed_case: SeedCase, tmp_path: Path) -> None:
    at = capacity_with_rules(seed_case, tmp_path, {"StatePoolSaturation": {"fire_at": "high"}})
    assert not at.exception, [e.value for e in at.exception]
    (warning,) = at.warning
    assert "alert rules' settings cannot be read" in str(warning.value)
    assert "alerts.rules.StatePoolSaturation.fire\\_at" in str(warning.value)
    defaults = {rule.name: rule.settings for rule in build_rules()}
    up = fx.up_servers()
    binding = [n for n, load in up.items() if load.state >= defaults["StatePoolSaturation"].fire_at]
    assert {m.label: m.value for m in at.metric}["State pool binds"] == f"{len(binding)} / {len(up)}"
