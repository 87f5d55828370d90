"""Which targets make up each SLO scope, for the engine's per-(SLO, scope) rules (ErrorBudgetBurn): a scope
whose targets are all down or stale is unknown (its alerts held), never healthy."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from alerts.window import TargetHistory
from collectors.slo import Slo


def scope_target(slo: Slo, scope_key: str) -> str:
    """What an SLO alert instance is about, in the place of a target: ``ttft-1s`` or
    ``ttft-1s deployment=east`` (the Alerts page and the notification's link show it)."""
    return f"{slo.name} {scope_key}" if scope_key else slo.name


def scope_members(
    histories: Mapping[str, TargetHistory],
    slos: Sequence[Slo],
    target_labels: Callable[[str], Mapping[str, str]] | None,
    now: float,
    *,
    stale_after_s: float,
) -> dict[tuple[str, str], list[bool]]:
    """Per (SLO, scope key): whether each of its targets is known now (up, vouched for and fresh). A target's
    labels are its configured ones plus its deployment, as the SLO ledger counts it."""
    out: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for target, history in histories.items():
        latest = history.latest
        if latest is None:
            continue
        known = latest.up and not latest.unknown and now - latest.ts <= stale_after_s
        labels = dict(target_labels(target)) if target_labels is not None else {}
        if history.deployment:
            labels.setdefault("deployment", history.deployment)
        for slo in slos:
            for scope in slo.scopes(labels):
                out[(slo.name, scope.key)].append(known)
    return out
