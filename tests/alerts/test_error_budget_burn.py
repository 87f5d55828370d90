"""ErrorBudgetBurn in the engine, fed real SloLedgers with the scenario's per-scrape SLI events: the page
fires on the burning deployment only, a slow burn opens a ticket and never pages, a healthy scope and a
three-requests-an-hour server stay silent, no data suspends (never resolves), and a restart keeps the firing
state without notifying twice."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.model import AlertState
from alerts.rules import build_rules
from alerts.service import Service
from alerts.slo_cli import run as run_slo_cli
from config import ConfigError, parse_config
from tests.alerts import slo_scenario as scenario
from tests.alerts.conftest import Clock
from tests.alerts.slo_scenario import HOOK, Run, scope_of
from tests.collectors.mechanism_server import MechanismServer


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    run = Run(tmp_path_factory.mktemp("burn") / "alerts.sqlite")
    run.run(range(scenario.MINUTES + 1))
    yield run
    run.store.close()


def test_page_fires_on_the_burning_deployment_only(full_run: Run) -> None:
    assert {scope for severity, scope in full_run.fired() if severity == "page"} == {"deployment=east"}
    page = full_run.active("page", "deployment=east")
    assert page is not None
    assert page.state is AlertState.FIRING
    assert page.labels_dict == {
        "alertname": "ErrorBudgetBurn",
        "slo": "ttft-1s",
        "severity": "page",
        "long_window": "1h",
        "short_window": "5m",
        "deployment": "east",
    }
    notes = page.annotations_dict
    assert notes["summary"].startswith("ttft-1s (deployment east): error budget burning 30.0× over 1h")
    text = notes["description"]
    assert text.startswith("Requests whose time to first token is at most 1 s: objective 0.99 over 28d.")
    assert "30.0× over the last 1h and 30.0× over the last 5m" in text
    assert float(notes["burn_rate_long"]) == pytest.approx(30.0, rel=0.01)
    # The budget left over the period: 90 of 150 minutes at 30 % slow against a 1 % budget, overspent.
    assert float(notes["budget_remaining"]) < 0
    assert "of the budget is left" in text
    # No history store: the attribution says it cannot split, never a guess.
    assert notes.get("attribution_reason") is None or "no" in notes["attribution_reason"]


def test_ticket_without_page_on_a_slow_burn(full_run: Run) -> None:
    tickets = {scope for severity, scope in full_run.fired() if severity == "ticket"}
    assert "deployment=west" in tickets  # 3 % slow: 3× the budget, above the ticket's 0.93×
    assert ("page", "deployment=west") not in full_run.fired()  # and far below the page's 5.6×
    ticket = full_run.active("ticket", "deployment=west")
    assert ticket is not None
    assert ticket.labels_dict["long_window"] == "3d"
    assert "3.0× over the last 3d and 3.0× over the last 6h" in ticket.description


def test_nothing_on_a_healthy_scope_or_a_three_requests_an_hour_server(full_run: Run) -> None:
    scopes = {scope for _, scope in full_run.fired()}
    assert "deployment=south" not in scopes  # 0.5 % slow: half the budget
    assert "deployment=tiny" not in scopes  # a third slow, but 3 events an hour: below min_events (100)
    assert full_run.fired() == {
        ("page", "deployment=east"),
        ("ticket", "deployment=east"),
        ("ticket", "deployment=west"),
        ("ticket", ""),  # the whole fleet burns 3.7× once east does
    }


def test_webhooks_carry_the_slo_labels(full_run: Run) -> None:
    firing = [a for a in full_run.notified() if a["status"] == "firing"]
    labels = [a["labels"] for a in firing if isinstance(a["labels"], dict)]
    assert {
        "alertname": "ErrorBudgetBurn",
        "slo": "ttft-1s",
        "severity": "ticket",
        "long_window": "3d",
        "short_window": "6h",
    } in labels  # the whole fleet's ticket: no scope label at all
    assert len(firing) == 4  # each instance notified once, however many evaluations it kept firing


def test_no_data_suspends_and_never_resolves(tmp_path: Path) -> None:
    run = Run(tmp_path / "alerts.sqlite")
    run.run(range(90))
    assert run.active("page", "deployment=east") is not None
    east = [t for t in scenario.TARGETS if t.deployment == "east"]
    others = [t for t in scenario.TARGETS if t.deployment != "east"]
    for minute in range(90, 100):  # every east server down: its scope is unknown, not healthy
        run.step(
            minute,
            scenario.snapshots(minute, up=False, targets=tuple(east))
            + scenario.snapshots(minute, targets=tuple(others)),
        )
    page = run.active("page", "deployment=east")
    assert page is not None
    assert page.state is AlertState.FIRING
    assert page.suspended
    run.source_answers = False
    for minute in range(100, 110):  # the source blind: every scope held, the fleet's included
        run.step(minute)
    assert run.active("page", "deployment=east") is not None
    assert all(i.suspended for i in run.engine.active() if i.rule == "ErrorBudgetBurn")
    assert not [t for t in run.transitions if t.kind == "resolved" and t.rule == "ErrorBudgetBurn"]
    run.store.close()


def minutes_to_resolve(path: Path, **settings: object) -> float:
    """East burns for 30 minutes, then serves healthily: minutes until its page resolves."""
    run = Run(path, config=scenario.config(**settings))
    run.run(range(90))
    healthy = scenario.ScenarioTarget("east-0", "east", lambda m: (199.0, 200.0))
    others = tuple(t for t in scenario.TARGETS if t.deployment != "east")
    for minute in range(90, 140):
        run.step(minute, scenario.snapshots(minute, targets=(healthy, *others)))
    run.store.close()
    resolved = [t for t in run.transitions if t.kind == "resolved" and t.labels_dict["severity"] == "page"]
    assert [scope_of(t.labels_dict) for t in resolved] == ["deployment=east"]
    assert "error budget burning" in resolved[0].summary  # the resolution keeps the words that explained it
    return (resolved[0].ts - (scenario.T0 + 60 * 90)) / 60


def test_recovers_once_every_short_window_cools(tmp_path: Path) -> None:
    # Not when the 5 m window cooled (6h/30m still burned), but once the 30 m one did too: recover_below 1
    # is the workbook's reset, no hysteresis beyond the short windows.
    workbook = minutes_to_resolve(tmp_path / "a.sqlite")
    assert 10 < workbook < 30
    # recover_below 0.5: active until both windows drop under half the factor, so later.
    assert minutes_to_resolve(tmp_path / "b.sqlite", recover_below=0.5) > workbook


def test_a_restart_keeps_firing_and_does_not_notify_again(tmp_path: Path) -> None:
    first = Run(tmp_path / "alerts.sqlite")
    first.run(range(100))
    before = first.notified()
    assert ("page", "deployment=east") in first.fired()
    first.store.close()
    # A new process: the same alert store; the ledger rebuilt from the same minutes (its store in
    # production, replayed here).
    second = Run(tmp_path / "alerts.sqlite")
    for minute in range(100):
        second.ledger.observe(scenario.snapshots(minute))
    assert second.engine.restore() >= 3
    second.run(range(100, 110))
    page = second.active("page", "deployment=east")
    assert page is not None
    assert page.state is AlertState.FIRING
    assert not [t for t in second.transitions if t.kind == "firing"]
    assert second.notified() == before  # nothing queued again
    second.store.close()


# -- through the Service, on loopback servers whose histograms follow the mechanism -------------------------
def _service(path: Path, servers: dict[str, MechanismServer], clock: Clock) -> Service:
    raw = {
        "targets": [
            {"name": name, "url": server.url, "labels": {"deployment": name.split("-")[0]}}
            for name, server in servers.items()
        ],
        "store": {"path": str(path)},
        "exporter": {"listen": None},
        "alerts": {"webhook_urls": [HOOK]},
        "slos": [{"name": "ttft-1s", "sli": {"kind": "ttft", "threshold_s": 1}, "objective": 0.99}],
    }
    return Service(parse_config(raw, "test"), clock=clock, source="test")


def test_a_queueing_server_pages_its_deployment_with_the_reason_and_a_restart_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = {name: MechanismServer(seed=n) for n, name in enumerate(("east-a", "east-b", "west-a"))}
    clock = Clock(scenario.T0)
    path = tmp_path / "history.sqlite"
    service = _service(path, servers, clock)
    try:
        service.run_cycle()
        # 40 minutes healthy (a scrape every 2 minutes: the baseline the attribution compares with), then
        # east-a's queue grows for 20 minutes.
        for step in range(40):
            burning = step >= 20
            step_s = 60 if burning else 120
            for name, server in servers.items():
                slow = burning and name == "east-a"
                server.serve(step_s // 2, context_tokens=4096, queue_s=1.2 if slow else 0.05, prefill_s=0.3)
            clock.advance(step_s)
            service.run_cycle()
        firing = [i for i in service.engine.active() if i.rule == "ErrorBudgetBurn"]
        pages = {scope_of(i.labels_dict) for i in firing if i.severity == "page"}
        assert "deployment=east" in pages  # half of east's requests slow for 20 minutes: 17× over 1 h
        assert "deployment=west" not in pages
        east = next(i for i in firing if i.severity == "page" and i.deployment == "east")
        # Which half of the fraction burned it: TTFT = queue + prefill, and only the queue grew.
        why = r"Why: TTFT \d+ ms → [\d.]+ m?s: 100% queueing \(50 ms → [\d.]+ m?s\), 0% prefill"
        assert re.search(why, east.description), east.description
        assert float(east.annotations_dict["attribution_queue"]) == pytest.approx(1.0, abs=0.05)
        notified = len(service.alert_store.deliveries(1000, receiver=HOOK))
    finally:
        service.stop()
    # `specwatch slo --json` reads the firing severities from the alert store by the same labels.
    assert run_slo_cli(service.config, json_lines=True, now=clock.now) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    alerts = {json.dumps(line["scope"]): line["alerts"] for line in lines if "slo" in line}
    assert "page" in alerts['{"deployment": "east"}']
    assert "page" not in alerts['{"deployment": "west"}']
    # A new process on the same store: the SLO counts and the alert states come back, nothing re-sent.
    again = _service(path, servers, clock)
    try:
        for name, server in servers.items():
            server.serve(30, context_tokens=4096, queue_s=1.2 if name == "east-a" else 0.05, prefill_s=0.3)
        restarted_at = clock.now
        for _ in range(2):
            clock.advance(60)
            again.run_cycle()
        transitions = again.alert_store.transitions(restarted_at, clock.now + 1)
        assert not [t for t in transitions if t.kind == "firing"]
        page = next(i for i in again.engine.active() if i.severity == "page" and i.deployment == "east")
        # Evaluated again (the ledger came back from the SLO tables: the burn still holds), not just reloaded.
        assert page.state is AlertState.FIRING
        assert page.last_eval_ts == clock.now
        assert not page.suspended
        assert len(again.alert_store.deliveries(1000, receiver=HOOK)) == notified
    finally:
        again.stop()
        for server in servers.values():
            server.stop()


def test_severity_comes_from_the_condition_and_misconfiguring_it_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"alerts\.rules\.ErrorBudgetBurn\.severity: expected one of page"):
        build_rules({"ErrorBudgetBurn": {"severity": "critical"}})
    with pytest.raises(ConfigError, match=r"alerts\.rules\.ErrorBudgetBurn\.ticket_severity"):
        build_rules({"ErrorBudgetBurn": {"page_severity": "critical", "ticket_severity": "critical"}})
    # An Alertmanager routing on critical/warning: rename the two severities.
    run = Run(
        tmp_path / "a.sqlite", config=scenario.config(page_severity="critical", ticket_severity="warning")
    )
    run.run(range(scenario.MINUTES + 1))
    run.store.close()
    assert ("critical", "deployment=east") in run.fired()
    assert ("warning", "deployment=west") in run.fired()
    assert not {scope for severity, scope in run.fired() if severity == "critical"} - {"deployment=east"}
