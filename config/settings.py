"""Typed, frozen settings. Each field carries its default and help text (the README's config reference)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # YAML reads yes/no/true/on as booleans and lax pydantic would take them as 1/0 for a number
        # (`timeout_s: yes` → 1 s): refuse instead, so the key is named.
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = (annotation, *get_args(annotation))
            if bool not in kinds and (float in kinds or int in kinds):
                raise ValueError("a number, not true/false")
        return value


def _check_http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("an http:// or https:// URL")
    return value.rstrip("/")


class ScrapeSettings(_Settings):
    interval_s: float = Field(5.0, gt=0, le=3600, description="Seconds between scrape cycles.")
    timeout_s: float = Field(
        3.0, gt=0, le=120, description="Per-request timeout (connect + whole body), seconds."
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024, gt=1024, description="A /metrics or /server_info body larger than this is refused."
    )
    max_samples: int = Field(
        50_000,
        ge=100,
        description="A /metrics body with more samples than this is refused (the target's error).",
    )
    concurrency: int = Field(64, ge=1, le=1024, description="Targets scraped at once.")
    verify_tls: bool = Field(True, description="Verify HTTPS certificates of targets.")
    ca_bundle: str | None = Field(None, description="Path of a CA bundle used to verify HTTPS targets.")

    @field_validator("ca_bundle")
    @classmethod
    def _readable_bundle(cls, value: str | None) -> str | None:
        # Otherwise every HTTPS scrape fails later with a transport error that does not name this key.
        if value is not None and not Path(value).is_file():
            raise ValueError("the path of an existing PEM file")
        return value

    @model_validator(mode="after")
    def _timeout_fits_interval(self) -> ScrapeSettings:
        if self.timeout_s > self.interval_s:
            raise ValueError(f"timeout_s ({self.timeout_s}) must not exceed interval_s ({self.interval_s})")
        return self


LABEL_VALUE_MAX = 1024


class Target(_Settings):
    name: str = Field(min_length=1, max_length=200, description="Unique name of the SGLang server.")
    url: str = Field(
        description="The server's base URL (http://host:port); /metrics and /server_info hang off it."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels, e.g. {deployment: east}.")
    bearer_token_env: str | None = Field(
        None,
        description="Environment variable holding a bearer token for this server (never stored or shown).",
    )
    probe: bool = Field(
        False, description="Send this server active probes (POST /generate) when probes.enabled is on."
    )
    gpu_exporter_url: str | None = Field(
        None,
        description="The node's DCGM exporter (http://host:9400), scraped beside /metrics for GPU power and "
        "energy; null: no GPU telemetry.",
    )
    gpu_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Regexes on the exporter's labels picking this server's GPUs on a shared node, e.g. "
        '{gpu: "0|1"} or {pod: "k3-east-0"}; empty: every GPU the exporter shows.',
    )

    _url = field_validator("url")(_check_http_url)

    @field_validator("gpu_exporter_url")
    @classmethod
    def _exporter_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_http_url(value)

    @field_validator("gpu_labels")
    @classmethod
    def _label_regexes(cls, labels: dict[str, str]) -> dict[str, str]:
        # Checked at load: a bad pattern would otherwise make every cycle's GPU reading unknown.
        for name, pattern in labels.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"regular expressions ({name}: {exc})") from None
        return labels

    @field_validator("labels")
    @classmethod
    def _short_values(cls, labels: dict[str, str]) -> dict[str, str]:
        # The deployment label is stored with every row and every label is shown on every page: a 64 KiB value
        # (a pasted file?) would be 64 KiB a row. Refused at load, naming the label (issue 23).
        for name, value in labels.items():
            if len(value) > LABEL_VALUE_MAX:
                raise ValueError(
                    f"label values of at most {LABEL_VALUE_MAX} characters ({name} has {len(value)})"
                )
        return labels

    @property
    def deployment(self) -> str:
        return self.labels.get("deployment", "")


_DUPLICATES_SHOWN = 3


def _shown_url(url: str) -> str:
    """A target's URL as an error message may show it: no userinfo (a password), at most 100 characters."""
    netloc = urlsplit(url).netloc
    if "@" in netloc:
        url = url.replace(netloc, netloc.rpartition("@")[2], 1)
    return url if len(url) <= 100 else url[:100] + "…"


def describe_duplicates(targets: Sequence[tuple[str, Target]]) -> tuple[int, str] | None:
    """How many names repeat among ``targets`` (each with its position in words, e.g. ``targets[3]``) and a
    sentence naming the first two holders of the first few, with their URLs; None when all are unique.

    Issue 23: "repeated: k3-0" (or a whole document quoted back) left a 5,000-line file to be searched; the
    positions say where both are."""
    counts = Counter(target.name for _, target in targets)  # linear: 5,000 targets check in milliseconds
    repeated = [name for name, count in counts.items() if count > 1]
    if not repeated:
        return None
    wanted = set(repeated[:_DUPLICATES_SHOWN])
    holders: dict[str, list[tuple[str, Target]]] = {}
    for where, target in targets:
        if target.name in wanted and len(found := holders.setdefault(target.name, [])) < 2:
            found.append((where, target))
    parts = [
        f"{first} and {second} are both named {name!r} ({_shown_url(a.url)} and {_shown_url(b.url)})"
        for name, [(first, a), (second, b)] in holders.items()
    ]
    if len(repeated) > _DUPLICATES_SHOWN:
        parts.append(f"and {len(repeated) - _DUPLICATES_SHOWN} more repeated names")
    return len(repeated), "; ".join(parts)


def duplicate_error(count: int, detail: str) -> PydanticCustomError:
    """The validation error of repeated names (``config.loader`` turns it into a ``ConfigError``)."""
    return PydanticCustomError("unique_names", "{detail}", {"detail": detail, "count": count})


class StoreSettings(_Settings):
    path: str = Field(
        "data/history.sqlite", description="SQLite history file (WAL mode); created if missing."
    )
    retention_h: float = Field(168.0, gt=0, description="Hours of history kept; older rows are pruned.")
    raw_retention_h: float = Field(
        6.0,
        gt=0,
        description="Hours of raw per-scrape rows kept; beyond, the rollup tiers serve (≤ retention_h).",
    )
    minute_retention_h: float = Field(
        48.0, gt=0, description="Hours of the 1 min rollup tier kept; beyond, the coarser tiers serve."
    )


class DeliverySettings(_Settings):
    """How notifications reach their receivers (the same contract for every webhook and Alertmanager)."""

    timeout_s: float = Field(
        30.0, gt=0, le=600, description="Seconds one delivery attempt may take (connect + answer)."
    )
    backoff_initial_s: float = Field(1.0, gt=0, description="Wait after the first failed attempt, seconds.")
    backoff_max_s: float = Field(
        300.0, gt=0, description="Cap of the doubling wait between attempts, seconds."
    )
    max_attempts: int = Field(
        40, ge=1, le=10_000, description="Attempts before a notification is marked failed (kept, shown)."
    )
    max_age_s: float = Field(
        6 * 3600.0, gt=0, description="A notification still undelivered this long after it was queued fails."
    )
    group_by: tuple[str, ...] = Field(
        ("alertname", "deployment"),
        description="Labels grouping alerts into one webhook message, as Alertmanager's route group_by.",
    )
    max_payload_bytes: int = Field(
        256 * 1024, ge=4096, description="A notification body stays under this size (split otherwise)."
    )
    max_alerts_per_payload: int = Field(
        1000, ge=1, description="At most this many alerts in one notification body (split otherwise)."
    )

    @model_validator(mode="after")
    def _backoff_order(self) -> DeliverySettings:
        if self.backoff_initial_s > self.backoff_max_s:
            raise ValueError(
                f"backoff_initial_s ({self.backoff_initial_s}) must not exceed backoff_max_s "
                f"({self.backoff_max_s})"
            )
        return self


class AlertSettings(_Settings):
    webhook_urls: tuple[str, ...] = Field((), description="Receivers of Alertmanager-format webhook JSON.")
    alertmanager_url: str | None = Field(
        None, description="Alertmanager base URL; alerts POSTed to /api/v2/alerts."
    )
    evaluation_interval_s: float | None = Field(
        None, gt=0, description="Seconds between rule evaluations (default: the scrape interval)."
    )
    rules: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-rule overrides: alerts.rules.<RuleName>.<key>; names are fixed.",
    )
    delivery: DeliverySettings = Field(
        default_factory=DeliverySettings, description="Delivery timeout, retries, grouping and size limits."
    )

    @field_validator("webhook_urls")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_http_url(v) for v in value)

    @field_validator("alertmanager_url")
    @classmethod
    def _am_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_http_url(value)


class PrometheusSettings(_Settings):
    url: str = Field(description="Base URL of the fleet's Prometheus-compatible query API.")
    bearer_token_env: str | None = Field(None, description="Environment variable holding a bearer token.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra HTTP headers sent with each query."
    )
    selector: str = Field("", description='Label matchers picking the fleet\'s series, e.g. job="sglang".')
    timeout_s: float = Field(10.0, gt=0, description="Query timeout, seconds.")
    rate_window_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="rate() window, seconds (default max(4 × scrape.interval_s, 60)); cover ≥ 4 scrapes.",
    )
    use_recording_rules: bool = Field(
        False,
        description="History reads the series of `export-recording-rules` (load them into Prometheus first).",
    )
    downsample_s: float = Field(
        300.0,
        ge=1,
        le=86400,
        description="Resolution of the downsampled recordings `export-recording-rules` adds for the Fleet "
        "chart's long ranges (steps of 4× this or more, e.g. 7 d), read with use_recording_rules.",
    )
    latency_offset_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="How old a sample must be before the engine's answers about it are final: "
        "VictoriaMetrics' -search.latencyOffset (30 s by default); 0 for Prometheus. A live chart re-reads "
        "the instants newer than this (plus three scrape intervals) at every refresh.",
    )
    gpu_selector: str = Field(
        "",
        description='Label matchers picking the DCGM exporters\' series (DCGM_FI_DEV_*), e.g. job="dcgm".',
    )
    node_label: str = Field(
        "instance",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Label of the SGLang series naming the node its GPUs are on (instance: its host, port "
        "dropped).",
    )
    gpu_node_label: str = Field(
        "Hostname",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Label of the DCGM series naming their node, joined to node_label (instance: the "
        "exporter's host, port dropped).",
    )

    _url = field_validator("url")(_check_http_url)


class CostSettings(_Settings):
    gpu_hour_usd: float | None = Field(
        None,
        gt=0,
        le=10_000,
        description="What one GPU-hour costs, USD: $ per million output tokens = price × GPUs ÷ output "
        "tok/s; null: cost unknown.",
    )


class SimSettings(_Settings):
    scenario: str = Field("demo", description="Simulated fleet scenario (sim/scenarios/<name>.yaml).")
    speed: float = Field(1.0, gt=0, le=1000, description="Simulated seconds per wall second.")
    servers: int | None = Field(
        None, ge=1, le=2000, description="Number of servers (default: the scenario's)."
    )
    seed: int = Field(0, description="Random seed of the simulated workload.")
    history_h: float = Field(
        0.0,
        ge=0,
        le=400 * 24,
        description="Hours of simulated history written into an empty store at start (0: none; also "
        "`python -m sim history`).",
    )


class ExporterSettings(_Settings):
    listen: str | None = Field(
        "127.0.0.1:9464", description="host:port of the collector's own /metrics; null disables it."
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        # Checked at load, so a typo names the file and key instead of failing when the exporter starts.
        if value is not None:
            host, sep, port = value.rpartition(":")
            if not sep or not host or not port.isdigit() or int(port) > 65535:
                raise ValueError("host:port, e.g. 127.0.0.1:9464 (loopback unless you mean otherwise)")
        return value


class ProbeSettings(_Settings):
    enabled: bool = Field(False, description="Measure accept length vs context with probe requests.")
    context_tokens: tuple[int, ...] = Field(
        (1024, 8192, 32768, 65536),
        min_length=1,
        max_length=16,
        description="Prompt lengths (tokens) measured by each sweep, one /generate request each.",
    )
    max_new_tokens: int = Field(256, ge=16, le=8192, description="Output tokens per probe request.")
    interval_s: float = Field(600.0, ge=10, le=86400, description="Seconds between sweeps of one target.")
    max_tokens_per_hour: int = Field(
        2_000_000,
        ge=1,
        description="Budget per target (prompt + output tokens in the last hour); a sweep that would pass "
        "it is skipped.",
    )
    timeout_s: float = Field(120.0, gt=0, le=3600, description="Deadline of one probe request, seconds.")
    max_queued: int = Field(
        0, ge=0, description="Skip a target whose scheduler queue is longer than this (it is saturated)."
    )

    @field_validator("context_tokens")
    @classmethod
    def _positive_lengths(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(v < 16 or v > 1_048_576 for v in value):
            raise ValueError("prompt lengths between 16 and 1048576 tokens")
        return tuple(sorted(set(value)))


class DashboardSettings(_Settings):
    token_env: str | None = Field(
        None,
        description="Environment variable holding the dashboard's access token (default: "
        "SPECWATCH_DASHBOARD_TOKEN when set); no token, no gate. Never the token itself.",
    )
    oidc: bool = Field(
        False,
        description="Require Streamlit's st.login (OpenID Connect; [auth] in .streamlit/secrets.toml).",
    )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_DURATION_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_duration_s(text: str) -> float:
    """``28d``, ``6h``, ``30m``, ``90s``, ``4w`` → seconds; ValueError in words otherwise."""
    found = _DURATION.match(text)
    if found is None:
        raise ValueError("a duration such as 28d, 6h, 30m or 90s")
    return float(found.group(1)) * _DURATION_S[found.group(2)]


class BurnWindowSettings(_Settings):
    """One multi-window burn-rate condition: both windows' burn rates must exceed ``factor``."""

    long_s: float = Field(gt=0, le=400 * 86400, description="The long window, seconds (e.g. 3600).")
    short_s: float = Field(gt=0, description="The short window, seconds (e.g. 300); shorter than long_s.")
    factor: float = Field(gt=0, description="Burn rate (error ratio ÷ (1 − objective)) both must exceed.")

    @model_validator(mode="after")
    def _short_inside_long(self) -> BurnWindowSettings:
        if self.short_s >= self.long_s:
            raise ValueError(f"short_s ({self.short_s:g}) must be shorter than long_s ({self.long_s:g})")
        return self


class SloAlertingSettings(_Settings):
    page: tuple[BurnWindowSettings, ...] | None = Field(
        None,
        description="Page conditions (default: the SRE workbook's 14.4× over 1 h and 5 m, 6× over 6 h and "
        "30 m, scaled from 30 days to the SLO's window).",
    )
    ticket: tuple[BurnWindowSettings, ...] | None = Field(
        None, description="Ticket conditions (default: 1× over 3 d and 6 h, scaled to the SLO's window)."
    )
    min_events: float = Field(
        100.0,
        ge=0,
        description="Events needed in the long window before a burn can fire (a server with three requests "
        "an hour never pages).",
    )


SliKind = Literal["ttft", "tpot", "e2e", "availability"]

# SGLang's default histogram boundaries, seconds (sglang-metrics.md; --bucket-time-to-first-token,
# --bucket-inter-token-latency and --bucket-e2e-request-latency override them). A latency SLO's threshold must
# be one of them, or of the SLO's own ``buckets``: a count between two boundaries would be an interpolation.
TTFT_BOUNDARIES_S = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
TPOT_BOUNDARIES_S = (
    *(0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1),
    *(0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8),
)
E2E_BOUNDARIES_S = (*TTFT_BOUNDARIES_S, 600, 1200, 1800, 2400)
DEFAULT_BOUNDARIES_S: dict[str, tuple[float, ...]] = {
    "ttft": TTFT_BOUNDARIES_S,
    "tpot": TPOT_BOUNDARIES_S,
    "e2e": E2E_BOUNDARIES_S,
}


def boundary_of(value: float, boundaries: tuple[float, ...]) -> float | None:
    """The boundary ``value`` is (within float noise), or None."""
    return next((b for b in boundaries if abs(b - value) <= 1e-9 * max(abs(b), 1.0)), None)


def _nearest_words(value: float, boundaries: tuple[float, ...]) -> str:
    below = [b for b in boundaries if b < value]
    above = [b for b in boundaries if b > value]
    return " and ".join(
        f"{b:g}" for b in (max(below) if below else None, min(above) if above else None) if b is not None
    )


class SliSettings(_Settings):
    kind: SliKind = Field(description="ttft, tpot, e2e (latency under threshold_s) or availability.")
    threshold_s: float | None = Field(
        None,
        gt=0,
        description="Latency SLIs: a request is good at or under this many seconds (a histogram bucket "
        "boundary).",
    )

    @model_validator(mode="after")
    def _threshold_for_latency(self) -> SliSettings:
        if self.kind == "availability" and self.threshold_s is not None:
            raise ValueError("availability takes no threshold_s (it is 1 − aborted ÷ requests)")
        if self.kind != "availability" and self.threshold_s is None:
            raise ValueError(f"a {self.kind} SLI needs threshold_s (seconds, a histogram bucket boundary)")
        return self


class SloSettings(_Settings):
    name: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Unique name of the SLO (letters, digits, _ . : -).",
    )
    sli: SliSettings = Field(description="What a good event is: {kind, threshold_s}.")
    objective: float = Field(gt=0, lt=1, description="Share of good events promised, e.g. 0.99.")
    window: str = Field("28d", description="The SLO period over which the error budget is counted.")
    match: dict[str, str] = Field(
        default_factory=dict,
        description="Target labels selecting the fleet it covers (default: every target; per deployment "
        "too).",
    )
    buckets: tuple[float, ...] = Field(
        (),
        description="The servers' bucket boundaries for this SLI when not SGLang's defaults "
        "(--bucket-time-to-first-token custom …), seconds.",
    )
    alerting: SloAlertingSettings = Field(
        default_factory=SloAlertingSettings, description="Burn-rate alert conditions and traffic floor."
    )

    @model_validator(mode="after")
    def _threshold_is_a_boundary(self) -> SloSettings:
        threshold = self.sli.threshold_s
        if threshold is None:
            return self
        boundaries = self.buckets or DEFAULT_BOUNDARIES_S[self.sli.kind]
        if boundary_of(threshold, boundaries) is None:
            origin = "the SLO's buckets" if self.buckets else f"SGLang's default {self.sli.kind} buckets"
            raise ValueError(
                f"sli.threshold_s {threshold:g} is not a bucket boundary of {origin} (nearest: "
                f"{_nearest_words(threshold, boundaries)}); a count between two boundaries would be "
                "interpolated: pick a boundary, or declare the servers' own with buckets"
            )
        return self

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        seconds = parse_duration_s(value)
        if not 3600 <= seconds <= 400 * 86400:
            raise ValueError("a period between 1h and 400d")
        return value.strip()

    @property
    def window_s(self) -> float:
        return parse_duration_s(self.window)


class Config(_Settings):
    source: Literal["direct", "prometheus"] = Field("direct", description="Where signals come from.")
    scrape: ScrapeSettings = Field(default_factory=ScrapeSettings, description="Scrape timing and limits.")
    targets: tuple[Target, ...] = Field((), description="SGLang servers scraped by the direct source.")
    targets_file: str | None = Field(None, description="JSON/YAML list of targets, re-read when it changes.")
    store: StoreSettings = Field(default_factory=StoreSettings, description="History storage.")
    alerts: AlertSettings = Field(default_factory=AlertSettings, description="Alert rules and receivers.")
    prometheus: PrometheusSettings | None = Field(
        None, description="The fleet's Prometheus (source: prometheus)."
    )
    sim: SimSettings | None = Field(None, description="Start a simulated fleet in-process and scrape it.")
    exporter: ExporterSettings = Field(
        default_factory=ExporterSettings, description="The collector's /metrics."
    )
    dashboard: DashboardSettings = Field(
        default_factory=DashboardSettings, description="Who may see the dashboard."
    )
    probes: ProbeSettings = Field(
        default_factory=ProbeSettings,
        description="Active probes: accept length and step latency at fixed context lengths.",
    )
    slos: tuple[SloSettings, ...] = Field(
        (), description="Service-level objectives: error budgets and burn-rate alerts (docs/slo.md)."
    )
    cost: CostSettings = Field(
        default_factory=CostSettings, description="Prices: cost per output token (docs/collectors.md)."
    )

    @field_validator("targets")
    @classmethod
    def _unique_names(cls, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        # A field check (not in _consistent): the error is then at key "targets", not the whole document.
        found = describe_duplicates([(f"targets[{i}]", t) for i, t in enumerate(targets)])
        if found is not None:
            raise duplicate_error(*found)
        return targets

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        repeated = sorted(n for n, count in Counter(s.name for s in self.slos).items() if count > 1)
        if repeated:
            raise ValueError(f"SLO names must be unique; repeated: {', '.join(repeated)}")
        if self.source == "prometheus" and self.prometheus is None:
            raise ValueError("source: prometheus needs a prometheus: {url: ...} section")
        return self
