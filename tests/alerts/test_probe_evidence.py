"""AcceptanceDecayWithContext on probe evidence: a recipe's longest-context probes against its own baseline,
read from a real probe table (SQLite), with the server's traffic at flat short context."""

from __future__ import annotations

from pathlib import Path

import pytest

from alerts.model import Condition, Evaluation
from alerts.rules import build_rules
from alerts.rules.probe_evidence import attach_probe_evidence
from alerts.window import TargetHistory
from collectors.probe_result import ProbeResult
from collectors.store.probes import ProbeStore
from config import parse_config
from tests.alerts.conftest import snap

T0 = 1_800_000_000.0
RECIPE = "r-base"
CONTEXTS = (1024, 8192, 65536)


def flat_history(now: float) -> TargetHistory:
    """Busy traffic at a flat 2K context: the passive fit can never see a context effect."""
    h = TargetHistory("gpu-1", 7200.0, 1800.0)
    for i in range(60):
        h.add(snap("gpu-1", now - 300 + 5 * i, accept_length=3.0, avg_context_tokens=2048, running=8))
    return h


def probe(ts: float, target: str, context: int, accept: float, *, error: str | None = None) -> ProbeResult:
    return ProbeResult(
        ts, target, RECIPE, context, accept_length=None if error else accept, request_id="r", error=error
    )


def evaluate(tmp_path: Path, rows: list[ProbeResult], now: float, **rule: object) -> Evaluation:
    path = str(tmp_path / "history.sqlite")
    store = ProbeStore(path)
    store.append(rows)
    store.close()
    config = parse_config({"store": {"path": path}, "probes": {"enabled": True}})
    rules = build_rules({"AcceptanceDecayWithContext": rule} if rule else {})
    evidence = attach_probe_evidence(rules, config)
    (decay,) = [r for r in rules if r.name == "AcceptanceDecayWithContext"]
    assert (evidence is None) == (rule.get("use_probes") is False)  # the rule reads probes unless told not to
    try:
        (result,) = decay.evaluate(flat_history(now), now, {})
        return result
    finally:
        if evidence is not None:
            evidence.close()


def sweeps(now: float, long_accept_now: float, *, baseline_accept: float = 1.60) -> list[ProbeResult]:
    """Six hourly baseline sweeps on two servers of the recipe, then three recent sweeps on gpu-1."""
    rows = []
    for hour in range(1, 7):
        for target in ("gpu-1", "gpu-2"):
            ts = now - 3600.0 * hour
            rows += [
                probe(ts, target, c, a) for c, a in zip(CONTEXTS, (3.3, 2.5, baseline_accept), strict=True)
            ]
    for age_s in (1500.0, 900.0, 300.0):
        rows += [
            probe(now - age_s, "gpu-1", c, a)
            for c, a in zip(CONTEXTS, (3.3, 2.5, long_accept_now), strict=True)
        ]
    return rows


def test_probes_at_long_context_below_the_recipes_baseline_fire(tmp_path: Path) -> None:
    now = T0
    result = evaluate(tmp_path, sweeps(now, 1.30), now)
    assert result.condition is Condition.BREACH
    assert result.value == pytest.approx(1 - 1.30 / 1.60)
    assert "measured by probes" in result.summary
    assert "Measured by probes: accept length 1.30 at 65,536 tokens" in result.description
    assert "vs 1.60 for recipe r-base before (12 probes): -19%" in result.description


def test_the_ordinary_fall_with_context_is_not_an_alert(tmp_path: Path) -> None:
    # 3.3 at 1K → 1.6 at 64K is the mechanism, in every probe curve: on baseline, nothing fires.
    result = evaluate(tmp_path, sweeps(T0, 1.58), T0)
    assert result.condition is Condition.CLEAR
    assert "Measured by probes" not in result.description


def test_a_fall_inside_the_noise_band_only_holds(tmp_path: Path) -> None:
    result = evaluate(tmp_path, sweeps(T0, 1.60 * 0.93), T0)
    assert result.condition is Condition.HOLD  # keeps a firing alert, never starts one


def test_failed_probes_and_too_few_recent_ones_are_no_evidence(tmp_path: Path) -> None:
    rows = [r for r in sweeps(T0, 1.30) if r.ts < T0 - 1800]  # no recent probes of gpu-1
    rows += [probe(T0 - 60, "gpu-1", 65536, 0.0, error="gpu-1: connection refused")]
    rows += [probe(T0 - 30, "gpu-1", 65536, 1.2)]  # one recent probe: probe_min_recent is 2
    result = evaluate(tmp_path, rows, T0)
    assert result.condition is Condition.CLEAR
    assert result.description == "context did not grow enough in the window"


def test_use_probes_false_ignores_them(tmp_path: Path) -> None:
    result = evaluate(tmp_path, sweeps(T0, 1.30), T0, use_probes=False)
    assert result.condition is Condition.CLEAR
