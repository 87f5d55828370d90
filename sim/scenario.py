"""Scenario files (``sim/scenarios/<name>.yaml``): which servers run which recipe and load, and what changes.

A scenario is validated once at load time (bad files raise ``ConfigError`` naming the file and key), expanded
into one ``ServerSpec`` per server, and compiled into a per-server ``Timeline`` of actions in simulated
seconds.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from config import ConfigError
from sim import calibration as cal
from sim.recipes import resolve_server_args
from sim.workload import Load, Workload

SCENARIO_DIR = Path(__file__).parent / "scenarios"
FaultKind = Literal["down", "slow", "garbage", "hang"]
RAMP_STEP_S = 30.0  # a ramp changes its value this often (simulated seconds)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoadSpec(_Model):
    concurrency: int | None = Field(None, ge=0, le=100_000, description="Closed-loop clients.")
    rate_rps: float | None = Field(
        None, ge=0, le=100_000, description="Open-loop Poisson arrivals per second."
    )


class WorkloadSpec(_Model):
    isl: int | None = Field(None, ge=1, le=1_048_576)
    osl: int | None = Field(None, ge=1, le=262_144)
    isl_jitter: float | None = Field(None, ge=0, lt=1)
    osl_jitter: float | None = Field(None, ge=0, lt=1)
    content: Literal["random", "text"] | None = None
    streaming_fraction: float | None = Field(None, ge=0, le=1)
    shared_prefix_tokens: int | None = Field(None, ge=0)
    prompts_per_group: int | None = Field(None, ge=1)


class ServerTemplate(_Model):
    name: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    deployment: str = "default"
    recipe: str = "base"
    workload: str | WorkloadSpec = "default"
    load: LoadSpec = LoadSpec(concurrency=32)
    count: int = Field(1, ge=1, le=2000)
    port: int | None = Field(None, ge=1, le=65535)
    labels: dict[str, str] = Field(default_factory=dict)


class RampSpec(_Model):
    over_s: float = Field(gt=0)
    isl: tuple[int, int] | None = None
    osl: tuple[int, int] | None = None
    concurrency: tuple[int, int] | None = None
    rate_rps: tuple[float, float] | None = None


class RestartSpec(_Model):
    recipe: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    boot_s: float | None = Field(None, ge=0)


class PhaseSpec(_Model):
    at_s: float = Field(ge=0)
    until_s: float | None = None
    servers: tuple[str, ...] = ("*",)
    load: LoadSpec | None = None
    workload: WorkloadSpec | None = None
    ramp: RampSpec | None = None
    fault: Literal["down", "slow", "garbage", "hang", "none"] | None = None
    fault_delay_s: float = Field(5.0, gt=0, le=600)
    restart: RestartSpec | bool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PhaseSpec:
        if self.until_s is not None and self.until_s <= self.at_s:
            raise ValueError(f"until_s ({self.until_s}) must be after at_s ({self.at_s})")
        if not any((self.load, self.workload, self.ramp, self.fault, self.restart)):
            raise ValueError("a phase needs load, workload, ramp, fault or restart")
        return self


class ScenarioFile(_Model):
    description: str = ""
    warmup_s: float = Field(600.0, ge=0, le=86_400, description="Simulated seconds run before t = 0.")
    loop_s: float | None = Field(None, gt=0, description="Phases repeat with this period.")
    boot_s: float = Field(cal.BOOT_S, ge=0, description="Simulated seconds a restarting server is down.")
    recipes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    workloads: dict[str, WorkloadSpec] = Field(default_factory=dict)
    servers: tuple[ServerTemplate, ...] = Field(min_length=1)
    phases: tuple[PhaseSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Action:
    """One change to one server at a simulated time."""

    at_s: float
    kind: Literal["load", "workload", "fault", "restart"]
    changes: dict[str, Any] = field(default_factory=dict)  # load/workload fields, or restart overrides
    fault: FaultKind | None = None
    fault_delay_s: float = 5.0
    boot_s: float | None = None


@dataclass(frozen=True, slots=True)
class Timeline:
    """A server's actions within one period (sorted by time); with ``loop_s`` they repeat every period."""

    actions: tuple[Action, ...] = ()
    loop_s: float | None = None
    times: tuple[float, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "times", tuple(a.at_s for a in self.actions))

    def between(self, after_s: float, until_s: float) -> list[Action]:
        """Actions with after_s < at ≤ until_s, in time order (times shifted into their period)."""
        if not self.actions or until_s <= after_s:
            return []
        if self.loop_s is None:
            lo, hi = bisect_right(self.times, after_s), bisect_right(self.times, until_s)
            return list(self.actions[lo:hi])
        out = []
        first, last = math.floor(max(after_s, 0) / self.loop_s), math.floor(until_s / self.loop_s)
        for period in range(first, last + 1):
            offset = period * self.loop_s
            lo, hi = bisect_right(self.times, after_s - offset), bisect_right(self.times, until_s - offset)
            out += [_shift(a, offset) for a in self.actions[lo:hi]]
        return out

    def next_after(self, after_s: float) -> float:
        """When the next action after ``after_s`` happens (inf: never)."""
        if not self.actions:
            return math.inf
        if self.loop_s is None:
            i = bisect_right(self.times, after_s)
            return self.times[i] if i < len(self.times) else math.inf
        offset = math.floor(max(after_s, 0) / self.loop_s) * self.loop_s
        i = bisect_right(self.times, after_s - offset)
        return offset + self.times[i] if i < len(self.times) else offset + self.loop_s + self.times[0]


def _shift(action: Action, offset: float) -> Action:
    return Action(
        action.at_s + offset, action.kind, action.changes, action.fault, action.fault_delay_s, action.boot_s
    )


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One simulated server: identity, recipe, baseline workload and load, and its timeline."""

    name: str
    template: str
    deployment: str
    labels: dict[str, str]
    recipe: dict[str, Any]  # server-arg overrides on the base
    workload: Workload
    load: Load
    timeline: Timeline
    port: int | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    source: str
    spec: ScenarioFile

    def recipe(self, name: str | None, key: str) -> dict[str, Any]:
        if name is None or name == "base":
            return {}
        if name not in self.spec.recipes:
            raise ConfigError(self.source, key, f"one of {[*sorted(self.spec.recipes), 'base']}", name)
        return dict(self.spec.recipes[name])


def available_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def load_scenario(scenario: str | Path) -> Scenario:
    """A built-in scenario by name, or a scenario file by path; validated, recipes resolved."""
    path = Path(scenario)
    if not path.suffix and not path.exists():
        path = SCENARIO_DIR / f"{scenario}.yaml"
        if not path.exists():
            raise ConfigError(
                str(scenario), "", f"a scenario name ({', '.join(available_scenarios())}) or a file", scenario
            )
    source = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(source, "", "a readable scenario file", exc.strerror or str(exc)) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", "valid YAML", str(exc).splitlines()[0]) from exc
    if not isinstance(data, dict):
        raise ConfigError(source, "", "a mapping with servers:", type(data).__name__)
    try:
        spec = ScenarioFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = ".".join(str(part) for part in error["loc"])
        raise ConfigError(
            source, key, error["msg"].removeprefix("Value error, "), error.get("input")
        ) from exc
    result = Scenario(path.stem, source, spec)
    for name, overrides in spec.recipes.items():
        resolve_server_args(overrides, f"{source}: recipes.{name}")
    return result


def _workload(scenario: Scenario, base: Workload, spec: WorkloadSpec | None, key: str) -> Workload:
    if spec is None:
        return base
    try:
        return base.changed(**spec.model_dump(exclude_none=True))
    except ValueError as exc:
        raise ConfigError(
            scenario.source, key, "a consistent workload", spec.model_dump(exclude_none=True), str(exc)
        ) from exc


def _load(scenario: Scenario, spec: LoadSpec, key: str) -> Load:
    try:
        return Load(concurrency=spec.concurrency, rate_rps=spec.rate_rps)
    except ValueError as exc:
        raise ConfigError(
            scenario.source, key, "one of concurrency or rate_rps", spec.model_dump(), str(exc)
        ) from exc


def expand_servers(scenario: Scenario, servers: int | None = None) -> list[ServerSpec]:
    """One ServerSpec per server; ``servers`` cycles the scenario's templates to that many."""
    spec = scenario.spec
    templates: list[tuple[ServerTemplate, str, int, int | None]] = []  # template, name, its index, port
    for i, template in enumerate(spec.servers):
        for k in range(template.count):
            name = template.name if template.count == 1 else f"{template.name}-{k}"
            templates.append((template, name, i, template.port + k if template.port else None))
    if servers is not None and servers != len(templates):
        width = max(3, len(str(servers - 1)))
        prefix = scenario.name.replace("_", "-")
        templates = [
            (
                templates[i % len(templates)][0],
                f"{prefix}-{i:0{width}d}",
                templates[i % len(templates)][2],
                None,
            )
            for i in range(servers)
        ]
    for what, values in (("names", [t[1] for t in templates]), ("ports", [t[3] for t in templates if t[3]])):
        repeated = sorted(str(v) for v, n in Counter(values).items() if n > 1)
        if repeated:
            raise ConfigError(scenario.source, "servers", f"unique server {what}", repeated)
    out = []
    for template, name, index, port in templates:
        key = f"servers.{index}"
        named = (
            spec.workloads.get(template.workload) if isinstance(template.workload, str) else template.workload
        )
        if isinstance(template.workload, str) and template.workload != "default" and named is None:
            raise ConfigError(
                scenario.source, f"{key}.workload", f"one of {sorted(spec.workloads)}", template.workload
            )
        workload = _workload(scenario, Workload(), named, f"{key}.workload")
        load = _load(scenario, template.load, f"{key}.load")
        recipe = scenario.recipe(template.recipe, f"{key}.recipe")
        context = int(resolve_server_args(recipe)["context_length"])
        if workload.isl + workload.osl > context:
            raise ConfigError(
                scenario.source,
                f"{key}.workload",
                f"isl + osl ≤ the context length {context}",
                workload.isl + workload.osl,
            )
        server = ServerSpec(
            name,
            template.name,
            template.deployment,
            dict(template.labels),
            recipe,
            workload,
            load,
            Timeline(),
            port,
        )
        out.append(server)
    _check_selectors(scenario)
    return [_with_timeline(scenario, s) for s in out]


def _selected(selector: str, server: ServerSpec) -> bool:
    if selector == "*":
        return True
    if selector.startswith(("deployment=", "deployment:")):
        return server.deployment == selector.split("=", 1)[-1].split(":", 1)[-1]
    return selector in (server.name, server.template)


def _check_selectors(scenario: Scenario) -> None:
    """Every phase selector must name something the scenario defines (whatever ``servers`` does)."""
    known = {"*"}
    for template in scenario.spec.servers:
        known |= {template.name, f"deployment={template.deployment}", f"deployment:{template.deployment}"}
        known |= {f"{template.name}-{k}" for k in range(template.count)} if template.count > 1 else set()
    for index, phase in enumerate(scenario.spec.phases):
        for selector in phase.servers:
            if selector not in known:
                raise ConfigError(
                    scenario.source,
                    f"phases.{index}.servers",
                    "names, templates, deployment=X or *",
                    selector,
                )


def _with_timeline(scenario: Scenario, server: ServerSpec) -> ServerSpec:
    actions: list[Action] = []
    context = int(resolve_server_args(server.recipe)["context_length"])
    for index, phase in enumerate(scenario.spec.phases):
        key = f"phases.{index}"
        if any(_selected(sel, server) for sel in phase.servers):
            phase_actions = _phase_actions(scenario, server, phase, key)
            _check_context(scenario, server.workload, phase_actions, context, key)
            actions += phase_actions
    actions.sort(key=lambda a: a.at_s)
    return ServerSpec(
        server.name,
        server.template,
        server.deployment,
        server.labels,
        server.recipe,
        server.workload,
        server.load,
        Timeline(tuple(actions), scenario.spec.loop_s),
        server.port,
    )


def _check_context(
    scenario: Scenario, workload: Workload, actions: list[Action], context: int, key: str
) -> None:
    """A phase must not push prompt + output past the model's context length (SGLang rejects those)."""
    for action in actions:
        if action.kind == "workload":
            tokens = action.changes.get("isl", workload.isl) + action.changes.get("osl", workload.osl)
            if tokens > context:
                raise ConfigError(scenario.source, key, f"isl + osl ≤ the context length {context}", tokens)


def _phase_actions(scenario: Scenario, server: ServerSpec, phase: PhaseSpec, key: str) -> list[Action]:
    at, out = phase.at_s, []
    if phase.load is not None:
        changes = phase.load.model_dump(exclude_none=True)
        _load(scenario, LoadSpec(**{**{"concurrency": None, "rate_rps": None}, **changes}), f"{key}.load")
        out.append(Action(at, "load", changes))
        if phase.until_s is not None:
            out.append(
                Action(
                    phase.until_s,
                    "load",
                    {"concurrency": server.load.concurrency, "rate_rps": server.load.rate_rps},
                )
            )
    if phase.workload is not None:
        changes = phase.workload.model_dump(exclude_none=True)
        _workload(scenario, server.workload, phase.workload, f"{key}.workload")
        out.append(Action(at, "workload", changes))
        if phase.until_s is not None:
            baseline = {name: getattr(server.workload, name) for name in changes}
            out.append(Action(phase.until_s, "workload", baseline))
    if phase.ramp is not None:
        out += _ramp_actions(phase.ramp, at)
    if phase.fault is not None:
        fault = None if phase.fault == "none" else phase.fault
        out.append(Action(at, "fault", fault=fault, fault_delay_s=phase.fault_delay_s))
        if phase.until_s is not None:
            out.append(Action(phase.until_s, "fault", fault=None))
    if phase.restart:
        restart = phase.restart if isinstance(phase.restart, RestartSpec) else RestartSpec()
        # Onto the named recipe (or the server's own), plus any overrides.
        recipe = (
            server.recipe
            if restart.recipe is None
            else scenario.recipe(restart.recipe, f"{key}.restart.recipe")
        )
        overrides = {**recipe, **restart.overrides}
        resolve_server_args(overrides, f"{scenario.source}: {key}.restart")
        out.append(Action(at, "restart", overrides, boot_s=restart.boot_s))
    return out


def _ramp_actions(ramp: RampSpec, at_s: float) -> list[Action]:
    steps = max(2, math.ceil(ramp.over_s / RAMP_STEP_S) + 1)
    out = []
    for i in range(steps):
        x = i / (steps - 1)
        load: dict[str, Any] = {}
        work: dict[str, Any] = {}
        for name, target in (("isl", work), ("osl", work), ("concurrency", load), ("rate_rps", load)):
            pair = getattr(ramp, name)
            if pair is None:
                continue
            a, b = pair
            value = (
                a * (b / a) ** x if a > 0 and b > 0 else a + (b - a) * x
            )  # geometric: context grows by octaves
            target[name] = value if name == "rate_rps" else round(value)
        when = at_s + x * ramp.over_s
        if load:
            out.append(Action(when, "load", load))
        if work:
            out.append(Action(when, "workload", work))
    return out
