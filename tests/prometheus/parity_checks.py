"""The checks a row of the parity table carries (``parity_table``): what test_parity.py compares, and how."""

from __future__ import annotations

from dataclasses import dataclass

from collectors.signal_expr import refs_of
from collectors.signals import SIGNALS


def _moving_with_rates() -> tuple[str, ...]:
    """Plain counter rates, and what is derived from one (tokens per joule: output tok/s over the GPU energy's
    rate, read from another endpoint than the tokens)."""
    rates: list[str] = []
    for signal in SIGNALS:  # declared after what they refer to
        derived = signal.windowing == "derived" and signal.expr is not None
        if signal.windowing == "counter rate" or (derived and set(refs_of(signal.expr)) & set(rates)):
            rates.append(signal.name)
    return tuple(rates)


# The signal fields by how they compare: counter rates and what divides by them move with the windows'
# edges (one scrape interval in the direct source), the others do not (gauges, ratios of rates over the same
# scrapes).
SIGNAL_GROUPS: dict[str, tuple[str, ...]] = {
    "rates": _moving_with_rates(),
    "signals": tuple(s.name for s in SIGNALS if s.name not in _moving_with_rates()),
}


@dataclass(frozen=True, slots=True)
class Tile:
    """A page's headline tile (``st.metric``) by its label: the same text, or every number in it within
    ``rel`` (relative) and the rest of the text the same."""

    page: str
    label: str
    rel: float = 0.0
    mask: str = ""  # a regex of what is not compared (the window a tie of burn rates names)
    compared: bool = True  # False: shown by both, its value not claimed the same (the row says why)


@dataclass(frozen=True, slots=True)
class Words:
    """Every sentence a page says (markdown, info, warning, error), numbers within ``rel``; sentences about
    the targets in ``besides`` are compared by their own row."""

    page: str
    rel: float = 0.0
    besides: tuple[str, ...] = ()
    mask: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    """A table on a page, by the columns it has: the same rows (in any order), numbers within ``rel``."""

    page: str
    columns: tuple[str, ...]
    rel: float = 0.0
    mask: str = ""


@dataclass(frozen=True, slots=True)
class Field:
    """A field of a command's JSON lines (``collect``, ``slo`` or ``probe``), matched per line: the same
    value, numbers within ``rel``; ``known`` compares only whether it is known (null or not); ``compared``
    False: printed by both, not claimed the same (its row says why)."""

    command: str
    name: str
    rel: float = 0.0
    known: bool = False
    compared: bool = True


@dataclass(frozen=True, slots=True)
class Firing:
    """The alert engine's firing instances of ``rule`` (target or scope, severity) after the same cycles."""

    rule: str


@dataclass(frozen=True, slots=True)
class Signals:
    """Every catalogue signal of every server, from both sources at one moment (``SIGNAL_GROUPS``)."""


@dataclass(frozen=True, slots=True)
class Events:
    """The history's events of ``kinds`` over the range (the Server page's markers): same (target, kind)."""

    kinds: tuple[str, ...]


# What the rows name: fields, columns, rules, and what a comparison masks (regexes).
PROBE_MEASUREMENTS = (
    "prompt_tokens, completion_tokens, verify_ct, accept_length, step_latency_s, ttft_s, tpot_s, e2e_s"
)
SAMPLES = r"samples \(\d+ and \d+\)"  # how many samples each side has (the sources' grids differ)
GOODPUT = r"Goodput, last [^:]+: [\d.,]+ req/s"  # the window counted, and so the rate, in a young store
TIE = r"\(\w+\)"  # "(5m)": which window burns fastest, when several burn alike
TIE_WORDS = "; when windows burn alike, either may be named fastest"
GAUGE = "the same gauge, read at the last scrape"
RATE = (
    "the direct source's rate over one scrape interval against `rate()` over the rate window: a few % on a "
    "busy machine"
)
COUNTS = "Prometheus's counts: `increase()` per target, scoped by the config's labels"
FLEET_COLUMNS = (
    "server",
    "status",
    "deployment",
    "firing_alerts",
    "running_cap",
    "queued",
    "accept_length",
    "avg_context_tokens",
    "state_pool_usage",
    "kv_usage",
    "recipe",
    "alerts",
)
CAPACITY_COLUMNS = (
    "server",
    "binding",
    "state_pool_usage",
    "kv_usage",
    "running_cap",
    "queued",
    "ttft_s",
    "cache_hit_rate",
    "headline",
)
RULES = (
    "TargetDown",
    "StatePoolSaturation",
    "AcceptanceDecayWithContext",
    "KVPoolSaturation",
    "QueueBacklog",
    "AcceptLengthRegression",
    "RadixCacheWaste",
    "SourceDown",
    "ErrorBudgetBurn",
)


Check = Signals | Tile | Words | Table | Field | Firing | Events
