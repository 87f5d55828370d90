"""The Prometheus rule file: ``promtool check rules`` and ``promtool test rules`` on the exported rules."""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.export import render_rules
from alerts.rules import build_rules
from alerts.window import TargetHistory
from config import parse_config
from tests.alerts.conftest import snap

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not on PATH (Debian package: prometheus)")
STEP_S = 15
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


@pytest.fixture(scope="module")
def rule_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("promtool")
    (folder / "rules.yml").write_text(render_rules(), encoding="utf-8")
    return folder


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
    assert '{__name__=~"sglang[:_]mamba_usage", tp_rank="0", job="sglang-east"}' in tuned_text
    assert ">= 0.9" in tuned_text
    assert "interval: 15s" in tuned_text
    alerts = yaml.safe_load(tuned_text)["groups"][1]["rules"]
    assert [a["alert"] for a in alerts] == [r.name for r in build_rules()]


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
                ("sglang:cache_hit_rate", 0.03),
                ("sglang:mamba_usage", 0.92),
                ("sglang:num_running_reqs", 40.0),
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


def test_promtool_regression_after_a_restart(rule_file: Path) -> None:
    n = 70 * 60 // STEP_S
    restart = 40 * 60 // STEP_S
    accept = [2.55] * restart + [2.20] * (n - restart)
    requests = [float(10 * i) for i in range(restart)] + [float(10 * i) for i in range(n - restart)]
    # "traded": the same accept-length fall, but output throughput rose (a cheaper verify step): no alert.
    generated = [float(1000 * i) for i in range(restart)] + [float(1700 * i) for i in range(n - restart)]
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{STEP_S}s",
        "tests": [
            {
                "interval": f"{STEP_S}s",
                "input_series": [
                    series("sglang:spec_accept_length", "g", accept),
                    series("sglang:num_running_reqs", "g", [30.0] * n),
                    series("sglang:num_requests_total", "g", requests, scheduler=False),
                    series("sglang:spec_accept_length", "traded", accept),
                    series("sglang:num_running_reqs", "traded", [30.0] * n),
                    series("sglang:num_requests_total", "traded", requests, scheduler=False),
                    series("sglang:generation_tokens_total", "traded", generated, scheduler=False),
                ],
                "promql_expr_test": [
                    alerts_at("AcceptLengthRegression", 39, []),
                    alerts_at(
                        "AcceptLengthRegression", 60, [firing("AcceptLengthRegression", "g", "warning")]
                    ),
                ],
            }
        ],
    }
    (rule_file / "regression.yml").write_text(
        yaml.safe_dump(tests, sort_keys=False, width=1000), encoding="utf-8"
    )
    result = promtool("test", "rules", "regression.yml", cwd=rule_file)
    assert result.returncode == 0, result.stdout + result.stderr
