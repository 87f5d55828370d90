"""The exported SLO rules judge what the engine judges: the scenario of ``slo_scenario`` (fast burn on east,
slow burn on west, healthy south, a three-requests-an-hour server) as raw SGLang series in ``promtool test
rules`` fires ErrorBudgetBurn on exactly the (severity, scope) pairs, with exactly the labels, that the
engine fires on the same numbers; the Sloth recordings read what the ledger counts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.utils import floatToGoString

from alerts.export import render_rules
from collectors.prometheus.slo_rules import le_matcher, window_name
from config import parse_config
from config.settings import E2E_BOUNDARIES_S, TPOT_BOUNDARIES_S, TTFT_BOUNDARIES_S
from tests.alerts import slo_scenario as scenario
from tests.alerts.slo_scenario import Run

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not on PATH (Debian package: prometheus)"
)


def promtool(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=folder, capture_output=True, text=True, timeout=240, check=False
    )


def test_window_names_and_le_matchers_are_the_spellings_prometheus_sees() -> None:
    assert [window_name(s) for s in (300, 3600, 7200, 86400, 259200, 28 * 86400, 90)] == [
        "5m", "1h", "2h", "1d", "3d", "28d", "90s"
    ]  # fmt: skip
    # As PromQL source (backslashes doubled inside the string literal): every spelling of the boundary,
    # never a neighbour (10 is not 1, 0.4 is not 0.04).
    assert le_matcher(1.0) == "1(\\\\.0+)?"
    assert le_matcher(0.04) == "0\\\\.040*"


@pytest.fixture(scope="module")
def engine_fired(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    run = Run(tmp_path_factory.mktemp("engine") / "alerts.sqlite")
    run.run(range(scenario.MINUTES + 1))
    run.store.close()
    fired = {
        tuple(sorted(t.labels_dict.items()))
        for t in run.transitions
        if t.rule == "ErrorBudgetBurn" and t.kind == "firing"
    }
    return [dict(labels) for labels in sorted(fired)]


@needs_promtool
def test_exported_rules_fire_exactly_where_the_engine_fires(
    engine_fired: list[dict[str, str]], tmp_path: Path
) -> None:
    # The scenario shows what it is meant to (asserted in detail in test_error_budget_burn.py).
    assert {(f["severity"], f.get("deployment", "")) for f in engine_fired} == {
        ("page", "east"), ("ticket", "east"), ("ticket", "west"), ("ticket", "")
    }  # fmt: skip
    disagreement = promtool_disagrees(tmp_path, engine_fired)
    assert not disagreement, f"the engine fired {engine_fired}; promtool:\n{disagreement}"


def promtool_disagrees(tmp_path: Path, engine_fired: list[dict[str, str]]) -> str:
    """Run the exported rules on the scenario's series expecting exactly ``engine_fired`` to have fired at
    some evaluation; promtool's complaint when they disagree ("" when they agree)."""
    rules = render_rules(scenario.config())
    (tmp_path / "rules.yml").write_text(rules, encoding="utf-8")
    check = promtool(tmp_path, "check", "rules", "rules.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    duration = f"{scenario.MINUTES}m"
    fired = f'max_over_time(ALERTS{{alertname="ErrorBudgetBurn", alertstate="firing"}}[{duration}])'
    expected = [
        {"labels": _series({**labels, "alertstate": "firing"}), "value": 1} for labels in engine_fired
    ]
    tests: dict[str, Any] = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": scenario.input_series(),
                "promql_expr_test": [
                    {"expr": fired, "eval_time": duration, "exp_samples": expected},
                    # The Sloth recordings at the end: east's 1 h error ratio is 30 % (the ledger's too).
                    {
                        "expr": 'slo:sli_error:ratio_rate1h{sloth_slo="ttft-1s", deployment="east"}',
                        "eval_time": duration,
                        "exp_samples": [
                            {
                                "labels": _series(
                                    {
                                        "__name__": "slo:sli_error:ratio_rate1h",
                                        "deployment": "east",
                                        "sloth_id": "specwatch-ttft-1s",
                                        "sloth_service": "specwatch",
                                        "sloth_slo": "ttft-1s",
                                        "sloth_window": "1h",
                                    }
                                ),
                                "value": 0.3,
                            }
                        ],
                    },
                    # Tiny burns a third of its requests, but it is a scope of three an hour.
                    {
                        "expr": 'slo:sli_total:increase1h{deployment="tiny"} < 100',
                        "eval_time": duration,
                        "exp_samples": [
                            {
                                "labels": _series(
                                    {
                                        "__name__": "slo:sli_total:increase1h",
                                        "deployment": "tiny",
                                        "sloth_id": "specwatch-ttft-1s",
                                        "sloth_service": "specwatch",
                                        "sloth_slo": "ttft-1s",
                                        "sloth_window": "1h",
                                    }
                                ),
                                "value": 3,
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, width=10_000), encoding="utf-8")
    result = promtool(tmp_path, "test", "rules", "tests.yml")
    return "" if result.returncode == 0 else result.stdout + result.stderr


def _series(labels: dict[str, str]) -> str:
    name = labels.pop("__name__", "")
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@needs_promtool
def test_every_sli_kind_and_the_recovery_fraction_export_valid_rules(tmp_path: Path) -> None:
    config = parse_config(
        {
            "slos": [
                {"name": "tpot-40ms", "sli": {"kind": "tpot", "threshold_s": 0.04}, "objective": 0.99,
                 "match": {"tier": "long-context"}},
                {"name": "e2e-60s", "sli": {"kind": "e2e", "threshold_s": 60}, "objective": 0.95,
                 "window": "7d", "match": {"deployment": "east"}},
                {"name": "availability", "sli": {"kind": "availability"}, "objective": 0.999},
            ],
            "alerts": {"rules": {"ErrorBudgetBurn": {"recover_below": 0.5, "keep_firing_for_s": 120}}},
        }
    )  # fmt: skip
    rules = render_rules(config)
    (tmp_path / "rules.yml").write_text(rules, encoding="utf-8")
    check = promtool(tmp_path, "check", "rules", "rules.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    alerts = [
        r for g in yaml.safe_load(rules)["groups"] for r in g["rules"] if r.get("alert") == "ErrorBudgetBurn"
    ]
    assert len(alerts) == 6  # a page and a ticket per SLO
    # Once active, an alert holds while both windows burn above half the factor (the ALERTS join).
    tpot_page = next(a for a in alerts if a["labels"] == {
        "slo": "tpot-40ms", "severity": "page", "long_window": "1h", "short_window": "5m"})  # fmt: skip
    assert (
        'and on (deployment, tier) ALERTS{alertname="ErrorBudgetBurn", slo="tpot-40ms", severity="page"}'
        in (tpot_page["expr"])
    )
    assert tpot_page["keep_firing_for"] == "2m"
    # TPOT reads the per-request histogram, else inter-token latency where a server has only that one.
    groups = {g["name"]: g["rules"] for g in yaml.safe_load(rules)["groups"]}
    tpot_5m = groups["specwatch-slo-tpot-40ms"][0]["expr"]
    assert 'request_time_per_output_token_seconds_bucket{le=~"0\\\\.040*"' in tpot_5m
    assert "unless on (instance, job)" in tpot_5m
    assert 'inter_token_latency_seconds_bucket{le=~"0\\\\.040*"' in tpot_5m
    assert 'tier="long-context"' in tpot_5m
    # The deployment an SLO's match fixes is its only scope: no per-deployment sum for e2e-60s.
    assert all('deployment!=""' not in r["expr"] for r in groups["specwatch-slo-e2e-60s"])
    assert "slo:sli_error:ratio_rate7d" in rules  # the period's recording
    # Windows under an hour at the evaluation interval; under a day once a minute; a day or more and the
    # period every 5 m, which the alerts read as their newest evaluation within 10 m.
    intervals = {g["name"]: g.get("interval") for g in yaml.safe_load(rules)["groups"]}
    fast = {r.get("record") for r in groups["specwatch-slo-tpot-40ms"]}
    assert {"slo:sli_error:ratio_rate5m", "slo:sli_total:increase30m"} <= fast
    for window, group_name in (("1h", "long"), ("6h", "long"), ("1d", "days"), ("3d", "days")):
        for name in ("slo:sli_error:ratio_rate", "slo:sli_total:increase"):
            group = groups[f"specwatch-slo-tpot-40ms-{group_name}"]
            assert any(r.get("record") == name + window for r in group), (name, window)
            others = [
                g for g in groups if g.startswith("specwatch-slo-tpot-40ms") and not g.endswith(group_name)
            ]
            assert not any(r.get("record") == name + window for g in others for r in groups[g])
    assert intervals["specwatch-slo-tpot-40ms-long"] == "1m"
    assert intervals["specwatch-slo-tpot-40ms-days"] == "5m"
    assert intervals["specwatch-slo-tpot-40ms-period"] == "5m"
    ticket = next(
        a for a in alerts if a["labels"].get("slo") == "tpot-40ms" and a["labels"]["severity"] == "ticket"
    )
    assert (
        'last_over_time(slo:sli_error:ratio_rate3d{sloth_id="specwatch-tpot-40ms"}[10m])' in (ticket["expr"])
    )
    assert "last_over_time(slo:sli_error:ratio_rate6h" not in ticket["expr"]  # a minute apart: read plainly


def test_the_le_matcher_takes_every_spelling_of_its_boundary_and_no_other_bucket() -> None:
    boundaries = sorted({*TTFT_BOUNDARIES_S, *TPOT_BOUNDARIES_S, *E2E_BOUNDARIES_S})

    def spellings(b: float) -> set[str]:
        # prometheus_client (Go float text), a Go exporter (shortest), OpenMetrics/Prometheus 3 ("1.0").
        out = {floatToGoString(b), f"{b:g}", repr(float(b))}
        return out | ({str(int(b)), f"{int(b)}.0"} if float(b).is_integer() else set())

    for boundary in boundaries:
        # The PromQL string literal unescaped (\\ → \), then matched fully anchored as Prometheus does.
        pattern = re.compile(le_matcher(boundary).replace("\\\\", "\\"))
        assert all(pattern.fullmatch(s) for s in spellings(boundary)), boundary
        others = {s for b in boundaries if b != boundary for s in spellings(b)} | {"+Inf"}
        assert not [s for s in others if pattern.fullmatch(s)], boundary
