"""The exported rules judge what the engine judges: the engine's scenarios, fed to ``promtool test rules`` as
the raw SGLang series the simulator exposes, fire exactly the alerts the built-in engine fires on the same
bodies (computed here from the same series, never written down).

context_decay fires AcceptanceDecayWithContext on the server whose prompts grow; batch_noise (accept length
jittering across batch sizes) stays silent; state_saturation fires StatePoolSaturation and not
KVPoolSaturation; demo's healthy servers (including the plain-decoding one, whose accept-length gauge is 0)
stay silent while its saturated and long-context servers fire, and its outage fires TargetDown.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from alerts.export import render_rules
from config import parse_config
from tests.alerts.sim_series import ScenarioSeries, families_read, run_scenario_offline

PROMTOOL = shutil.which("promtool")
STEP_S = 15
pytestmark = [
    pytest.mark.engines,
    pytest.mark.skipif(PROMTOOL is None, reason="promtool not on PATH (Debian package: prometheus)"),
]

Check = Callable[[set[tuple[str, str]]], None]


def _decay_on_the_ramp_only(fired: set[tuple[str, str]]) -> None:
    assert {t for r, t in fired if r == "AcceptanceDecayWithContext"} == {"ctx-ramp"}


def _no_decay(fired: set[tuple[str, str]]) -> None:
    assert not {t for r, t in fired if r == "AcceptanceDecayWithContext"}


def _state_pool_not_kv(fired: set[tuple[str, str]]) -> None:
    assert {("StatePoolSaturation", "sat-default"), ("StatePoolSaturation", "sat-shipped")} <= fired
    assert not {t for r, t in fired if r == "KVPoolSaturation"}


def _healthy_silent(fired: set[tuple[str, str]]) -> None:
    assert not {(r, t) for r, t in fired if t in {"k3-east-0", "k3-west-0", "k3-west-plain"}}
    assert ("StatePoolSaturation", "k3-west-saturated") in fired  # the same run is not silent everywhere
    assert ("TargetDown", "k3-east-2") in fired  # its two-minute outage at 4200 s


SCENARIOS: dict[str, tuple[int, Check]] = {
    "context_decay": (2400, _decay_on_the_ramp_only),
    "batch_noise": (2400, _no_decay),
    "state_saturation": (600, _state_pool_not_kv),
    "demo": (4500, _healthy_silent),
}


def promtool_agrees(folder: Path, run: ScenarioSeries, expected: set[tuple[str, str]]) -> str:
    """Run promtool expecting exactly ``expected`` (alertname, instance) to have fired at some evaluation of
    the run; returns promtool's output when it disagrees (it lists what the exported rules fired)."""
    assert PROMTOOL is not None
    expr = f'count by (alertname, instance) (max_over_time(ALERTS{{alertstate="firing"}}[{run.duration_s}s]))'
    samples = [
        {"labels": f'{{alertname="{rule}", instance="{target}"}}', "value": 1} for rule, target in expected
    ]
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{run.step_s}s",
        "tests": [
            {
                "interval": f"{run.step_s}s",
                "input_series": run.input_series(),
                "promql_expr_test": [
                    {"expr": expr, "eval_time": f"{run.duration_s}s", "exp_samples": samples}
                ],
            }
        ],
    }
    (folder / "tests.yml").write_text(yaml.safe_dump(tests, width=10_000), encoding="utf-8")
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_exported_rules_fire_what_the_engine_fires(scenario: str, tmp_path: Path) -> None:
    sim_seconds, check = SCENARIOS[scenario]
    rules = render_rules(parse_config({"scrape": {"interval_s": STEP_S}}))
    (tmp_path / "rules.yml").write_text(rules, encoding="utf-8")
    run = run_scenario_offline(
        scenario, tmp_path, sim_seconds=sim_seconds, step_s=STEP_S, wanted=families_read(rules)
    )
    check(run.fired)  # the scenario shows what it is meant to show (on the engine)
    exported = {(rule, target) for rule, target in run.fired if rule != "AcceptLengthRegression"}
    disagreement = promtool_agrees(tmp_path, run, exported)
    assert not disagreement, f"the engine fired {sorted(exported)}; promtool:\n{disagreement}"
