"""Which targets make up each SLO scope, for the engine's per-(SLO, scope) rules (ErrorBudgetBurn): a scope
whose targets are all down or stale is unknown (its alerts held), never healthy."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from alerts.window import TargetHistory
from collectors.slo import Scope, Slo

# Labels an ErrorBudgetBurn instance carries that are not its scope's (the scope's are e.g. deployment); the
# last three never come from the rule but are tolerated, so a relabelled copy still reads right.
NON_SCOPE_LABELS = frozenset(
    {"alertname", "slo", "severity", "long_window", "short_window", "target", "recipe_id", "source"}
)


def alert_scope(labels: Mapping[str, str]) -> Scope:
    """The scope an ErrorBudgetBurn instance is about: its labels but the rule's own (and empty ones); the
    CLI and the pages read it the same way."""
    return Scope(tuple(sorted((k, v) for k, v in labels.items() if k not in NON_SCOPE_LABELS and v)))


def scope_target(slo: Slo, scope_key: str) -> str:
    """What an SLO alert instance is about, in the place of a target: ``ttft-1s`` or
    ``ttft-1s deployment=east`` (the Alerts page and the notification's link show it)."""
    return f"{slo.name} {scope_key}" if scope_key else slo.name


ScopeCache = dict[str, tuple[Mapping[str, str], str, tuple[tuple[str, str], ...]]]


def scope_members(
    histories: Mapping[str, TargetHistory],
    slos: Sequence[Slo],
    target_labels: Callable[[str], Mapping[str, str]] | None,
    now: float,
    *,
    stale_after_s: float,
    cache: ScopeCache | None = None,
) -> dict[tuple[str, str], list[bool]]:
    """Per (SLO, scope key): whether each of its targets is known now (up, vouched for and fresh). A target's
    labels are its configured ones plus its deployment, as the SLO ledger counts it. ``cache`` keeps each
    target's (SLO, scope key) pairs while its labels are the same mapping (the collector hands out one per
    configured target; the cache holds it, so its identity cannot be reused) and deployment: 1,000 targets
    × 4 SLOs every evaluation otherwise."""
    cache = {} if cache is None else cache
    if len(cache) > 2 * len(histories) + 100:  # targets that left the fleet
        for gone in [t for t in cache if t not in histories]:
            del cache[gone]
    # Targets with the same scopes (a deployment's) share one pairs list: count per list, then per pair.
    groups: dict[int, tuple[tuple[tuple[str, str], ...], list[bool]]] = {}
    for target, history in histories.items():
        latest = history.latest
        if latest is None:
            continue
        known = latest.up and not latest.unknown and now - latest.ts <= stale_after_s
        configured = target_labels(target) if target_labels is not None else _NO_LABELS
        cached = cache.get(target)
        if cached is None or cached[0] is not configured or cached[1] != history.deployment:
            labels = dict(configured)
            if history.deployment:
                labels.setdefault("deployment", history.deployment)
            pairs = _interned(tuple((slo.name, scope.key) for slo in slos for scope in slo.scopes(labels)))
            cached = cache[target] = (configured, history.deployment, pairs)
        group = groups.get(id(cached[2]))
        if group is None:
            group = groups[id(cached[2])] = (cached[2], [])
        group[1].append(known)
    out: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for pairs, known_flags in groups.values():
        for pair in pairs:
            out[pair].extend(known_flags)
    return out


_INTERNED: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}


def _interned(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """One object per distinct pairs tuple, so targets of one deployment group by identity."""
    if len(_INTERNED) > 10_000:
        _INTERNED.clear()
    return _INTERNED.setdefault(pairs, pairs)


_NO_LABELS: Mapping[str, str] = {}
