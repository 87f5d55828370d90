"""A Grafana (≥ 10) dashboard of the recorded signals, rendered from the catalogue so it cannot drift.

Every panel reads the series the recording rules write (``collectors.prometheus.queries.recordings``: one per
``instance``/``job``); the template variables (``deployment``, ``instance``, ``recipe``) filter them through
the raw running-requests series, whose labels carry the target labels and any ``--extra-metric-labels``
(where the Prometheus source reads recipes too, see ``recipes.py``). ``check_dashboard`` is the ``--check``
mode: every series a query names must be recorded by the rules or read by them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collectors.model import RECIPE_FLAGS
from collectors.prometheus.grafana_slo import is_recorded, slo_rows
from collectors.prometheus.queries import SignalQueries, signal_queries
from collectors.prometheus.recipe_labels import LABEL_ALIASES
from collectors.slo import Slo, build_slos
from config.errors import ConfigError
from config.settings import Config

# The recipe flag used as the `recipe` variable: the DSpark verify window is what the seed's recipes differ
# in (block size 3 "shipped" vs 7 "default"). Any flag of RECIPE_FLAGS given as a label works.
DEFAULT_RECIPE_LABEL = "speculative_dspark_block_size"
NO_TRAFFIC = "No traffic"
UID = "specwatch-fleet"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
VARIABLES = ("deployment", "instance", "recipe")

_RECORDED = re.compile(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b")  # level:metric:operations
_RAW = re.compile(r"(?<![\w:])sglang(?:\[:_\]|:|_)([a-z_]+)")  # not the middle of a recorded name


@dataclass(frozen=True, slots=True)
class Series:
    """One query of a panel: a catalogue signal, its legend, and whether idle servers show "No traffic"."""

    signal: str
    legend: str
    needs_traffic: bool = True


@dataclass(frozen=True, slots=True)
class Graph:
    title: str
    unit: str
    description: str
    series: tuple[Series, ...]


# Traffic-dependent signals are hidden on idle servers: an idle server's accept length, step latency and
# throughput are unknown, not zero (and SGLang's gauges keep their last busy value).
GRAPHS: tuple[tuple[str, tuple[Graph, ...]], ...] = (
    (
        "The fraction: throughput = accepted tokens per step / step latency",
        (
            Graph(
                "Accept length",
                "none",
                "Tokens each request gains per verify step (the numerator).",
                (Series("accept_length", "{{instance}}"),),
            ),
            Graph(
                "Step latency",
                "s",
                "Wall time of one verify step = accept length × TPOT (the denominator).",
                (Series("step_latency_s", "{{instance}}"),),
            ),
            Graph(
                "Per-request throughput",
                "short",
                "Tokens per second one request sees = accept length / step latency = 1 / TPOT.",
                (Series("per_request_tok_s", "{{instance}}"),),
            ),
            Graph(
                "Server throughput",
                "short",
                "Generated tokens per second, per server.",
                (Series("output_tok_s", "{{instance}}"),),
            ),
        ),
    ),
    (
        "Capacity",
        (
            Graph(
                "State pool vs KV",
                "percentunit",
                "On hybrid SSM models the recurrent-state (Mamba) pool binds first: a full state pool with "
                "KV far from full means short of state slots, not cache.",
                (
                    Series("state_pool_usage", "state pool {{instance}}", needs_traffic=False),
                    Series("kv_usage", "KV {{instance}}", needs_traffic=False),
                ),
            ),
            Graph(
                "Running and queued (cap: max_running_requests in the table)",
                "short",
                "Requests running and waiting. SGLang exposes --max-running-requests only as a label "
                "(--extra-metric-labels), so the cap is a column of the per-server table.",
                (
                    Series("running", "running {{instance}}", needs_traffic=False),
                    Series("queued", "queued {{instance}}", needs_traffic=False),
                ),
            ),
        ),
    ),
    (
        "Latency",
        (
            Graph(
                "TTFT",
                "s",
                "Mean time to first token over the rate window.",
                (Series("ttft_s", "{{instance}}"),),
            ),
            Graph(
                "TPOT",
                "s",
                "Mean inter-token latency over the rate window.",
                (Series("tpot_s", "{{instance}}"),),
            ),
        ),
    ),
    (
        "Energy and cost (DCGM exporter; cost.gpu_hour_usd)",
        (
            Graph(
                "GPU power",
                "watt",
                "Power of each server's GPUs: the rate of DCGM's energy counter, summed over the GPUs of its "
                "node (prometheus.node_label = gpu_node_label).",
                (Series("gpu_power_w", "{{instance}}", needs_traffic=False),),
            ),
            Graph(
                "Output tokens per joule",
                "short",
                "Output tok/s ÷ GPU watts: 0 while a server idles (energy spent, nothing generated).",
                (Series("tokens_per_joule", "{{instance}}", needs_traffic=False),),
            ),
            Graph(
                "Cost per million output tokens",
                "currencyUSD",
                "cost.gpu_hour_usd × GPUs ÷ output tokens per hour × 1e6; no value while idle.",
                (Series("usd_per_million_tokens", "{{instance}}"),),
            ),
            Graph(
                "Output tok/s per GPU",
                "short",
                "Decode throughput ÷ the server's GPUs (the fleet's lane of the recipes' Pareto).",
                (Series("output_tok_s_per_gpu", "{{instance}}"),),
            ),
        ),
    ),
)

# The per-server table: (signal, column, unit, needs traffic).
TABLE: tuple[tuple[str, str, str, bool], ...] = (
    ("accept_length", "Accept length", "none", True),
    ("step_latency_s", "Step latency", "s", True),
    ("per_request_tok_s", "Per-request tok/s", "short", True),
    ("output_tok_s", "Server tok/s", "short", True),
    ("running", "Running", "short", False),
    ("queued", "Queued", "short", False),
    ("state_pool_usage", "State pool", "percentunit", False),
    ("kv_usage", "KV", "percentunit", False),
    ("ttft_s", "TTFT", "s", True),
    ("tpot_s", "TPOT", "s", True),
    ("gpu_power_w", "GPU W", "watt", False),
    ("tokens_per_joule", "tok/J", "short", False),
    ("usd_per_million_tokens", "$/Mtok", "currencyUSD", True),
)


def _no_traffic() -> dict[str, Any]:
    # noValue covers a panel with no series at all; the null mapping covers an empty table cell.
    return {
        "noValue": NO_TRAFFIC,
        "mappings": [
            {"type": "special", "options": {"match": "null+nan", "result": {"text": NO_TRAFFIC, "index": 0}}}
        ],
    }


class _Builder:
    """Turns catalogue signals into panel queries for one fleet (selector, rate window, recipe label)."""

    def __init__(self, queries: SignalQueries, recipe_label: str) -> None:
        self.queries = queries
        self.recipe_label = recipe_label
        self.records = {r.signal: r.record for r in queries.recordings()}

    def labelled(self, *variables: str) -> str:
        """The raw running-requests series, narrowed by the given template variables."""
        labels = {"deployment": "deployment", "instance": "instance", "recipe": self.recipe_label}
        narrow = ", ".join(f'{labels[v]}=~"${v}"' for v in variables)
        return SignalQueries(self.queries.selector, self.queries.rate_window_s, narrow=narrow).labelled()

    def expr(self, signal: str, needs_traffic: bool) -> str:
        chosen = f"group by (instance, job) ({self.labelled(*VARIABLES)})"
        expr = f"{self.records[signal]} and on (instance, job) {chosen}"
        if needs_traffic:
            expr += f" and on (instance, job) ({self.records['running']} > 0)"
        return expr

    def variable(self, name: str, label: str, *narrow: str) -> dict[str, Any]:
        query = f"label_values({self.labelled(*narrow)}, {label})"
        return {
            "name": name,
            "label": name if name != "recipe" else f"recipe ({self.recipe_label})",
            "type": "query",
            "datasource": DATASOURCE,
            "definition": query,
            "query": {"query": query, "refId": f"{name}-values"},
            "refresh": 2,  # on time range change: new servers appear without reloading
            "includeAll": True,
            "allValue": ".*",
            "multi": True,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1,
        }


def _graph(builder: _Builder, graph: Graph, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": graph.unit, "custom": {"drawStyle": "line", "spanNulls": False}}
    if any(s.needs_traffic for s in graph.series):
        defaults.update(_no_traffic())
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": graph.title,
        "description": graph.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": builder.expr(s.signal, s.needs_traffic),
                "legendFormat": s.legend,
                "range": True,
                "instant": False,
            }
            for i, s in enumerate(graph.series)
        ],
    }


def _table(builder: _Builder, panel_id: int, y: int) -> dict[str, Any]:
    columns = [column for column in TABLE if column[0] in builder.records]  # no price: no cost column
    targets = [
        {
            "refId": chr(ord("A") + i),
            "datasource": DATASOURCE,
            "expr": builder.expr(signal, traffic),
            "format": "table",
            "instant": True,
            "range": False,
        }
        for i, (signal, _, _, traffic) in enumerate(columns)
    ]
    cap = {
        "refId": chr(ord("A") + len(columns)),
        "datasource": DATASOURCE,
        # The cap and the recipe are labels, not values: show them as columns of the labelled series.
        "expr": f"group by (instance, job, {builder.recipe_label}, max_running_requests) "
        f"({builder.labelled(*VARIABLES)})",
        "format": "table",
        "instant": True,
        "range": False,
    }
    rename = {f"Value #{t['refId']}": column for t, (_, column, _, _) in zip(targets, columns, strict=True)}
    overrides = [
        {
            "matcher": {"id": "byName", "options": column},
            "properties": [{"id": "unit", "value": unit}]
            + ([{"id": key, "value": value} for key, value in _no_traffic().items()] if traffic else []),
        }
        for _, column, unit, traffic in columns
    ]
    return {
        "id": panel_id,
        "type": "table",
        "title": "Per server",
        "description": f"Latest value of each signal; {NO_TRAFFIC} where a server runs no request.",
        "datasource": DATASOURCE,
        "gridPos": {"h": 10, "w": 24, "x": 0, "y": y},
        "fieldConfig": {"defaults": {}, "overrides": overrides},
        "options": {"showHeader": True, "cellHeight": "sm"},
        "targets": [*targets, cap],
        "transformations": [
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True, f"Value #{cap['refId']}": True},
                    "renameByName": {**rename, "max_running_requests": "Cap (max_running_requests)"},
                },
            },
        ],
    }


def dashboard(
    queries: SignalQueries, *, recipe_label: str = DEFAULT_RECIPE_LABEL, slos: Sequence[Slo] = ()
) -> dict[str, Any]:
    """The dashboard JSON (a mapping) for one fleet's selector and rate window, with a row per SLO."""
    builder = _Builder(queries, recipe_label)
    panels: list[dict[str, Any]] = []
    y = 0
    panel_id = 1
    for row_title, every_graph in GRAPHS:
        # A graph of a series the rules do not record (no price: no cost series) is left out.
        graphs = [g for g in every_graph if all(s.signal in builder.records for s in g.series)]
        row = {"id": panel_id, "type": "row", "title": row_title, "collapsed": False, "panels": []}
        panels.append({**row, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        panel_id, y = panel_id + 1, y + 1
        for index, graph in enumerate(graphs):
            panels.append(_graph(builder, graph, panel_id, 12 * (index % 2), y + 8 * (index // 2)))
            panel_id += 1
        y += 8 * ((len(graphs) + 1) // 2)
    panels.append(_table(builder, panel_id, y))
    slo_panels, panel_id, y = slo_rows(slos, panel_id + 1, y + 10)
    panels += slo_panels
    return {
        "uid": UID,
        "title": "specwatch: SGLang speculative decoding",
        "description": "Generated by `specwatch export grafana` from specwatch's signal catalogue; "
        "load the recording rules (`specwatch export recording-rules`, same config) into Prometheus.",
        "tags": ["specwatch", "sglang"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                builder.variable("deployment", "deployment"),
                builder.variable("recipe", recipe_label, "deployment"),
                builder.variable("instance", "instance", "deployment", "recipe"),
            ]
        },
        "panels": panels,
    }


def recipe_labels() -> tuple[str, ...]:
    """The labels the Prometheus source reads recipe flags from (``recipe_labels.recipe_from_labels``)."""
    return tuple(label for flag in RECIPE_FLAGS for label in LABEL_ALIASES.get(flag, (flag,)))


def render_dashboard(
    config: Config, *, source: str = "<config>", recipe_label: str = DEFAULT_RECIPE_LABEL
) -> str:
    """The dashboard as JSON text for ``config`` (its prometheus.selector and rate window); ConfigError when
    ``recipe_label`` is not a label the Prometheus source reads a recipe flag from."""
    if recipe_label not in recipe_labels():
        raise ConfigError(
            "--recipe-label",
            "recipe label",
            "a recipe flag label: " + ", ".join(recipe_labels()),
            recipe_label,
        )
    board = dashboard(
        signal_queries(config, source=source), recipe_label=recipe_label, slos=build_slos(config, source)
    )
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


# -- the --check mode ----------------------------------------------------------------------------------------
def queries_of(board: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and query variable of a dashboard mapping."""

    def walk(panels: Any) -> Iterator[tuple[str, str]]:
        for panel in panels if isinstance(panels, list) else []:
            if not isinstance(panel, Mapping):
                continue
            title = panel.get("title", f"id {panel.get('id')}")
            for target in panel.get("targets") or []:
                if isinstance(target, Mapping) and isinstance(target.get("expr"), str):
                    yield f"panel {title!r} (query {target.get('refId', '?')})", target["expr"]
            yield from walk(panel.get("panels"))

    yield from walk(board.get("panels"))
    templating = board.get("templating")
    for variable in templating.get("list", []) if isinstance(templating, Mapping) else []:
        if isinstance(variable, Mapping) and variable.get("type") == "query":
            query = variable.get("query")
            text = query.get("query") if isinstance(query, Mapping) else query
            if isinstance(text, str):
                yield f"variable {variable.get('name')!r}", text


def check_dashboard(
    board: Mapping[str, Any], queries: SignalQueries, slos: Sequence[Slo] | None = None
) -> list[str]:
    """Problems in words: each query naming a recorded series the rules do not record, or an SGLang family
    the catalogue does not read. An empty list means every query names only series that will exist.
    ``slo:`` series are checked against the SLO groups of ``slos`` (None: anything Sloth's naming allows,
    for a dashboard checked without its SLOs)."""
    recorded = {r.record for r in queries.recordings()}
    read = set(_RAW.findall(" ".join(queries.signals().values()))) | {"num_running_reqs"}
    problems: list[str] = []
    found_any = False
    for where, expr in queries_of(board):
        found_any = True
        for name in sorted(set(_RECORDED.findall(expr)) - recorded):
            if name.startswith("slo:") and is_recorded(name, slos):
                continue
            problems.append(f"{where} names {name}, which the recording rules do not record")
        for family in sorted(set(_RAW.findall(expr)) - read):
            problems.append(f"{where} names sglang:{family}, which the signal catalogue does not read")
    if not found_any:
        problems.append("the dashboard has no panel queries (is it a Grafana dashboard JSON?)")
    return problems
