"""The parity table of docs/prometheus.md as data: what each page, CLI command and alert rule gives from the
direct source and from ``source: prometheus`` on one fleet, and how tests/prometheus/test_parity.py compares
it.

The rows drive the comparisons: a row whose Prometheus cell starts with "same" carries checks (a fast test
fails on one without), and the parity test runs every check on both engines. Every tile a page shows, every
field a command prints and every alert rule has a check in some row (the parity test fails on one without).
The doc's section between the ``parity-table`` markers is rendered from here (``python -m
tests.prometheus.parity_table`` rewrites it); tests/prometheus/test_parity_table.py fails while it is stale.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tests.prometheus.parity_checks import (
    CAPACITY_COLUMNS,
    COUNTS,
    FLEET_COLUMNS,
    GAUGE,
    GOODPUT,
    PROBE_MEASUREMENTS,
    RATE,
    RULES,
    SAMPLES,
    SIGNAL_GROUPS,
    TIE,
    TIE_WORDS,
    Check,
    Events,
    Field,
    Firing,
    Signals,
    Table,
    Tile,
    Words,
)

# The Capacity page's advice sentences (one per deployment): compared by the `capacity --json` rows.
ADVICE = ("- chat:", "- long:")
ADVICE_FIELDS = (
    "binding",
    "knee_running",
    "tok_s_per_server_at_knee",
    "context_bin",
    "demand_tok_s",
    "served_tok_s",
    "demand_req_s",
    "forecast_peak_tok_s",
    "forecast_peak_ts",
    "forecast_method",
    "servers_needed_now",
    "servers_needed_peak",
    "lower_bound",
    "slos_burning",
    "reason",
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "prometheus.md"
START, END = "<!-- parity-table:start -->", "<!-- parity-table:end -->"


@dataclass(frozen=True, slots=True)
class Row:
    feature: str
    direct: str
    prometheus: str  # "same…" when the checks prove it, else what this source gives instead
    why: str = ""
    checks: tuple[Check, ...] = ()

    @property
    def claims_same(self) -> bool:
        return self.prometheus.startswith("same")


def checks_of(kind: type[Check]) -> list[Check]:
    """Every check of one kind, in table order."""
    return [check for row in ROWS for check in row.checks if isinstance(check, kind)]


def _tiles(page: str, labels: str, rel: float = 0.0, mask: str = "") -> tuple[Tile, ...]:
    return tuple(Tile(page, label.strip(), rel, mask) for label in labels.split(","))


def _fields(command: str, names: str, rel: float = 0.0, *, known: bool = False) -> tuple[Field, ...]:
    return tuple(Field(command, name.strip(), rel, known) for name in names.split(","))


ROWS: tuple[Row, ...] = (
    # -- signals ---------------------------------------------------------------------------------------------
    Row(
        "Every catalogue signal (`collectors.model.SIGNAL_NAMES`), on every kind of server",
        "scraped /metrics, derived in Python",
        "same within 2 % (plain counter rates: "
        + ", ".join(f"`{n}`" for n in SIGNAL_GROUPS["rates"])
        + ", within 5 %)",
        "the catalogue rendered as PromQL; `PROMQL_APPROXIMATION`: `rate()` extrapolates to the window's "
        "edges, DP ranks are aggregated",
        (Signals(),),
    ),
    # -- pages -----------------------------------------------------------------------------------------------
    Row(
        "Fleet · Servers up, Running / cap, Queued, Accept length (median), Down / stale, Firing alerts",
        "the store's newest snapshots",
        "same",
        "cap from /server_info; down: `up == 0`; the firing alerts of each source's own engine",
        _tiles(
            "fleet", "Servers up, Running / cap, Queued, Accept length (median), Down / stale, Firing alerts"
        ),
    ),
    Row(
        "Fleet · Output, Step latency (median)",
        "",
        "same within 10 %, 2 %",
        RATE,
        (Tile("fleet", "Output", 0.1), Tile("fleet", "Step latency (median)", 0.02)),
    ),
    Row(
        "Fleet · the server table: status, deployment, firing, running / cap, queued, accept length, pools, "
        "context, recipe, alerts; step (ms), output tok/s",
        "the store's newest snapshots",
        "same; within 2 %, 10 %",
        RATE,
        (
            Table("fleet", FLEET_COLUMNS, 1e-6),
            Table("fleet", ("server", "step_latency_ms"), 0.02),
            Table("fleet", ("server", "output_tok_s"), 0.1),
        ),
    ),
    Row(
        "Fleet · SLO status (budget left, fastest burn, burning, firing per SLO and scope), banners",
        "the SLO tables",
        "same within 2 %",
        COUNTS + TIE_WORDS,
        (
            Table("fleet", ("slo", "scope", "budget_left", "fastest_burn", "burning", "firing"), 0.02, TIE),
            Words("fleet", besides=("broken",)),
        ),
    ),
    Row(
        "Fleet, Server, `collect --json` · why a server is down",
        "the scrape's own error (`HTTP 503 …`, `connection refused`)",
        "`Prometheus could not scrape it (up == 0 at its last scrape)`",
        "the query API says that a scrape failed, not why (Prometheus's /targets page does)",
        (Field("collect", "error", known=True),),
    ),
    Row(
        "Server · Accept length, Running / cap, Queued, State pool, KV cache; the header and explanations",
        "",
        "same",
        GAUGE,
        (
            *_tiles("server", "Accept length, Running / cap, Queued, State pool, KV cache"),
            Words("server", 0.05),
        ),
    ),
    Row(
        "Server · Step latency, Per request, Output",
        "",
        "same within 2 %, 2 %, 10 %",
        RATE,
        (*_tiles("server", "Step latency, Per request", 0.02), Tile("server", "Output", 0.1)),
    ),
    Row(
        "Server · GPUs; GPU power; Tokens per joule, Cost",
        "the node's DCGM exporter (`targets[].gpu_exporter_url`), scraped by specwatch",
        "same; within 5 % (the energy counter's rate: over one scrape here, a window there); 10 %",
        "the exporter's series joined on the node (`prometheus.gpu_selector`, `node_label`, "
        "`gpu_node_label`); energy per token and cost divide by the output rate: " + RATE,
        (
            Tile("server", "GPUs", 0.0),
            Tile("server", "GPU power", 0.05),
            *_tiles("server", "Tokens per joule, Cost", 0.1),
        ),
    ),
    Row(
        "Context · Predicted, Step latency, Accept length; Measured, Residual; the loss split in words",
        "means of the stored samples",
        "same within 2 %; 10 % (measured per request is output ÷ running, and so are the words comparing it)",
        "means of each source's samples (see below); " + RATE,
        (
            *_tiles("context", "Predicted, Step latency, Accept length", 0.02),
            *_tiles("context", "Measured, Residual", 0.1),
            Words("context", 0.1, mask=SAMPLES),
        ),
    ),
    Row(
        "Capacity · State pool binds, KV binds, State pool (median), KV (median), TTFT (median); the verdict "
        "and the per-server table (binds, pools, running / cap, queued, TTFT, prefix hit, verdict)",
        "",
        "same (TTFT within 2 %)",
        "the alert rules' levels on the same snapshots",
        (
            *_tiles("capacity", "State pool binds, KV binds, State pool (median), KV (median)"),
            Tile("capacity", "TTFT (median)", 0.02),
            Words("capacity", 0.05, besides=ADVICE),
            Table("capacity", CAPACITY_COLUMNS, 0.02),
        ),
    ),
    Row(
        "Recipes · Accept length, Step latency; Throughput; overview, flag diff and comparison in words",
        "",
        "same within 2 %; 10 %",
        "throughput is measured per request (output ÷ running): " + RATE,
        (
            *_tiles("recipes", "Accept length, Step latency", 0.02),
            Tile("recipes", "Throughput", 0.1),
            Words("recipes", 0.1, besides=("five-minute windows",)),
        ),
    ),
    Row(
        "Recipes · Verdict (and the bootstrap interval's sentence)",
        "the bootstrap call over five-minute windows of the stored samples",
        "the same call once each side holds enough windows",
        "the windows hold each source's samples: on a young fleet one side may call \u201cunsure\u201d "
        "where the other calls \u201cfaster\u201d",
        (Tile("recipes", "Verdict", compared=False),),
    ),
    Row(
        "Context, Recipes, Capacity · samples behind a mean",
        "every stored row (bucket means past the page's points per server)",
        "one point per step of max(range ÷ points, scrape interval)",
        "a range query answers a grid, not the scrapes: a young fleet has fewer samples from Prometheus "
        "(the analysis pages compare once both sides hold 10); the same means on a steady server",
    ),
    Row(
        "SLOs · Attainment, Error budget left, Fastest burn, Firing; why it burned, goodput in words",
        "the SLO tables",
        "same within 1 %, 2 %, 2 %; same",
        COUNTS + TIE_WORDS + "; goodput: see `slo --json`",
        (
            Tile("slo", "Attainment", 0.01),
            Tile("slo", "Error budget left", 0.02),
            Tile("slo", "Fastest burn", 0.02, TIE),
            Tile("slo", "Firing"),
            Words("slo", 0.05, mask=GOODPUT),
        ),
    ),
    Row(
        "Alerts · Firing, Pending, Resolved",
        "the alert engine's state in `store.path`",
        "same",
        "the alert state is specwatch's own in both modes",
        (Tile("alerts", "Firing"), Tile("alerts", "Pending"), Tile("alerts", "Resolved, last 15 min")),
    ),
    # -- alerts ----------------------------------------------------------------------------------------------
    Row(
        "Alert rules: " + ", ".join(r for r in RULES if r != "ErrorBudgetBurn"),
        "evaluated on the collector's snapshots",
        "same",
        "the same rules on the same snapshots (StatePoolSaturation and TargetDown fire on this fleet)",
        tuple(Firing(rule) for rule in RULES if rule != "ErrorBudgetBurn"),
    ),
    Row(
        "Alert rule ErrorBudgetBurn (per SLO, scope, severity)",
        "the ledger's per-scrape SLI events",
        "same",
        COUNTS + "; windows of an hour or more re-read at most once a minute",
        (Firing("ErrorBudgetBurn"),),
    ),
    # -- collect --json -------------------------------------------------------------------------------------
    Row(
        "`collect --json` · target, up, deployment, recipe, recipe_id",
        "",
        "same",
        "recipes from /server_info, read by specwatch in both modes",
        _fields("collect", "target, up, deployment, recipe, recipe_id"),
    ),
    Row(
        "`collect --json` · every signal but the plain counter rates",
        "gauges; ratios over the last interval (over a minute for counters that move at request completion)",
        "same within 2 %",
        "ratios of rates over the same scrapes do not depend on the windows' edges",
        (Field("collect", "signals", 0.02),),
    ),
    Row(
        "`collect --json` · plain counter rates",
        "the change between the last two cycles",
        "same within 25 %",
        "one scrape interval against the engine's newest rate window: either moves with a late scrape on a "
        "busy machine (the steady comparison is the catalogue row)",
        (Field("collect", "rates", 0.25),),
    ),
    Row(
        "`collect --json` · ts",
        "when specwatch scraped",
        "when specwatch queried",
        "",
        (Field("collect", "ts", known=True),),
    ),
    Row(
        "`collect --json` · scrape_duration_s",
        "specwatch's own scrape",
        "Prometheus's scrape (`scrape_duration_seconds`)",
        "another scraper's; known for the same targets",
        (Field("collect", "scrape_duration_s", known=True),),
    ),
    # -- specwatch slo --json ---------------------------------------------------------------------------
    Row(
        "`slo --json` · slo, scope, sli, objective, window_s, alerts, attribution, attribution_reason",
        "",
        "same",
        "scopes from the config's labels in both; the same history reader contract for the attribution",
        (
            *_fields("slo", "slo, scope, sli, objective, window_s, alerts, attribution_reason"),
            Field("slo", "attribution", 0.05),
        ),
    ),
    Row(
        "`slo --json` · attainment, error_budget_remaining, burn_rate",
        "",
        "same within 2 %",
        "`increase()` extrapolates to the window's edges",
        _fields("slo", "attainment, error_budget_remaining, burn_rate", 0.02),
    ),
    Row(
        "`slo --json` · good, total, covered_s",
        "events the collector counted since it started; from the oldest stored minute",
        "events Prometheus holds over the period (not whole numbers); from the oldest sample of the SLI's "
        "series, to the hour (to the scrape within two hours)",
        "each counts what it saw: their ratio is the same",
        _fields("slo", "good, total, covered_s", known=True),
    ),
    Row(
        "`slo --json` goodput · scope, slos, probe_goodput",
        "",
        "same",
        "probes are specwatch's own, stored in `store.path` in both modes",
        _fields("goodput", "scope, slos, probe_goodput"),
    ),
    Row(
        "`slo --json` goodput · goodput_rps, window_s",
        "the last 5 min's events ÷ 5 min (÷ the time since the first stored minute, when younger)",
        "the same once both hold five minutes",
        "in a store's first five minutes each divides by the time it holds, counted to the minute",
        _fields("goodput", "goodput_rps, window_s", known=True),
    ),
    # -- probes ----------------------------------------------------------------------------------------------
    Row(
        "`python -m collectors probe --once --json` · target, context_tokens, recipe_id, running, error",
        "",
        "same",
        "the recipe and the queue a probe backs off from are the source's; its own error is the server's",
        _fields("probe", "target, context_tokens, recipe_id, running, error"),
    ),
    Row(
        "`python -m collectors probe` · " + PROBE_MEASUREMENTS + ", ts, request_id",
        "measured by specwatch's own request",
        "measured the same way",
        "a probe goes to the server, not through the source; results stay in `store.path` (Prometheus never "
        "holds them)",
        _fields("probe", PROBE_MEASUREMENTS + ", ts, request_id", known=True),
    ),
    # -- specwatch capacity --json ---------------------------------------------------------------------------
    Row(
        "`capacity --json` · deployment, servers_up, servers, recipe, headroom",
        "",
        "same",
        "the servers up and their recipes from each source's newest snapshots",
        _fields("capacity", "deployment, servers_up, servers, recipe, headroom"),
    ),
    Row(
        "`capacity --json` · binding, knee_running, tok_s_per_server_at_knee, context_bin, demand_tok_s, "
        "served_tok_s, demand_req_s, forecast_peak_tok_s, forecast_peak_ts, forecast_method, "
        "servers_needed_now, servers_needed_peak, lower_bound, slos_burning, reason; the Capacity page's "
        "advice",
        "every stored sample of the last day (the knee), 5 minutes (demand), an hour or days (forecast)",
        "the same analysis on the engine's grid, once the engine holds the advice's windows",
        "one point per step (a day's curve: one a minute at most), where the store keeps every scrape; on a "
        "fleet younger than the windows (the parity test's: a minute) the grid holds too few busy samples "
        "for a context bin, and VictoriaMetrics counts a new series' first samples from zero (`rate()` at a "
        "series' start), so demand and the sentences differ until then",
        tuple(Field("capacity", name, compared=False) for name in ADVICE_FIELDS),
    ),
    # -- what the fleet's engine cannot know -----------------------------------------------------------------
    Row(
        "Recipe flags when /server_info cannot be read",
        "unknown (`recipe unknown: …`)",
        "the flags in `--extra-metric-labels` only (another recipe_id)",
        "/server_info is read by specwatch when reachable, in both modes",
    ),
    Row(
        "Restart, up and down events (the Server page's markers)",
        "the collector's own transitions",
        "same, from `resets()` and `up` at the read's step",
        "a target first seen down is a down event in both; a scrape that fails on one scraper only is a down "
        "and an up there; two restarts within one step are one event",
        (Events(("restart", "up", "down")),),
    ),
)


def _cell(text: str) -> str:
    return text.replace("|", r"\|").replace("\n", " ")


def render() -> str:
    """The table as the doc shows it (rows without a feature continue the row above: only checked)."""
    lines = ["| feature | direct | prometheus | how it differs and why |", "|---|---|---|---|"]
    for row in ROWS:
        if row.feature:
            cells = (row.feature, row.direct, row.prometheus, row.why)
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def section(text: str) -> str:
    """The doc's current table (between the markers)."""
    start, end = text.index(START) + len(START), text.index(END)
    return text[start:end].strip("\n")


def rewrite(path: Path = DOC) -> bool:
    """Put the rendered table between the markers; True when the file changed."""
    text = path.read_text(encoding="utf-8")
    start, end = text.index(START) + len(START), text.index(END)
    new = text[:start] + "\n" + render() + "\n" + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    print(f"{DOC}: {'rewritten' if rewrite() else 'up to date'}", file=sys.stderr)
