"""The Prometheus rule file: its shape (interval, windows, recorded series only), ``promtool check rules``,
and ``promtool test rules`` on hand-made series for what the scenarios do not show (spellings, tp_rank,
hysteresis, TargetDown, the decay arithmetic). The engine's scenarios are in test_export_scenarios.py."""

from __future__ import annotations

import math
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.export import render_rules
from alerts.promql import MIN_SAMPLES
from alerts.rules import build_rules
from alerts.window import TargetHistory
from collectors.prometheus import downsampled, recording_rules
from collectors.prometheus.queries import recordings
from config import parse_config
from tests.alerts.conftest import snap

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not on PATH (Debian package: prometheus)"
)
STEP_S = 15
SCRAPE_15S = {"scrape": {"interval_s": STEP_S}}
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
STATE_POOL_DESCRIPTION = (
    "State pool at 98% of slots with requests queued while the KV cache is at 29%: short of recurrent-state "
    "slots, not cache. Raising --max-running-requests trades token budget for slots and makes it worse."
)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def values(points: list[float]) -> str:
    return " ".join(f"{v:.6g}" for v in points)


def series(name: str, instance: str, points: list[float], scheduler: bool = True) -> dict[str, str]:
    labels = f'job="sglang", instance="{instance}"' + (', tp_rank="0"' if scheduler else "")
    return {"series": f"{name}{{{labels}}}", "values": values(points)}


def decaying_fleet(n: int) -> tuple[list[dict[str, str]], list[tuple[float, float, float]]]:
    """Context 1K → 64K over 10 minutes, then flat; accept length follows the seed's mechanism (±3%)."""
    rng = random.Random(5)
    rows = []
    for i in range(n):
        context = 1024 * 64 ** (min(i, 40) / 40)
        accept = (2.514 - 1.074 * math.log(context / 1024) / math.log(64)) * (1 + rng.uniform(-0.03, 0.03))
        rows.append((context, accept, 0.0228 * (context / 1024) ** 0.301))
    itl_count = [800.0 * i for i in range(n)]
    itl_sum, total = [], 0.0
    for _context, accept, step in rows:
        total += 800 * step / accept
        itl_sum.append(total)
    inputs = [
        series("sglang:spec_accept_length", "decay", [a for _, a, _ in rows]),
        series("sglang:decode_sum_seq_lens", "decay", [8 * c for c, _, _ in rows]),
        series("sglang:num_running_reqs", "decay", [8.0] * n),
        series("sglang:inter_token_latency_seconds_count", "decay", itl_count, scheduler=False),
        series("sglang:inter_token_latency_seconds_sum", "decay", itl_sum, scheduler=False),
    ]
    return inputs, rows


def noisy_fleet(n: int) -> list[dict[str, str]]:
    """The seed's batch sweep: flat context, batch 1 → 48, accept length jittering in a 10.5% band."""
    rng = random.Random(9)
    running = [float(1 + (i * 47) // (n - 1)) for i in range(n)]
    context = [8192 * rng.uniform(0.97, 1.03) for _ in range(n)]
    return [
        series("sglang_spec_accept_length", "noise", [rng.uniform(2.473, 2.732) for _ in range(n)]),
        series("sglang_decode_sum_seq_lens", "noise", [c * r for c, r in zip(context, running, strict=True)]),
        series("sglang_num_running_reqs", "noise", running),
    ]


def engine_decline(rows: list[tuple[float, float, float]], at_index: int) -> float:
    rule = next(r for r in build_rules() if r.name == "AcceptanceDecayWithContext")
    history = TargetHistory("decay", 3600)
    t0 = 1_800_000_000.0
    for i, (context, accept, step) in enumerate(rows[: at_index + 1]):
        history.add(
            snap(
                "decay",
                t0 + STEP_S * i,
                accept_length=accept,
                avg_context_tokens=context,
                running=8,
                step_latency_s=step,
            )
        )
    (verdict,) = rule.evaluate(history, t0 + STEP_S * at_index, {})
    assert verdict.value is not None
    return verdict.value


def alerts_at(
    name: str, minutes: int, expected: list[dict[str, str]], instance: str | None = None
) -> dict[str, Any]:
    selector = f'alertname="{name}", alertstate="firing"' + (f', instance="{instance}"' if instance else "")
    samples = [
        {"labels": "ALERTS{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}", "value": 1}
        for labels in expected
    ]
    return {"expr": f"ALERTS{{{selector}}}", "eval_time": f"{minutes}m", "exp_samples": samples}


def firing(name: str, instance: str, severity: str) -> dict[str, str]:
    return {
        "alertname": name,
        "alertstate": "firing",
        "severity": severity,
        "target": instance,
        "instance": instance,
        "job": "sglang",
    }


def seconds(text: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)", text).groups()  # type: ignore[union-attr]
    return int(number) * _UNITS[unit]


def header(text: str) -> str:
    """The file's comment header as one line (it is wrapped at 110 columns)."""
    return " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))


@pytest.fixture(scope="module")
def rule_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("promtool")
    (folder / "rules.yml").write_text(render_rules(parse_config(SCRAPE_15S)), encoding="utf-8")
    return folder


def test_groups_carry_the_evaluation_interval_and_windows_hold_four_samples() -> None:
    for raw, interval in (
        ({"scrape": {"interval_s": 10}}, "10s"),  # no alerts.evaluation_interval_s: the scrape interval
        ({"scrape": {"interval_s": 5}, "alerts": {"evaluation_interval_s": 20}}, "20s"),
    ):
        groups = yaml.safe_load(render_rules(parse_config(raw)))["groups"]
        assert [g["name"] for g in groups] == [
            recording_rules.GROUP_NAME,
            downsampled.GROUP_NAME,
            "specwatch-alerts",
        ]
        # The downsampled recordings are evaluated once per their resolution (prometheus.downsample_s).
        assert [g["interval"] for g in groups] == [interval, "5m", interval]
        windows = re.findall(r"_over_time\([^\[]*\[(\w+)\]", yaml.safe_dump(groups[-1]))
        assert windows  # the alerts do average over windows
        assert min(seconds(w) for w in windows) >= MIN_SAMPLES * seconds(interval)
    # KVPoolSaturation's 30 s window, evaluated every 20 s, is widened to 80 s; at 5 s it stays 30 s.
    wide = render_rules(parse_config({"alerts": {"evaluation_interval_s": 20}}))
    assert "avg_over_time(instance_job:sglang_kv_usage:ratio[80s]) >= 0.95" in wide
    assert "avg_over_time(instance_job:sglang_kv_usage:ratio[30s]) >= 0.95" in render_rules()


def test_the_alerts_read_the_catalogues_recorded_series() -> None:
    text = render_rules(parse_config(SCRAPE_15S))
    signals, down, alerts = yaml.safe_load(text)["groups"]
    queries = recording_rules.signal_queries(parse_config(SCRAPE_15S))
    # The recording groups are those `export-recording-rules` writes, series for series.
    assert [signals, down] == recording_rules.rule_groups(queries, interval_s=STEP_S)["groups"]
    recorded = {r.record for r in recordings(queries.rate_window_s)}
    chained = {r["record"] for r in alerts["rules"] if "record" in r}
    for rule in alerts["rules"]:
        if "alert" not in rule:
            continue
        names = set(re.findall(r"\b[a-z_]+:[a-z0-9_:]+\b", rule["expr"]))
        assert names <= recorded | chained, f"{rule['alert']} reads {names - recorded - chained}"
        raw = re.findall(r"sglang\[:_\](\w+)", rule["expr"])
        # Only RadixCacheWaste reads a raw gauge, standing in for the recipe flag Prometheus cannot see.
        assert raw == ([] if rule["alert"] != "RadixCacheWaste" else ["kv_evictable_tokens"] * 2)
    # The old second copies of the signals are gone.
    assert "specwatch:kv_usage" not in text
    assert "specwatch:running" not in text


def test_rules_prometheus_cannot_judge_are_left_out_with_the_reason_in_the_header() -> None:
    text = render_rules()
    alerts = yaml.safe_load(text)["groups"][-1]["rules"]
    # ErrorBudgetBurn is exported per SLO and severity (test_export_slo.py): none without slos.
    left_out = {"AcceptLengthRegression", "SourceDown", "ErrorBudgetBurn"}
    assert [a["alert"] for a in alerts if "alert" in a] == [
        r.name for r in build_rules() if r.name not in left_out
    ]
    assert "Not exported: AcceptLengthRegression, because it judges throughput at comparable load" in header(
        text
    )
    assert "Not exported: SourceDown, because Prometheus cannot alert on its own absence" in header(text)
    disabled = render_rules(
        parse_config({"alerts": {"rules": {"AcceptLengthRegression": {"enabled": False}}}})
    )
    assert "AcceptLengthRegression" not in disabled  # nothing to explain when it is off anyway


@pytest.mark.engines
@needs_promtool
def test_promtool_checks_the_default_and_a_tuned_export(tmp_path: Path) -> None:
    tuned = parse_config(
        {
            "prometheus": {"url": "http://127.0.0.1:9090", "selector": 'job="sglang-east"'},
            "alerts": {
                "evaluation_interval_s": 15,
                "rules": {"StatePoolSaturation": {"fire_at": 0.9, "recover_below": 0.85}},
            },
        }
    )
    for name, text in (("default.yml", render_rules()), ("tuned.yml", render_rules(tuned))):
        (tmp_path / name).write_text(text, encoding="utf-8")
        result = promtool("check", "rules", name, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    tuned_text = (tmp_path / "tuned.yml").read_text(encoding="utf-8")
    assert '{__name__=~"sglang[:_]mamba_usage", tp_rank=~"0|", priority="", job="sglang-east"}' in tuned_text
    assert 'up{job="sglang-east"} == 0' in tuned_text
    assert "avg_over_time(instance_job:sglang_state_pool_usage:ratio[1m]) >= 0.9\n" in tuned_text


@pytest.mark.engines
@needs_promtool
def test_without_recordings_loads_beside_the_recording_rules_file(tmp_path: Path) -> None:
    config = parse_config(SCRAPE_15S)
    alerts_only = render_rules(config, include_recordings=False)
    assert [g["name"] for g in yaml.safe_load(alerts_only)["groups"]] == ["specwatch-alerts"]
    assert "load the output of `specwatch export recording-rules`" in header(alerts_only)
    (tmp_path / "alerts.yml").write_text(alerts_only, encoding="utf-8")
    (tmp_path / "recordings.yml").write_text(recording_rules.render_rules(config), encoding="utf-8")
    result = promtool("check", "rules", "recordings.yml", "alerts.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.engines
@needs_promtool
def test_promtool_unit_tests_of_the_exported_rules(rule_file: Path) -> None:
    n = 81  # 20 minutes at 15 s
    decay, rows = decaying_fleet(n)
    at_12m = 12 * 60 // STEP_S
    inputs = [
        *decay,
        *noisy_fleet(n),
        # State pool: rank 1 is full but only tp_rank="0" reports; instance b (underscore spelling) is full.
        series("sglang:mamba_usage", "a", [0.5] * n),
        {
            "series": 'sglang:mamba_usage{job="sglang", instance="a", tp_rank="1"}',
            "values": values([0.99] * n),
        },
        series("sglang:num_queue_reqs", "a", [5.0] * n),
        series("sglang_mamba_usage", "b", [0.98] * 20 + [0.92] * 20 + [0.85] * 41),
        series("sglang_num_queue_reqs", "b", [5.0] * 20 + [0.0] * 61),
        series("sglang_full_token_usage", "b", [0.29] * n),
        series("sglang:full_token_usage", "k", [0.97] * n),
        series("sglang:num_queue_reqs", "q", [40.0] * n),
        {"series": 'up{job="sglang", instance="c"}', "values": values([1.0] * 4 + [0.0] * (n - 4))},
        # Radix cache on (evictable slots), nothing hits, state pool under pressure; r2 has no radix cache.
        *[
            series(name, inst, [v] * n)
            for inst in ("r", "r2")
            for name, v in (
                ("sglang:mamba_usage", 0.92),
                ("sglang:num_running_reqs", 40.0),
            )
        ],
        # 3 % of prompt tokens from the cache, as the counters SGLang adds at request completion say.
        *[
            series(name, inst, [per_step * i for i in range(n)])
            for inst in ("r", "r2")
            for name, per_step in (
                ("sglang:prompt_tokens_total", 10_000.0),
                ("sglang:cached_tokens_total", 300.0),
            )
        ],
        series("sglang:kv_evictable_tokens", "r", [5000.0] * n),
        series("sglang:kv_evictable_tokens", "r2", [0.0] * n),
    ]
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{STEP_S}s",
        "tests": [
            {
                "interval": f"{STEP_S}s",
                "input_series": inputs,
                "alert_rule_test": [
                    {
                        "eval_time": "4m",
                        "alertname": "StatePoolSaturation",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "target": "b",
                                    "instance": "b",
                                    "job": "sglang",
                                },
                                "exp_annotations": {
                                    "summary": "State pool at 98% on b; KV 29%",
                                    "description": STATE_POOL_DESCRIPTION,
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "2m",
                        "alertname": "TargetDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "target": "c",
                                    "instance": "c",
                                    "job": "sglang",
                                },
                                "exp_annotations": {
                                    "summary": "c is down",
                                    "description": "Prometheus has not scraped c for 30 s.",
                                },
                            }
                        ],
                    },
                ],
                "promql_expr_test": [
                    # Hysteresis: at 0.92 (between 0.90 and 0.95, queue empty) it keeps firing; at 0.85 it
                    # resolves.
                    alerts_at("StatePoolSaturation", 9, [firing("StatePoolSaturation", "b", "critical")]),
                    alerts_at("StatePoolSaturation", 13, []),
                    alerts_at("KVPoolSaturation", 3, [firing("KVPoolSaturation", "k", "warning")]),
                    alerts_at("QueueBacklog", 5, [firing("QueueBacklog", "q", "warning")]),
                    alerts_at("RadixCacheWaste", 10, [firing("RadixCacheWaste", "r", "info")]),
                    alerts_at(
                        "AcceptanceDecayWithContext",
                        12,
                        [firing("AcceptanceDecayWithContext", "decay", "critical")],
                    ),
                    *[
                        alerts_at("AcceptanceDecayWithContext", m, [], instance="noise")
                        for m in (5, 10, 15, 20)
                    ],
                    {
                        # The exported arithmetic agrees with the engine on the same samples.
                        "expr": f'abs(specwatch:accept_decay_decline{{instance="decay"}} - '
                        f"{engine_decline(rows, at_12m):.4f}) < bool 0.02",
                        "eval_time": "12m",
                        "exp_samples": [{"labels": '{instance="decay", job="sglang"}', "value": 1}],
                    },
                ],
            }
        ],
    }
    (rule_file / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False, width=1000), encoding="utf-8")
    result = promtool("test", "rules", "tests.yml", cwd=rule_file)
    assert result.returncode == 0, result.stdout + result.stderr
