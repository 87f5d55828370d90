"""One simulated scenario read two ways: the raw SGLang series (promtool ``input_series``) and the built-in
engine's verdicts on the same bodies (parsed and derived by the direct source's own code).

The simulator is stepped by hand (no HTTP, no wall clock): at every step each server renders its /metrics body
once; that one body feeds both Prometheus (as raw samples) and the engine (as a derived snapshot).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerts.engine import AlertEngine
from alerts.rules import build_rules
from alerts.state_store import AlertStateStore
from collectors.derive import CounterState, derive_signals
from collectors.direct.metrics_reader import parse_exposition
from collectors.model import Recipe, TargetSnapshot
from sim.fleet import SimFleet

T0 = 1_800_000_000.0  # the engine's clock at step 0 (promtool's series start at 0 s)
JOB = "sglang"


@dataclass
class ScenarioSeries:
    """The raw series of every server at every step, and what the engine fired on them."""

    step_s: int
    steps: int
    series: dict[str, list[float | None]] = field(default_factory=dict)
    fired: set[tuple[str, str]] = field(default_factory=set)  # (rule, target) that reached firing

    @property
    def duration_s(self) -> int:
        return self.step_s * (self.steps - 1)

    def input_series(self) -> list[dict[str, str]]:
        """promtool's input_series: one entry per series, ``_`` where a step had no sample."""
        return [
            {"series": name, "values": " ".join("_" if v is None else f"{v:.10g}" for v in points)}
            for name, points in self.series.items()
        ]


def _series_name(name: str, labels: Mapping[str, str], instance: str) -> str:
    pairs = {**labels, "job": JOB, "instance": instance}
    body = ", ".join(f'{k}="{v}"' for k, v in sorted(pairs.items()))
    return f"{name}{{{body}}}"


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_READ = re.compile(r"sglang(?:\[:_\]|:|_)([a-z_]+)")


def families_read(rule_text: str) -> frozenset[str]:
    """The SGLang names (without the ``sglang:`` prefix) a rule file reads, in either spelling."""
    return frozenset(_READ.findall(rule_text))


def _raw_samples(body: str, instance: str, wanted: frozenset[str]) -> dict[str, float]:
    """The samples of the body the rules read, keyed by promtool series name. Only those: the input stays
    small, and a plain line split is ~40x faster than a full text parser (the bodies are well formed)."""
    out: dict[str, float] = {}
    for line in body.splitlines():
        if not line.startswith("sglang"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        if name[len("sglang:") :] not in wanted:
            continue
        out[_series_name(name, dict(_LABEL.findall(labels)), instance)] = float(value)
    return out


def run_scenario_offline(
    scenario: str,
    folder: Path,
    *,
    sim_seconds: int,
    wanted: frozenset[str],
    step_s: int = 15,
    rules: dict[str, dict[str, Any]] | None = None,
) -> ScenarioSeries:
    """Step ``scenario`` every ``step_s`` simulated seconds for ``sim_seconds``; return both readings (the raw
    series restricted to the SGLang families in ``wanted``)."""
    fleet = SimFleet(scenario)
    servers = fleet.servers
    recipes: dict[str, Recipe] = {s.recipe.recipe_id: s.recipe for s in servers}
    engine = AlertEngine(
        build_rules(rules),
        AlertStateStore(folder / f"{Path(scenario).stem}-alerts.sqlite"),
        clock=lambda: now_ts,
        evaluation_interval_s=step_s,
        scrape_interval_s=step_s,
        recipes=lambda: recipes,
    )
    steps = sim_seconds // step_s + 1
    result = ScenarioSeries(step_s, steps)
    columns: dict[str, list[float | None]] = defaultdict(lambda: [None] * steps)
    counters: dict[str, CounterState | None] = {s.name: None for s in servers}
    now_ts = T0
    for step in range(steps):
        now_ts = T0 + step * step_s
        snapshots = []
        for server in servers:
            at_s = float(step * step_s)
            server.advance(at_s)
            up = columns[_series_name("up", {}, server.name)]
            if server.fault == "down" or at_s < server.booting_until:
                # Connection refused (a scenario outage, or a restart still booting): Prometheus records
                # up 0 and no samples; the engine gets a down snapshot.
                up[step] = 0.0
                snapshots.append(
                    TargetSnapshot(target=server.name, ts=now_ts, up=False, error="connection refused")
                )
                continue
            up[step] = 1.0
            body = server.render_body().decode()
            for name, value in _raw_samples(body, server.name, wanted).items():
                columns[name][step] = value
            derivation = derive_signals(
                parse_exposition(body).values, now_ts, counters[server.name], server.recipe
            )
            counters[server.name] = derivation.state
            snapshots.append(
                TargetSnapshot(
                    target=server.name,
                    ts=now_ts,
                    up=True,
                    signals=derivation.signals,
                    recipe_id=server.recipe.recipe_id,
                    deployment=server.target.deployment,
                )
            )
            recipes.setdefault(server.recipe.recipe_id, server.recipe)  # a restart may bring a new one
        for transition in engine.observe(snapshots, now_ts):
            if transition.kind == "firing":
                result.fired.add((transition.rule, transition.target))
    result.series = dict(columns)
    return result
