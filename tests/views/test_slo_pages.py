"""The SLO page, the Fleet's SLO status and ErrorBudgetBurn on the Alerts page, through AppTest on a known SLO
history (tests/views/seed_slo.py): every number shown is computed here from the seed's counts.
"""

from __future__ import annotations

import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from streamlit.testing.v1 import AppTest

from analysis.slo_budget import REPORT_WINDOWS_S
from collectors.model import TargetSnapshot
from collectors.slo import build_slos
from collectors.store.sqlite_store import SqliteStore
from config import parse_config
from tests.views import seed_slo as fx
from tests.views.conftest import page_test, write_config
from tests.views.test_pages import assert_clean, chart_data, frame, markdown, metrics
from views import data
from views.formatting import plain
from views.pages import slo as slo_page

# -- the expected numbers, from the seed's counts ------------------------------------------------------------
BAD_PER_MINUTE = {"tpot-40ms": fx.TPOT_BAD_WEST, "ttft-1s": fx.TTFT_BAD_WEST}


def minute_counts(slo: str, scope: str, k: int) -> tuple[float, float]:
    """(good, total) of minute ``k`` (0: the newest) of ``slo`` in ``scope``."""
    west_bad = BAD_PER_MINUTE[slo] if k < fx.BURN_MINUTES else 0.0
    west = (fx.PER_MINUTE - west_bad, fx.PER_MINUTE)
    east = (fx.PER_MINUTE, fx.PER_MINUTE)
    parts = {"": [east, west], "deployment=east": [east], "deployment=west": [west]}[scope]
    return sum(g for g, _ in parts), sum(t for _, t in parts)


def counts(slo: str, scope: str, minutes: int = fx.MINUTES) -> tuple[float, float]:
    found = [minute_counts(slo, scope, k) for k in range(min(minutes, fx.MINUTES))]
    return sum(g for g, _ in found), sum(t for _, t in found)


def burn(slo: str, scope: str, minutes: int) -> float:
    good, total = counts(slo, scope, minutes)
    return (total - good) / total / (1 - fx.OBJECTIVE)


def budget_left(slo: str, scope: str) -> float:
    return 1 - burn(slo, scope, fx.MINUTES)


WINDOW_MINUTES = {name: int(seconds // 60) for name, seconds in REPORT_WINDOWS_S.items()}
PAGE_FACTOR_1H = 14.4 * 28 / 30  # the workbook's 30-day factor, scaled to the 28-day default period


def empty_store_message(path: str) -> str:
    return (
        f"The history store `{path}` is empty: no collector has written to it yet. Start specwatch with "
        "targets (or `sim:`) in its config, or point `store.path` at a collector's file."
    )


def pct(x: float, digits: int) -> str:
    return f"{x * 100:.{digits}f} %"


# -- fixtures ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SloCase:
    config_path: Path
    store_path: Path


def slo_config(
    folder: Path, store_path: Path, slos: list[dict[str, object]] = fx.SLOS, interval_s: float = 5.0
) -> Path:
    """A viewer config on ``store_path`` with ``slos``."""
    config_path = write_config(folder / "specwatch.yaml", store_path, interval_s=interval_s)
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["slos"] = slos
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return config_path


@pytest.fixture
def slo_case(tmp_path: Path) -> SloCase:
    """Built per test: the page must run within 25 s of the seed (its rows sit mid-minute)."""
    store_path = tmp_path / "history.sqlite"
    fx.build(str(store_path), time.time())
    return SloCase(slo_config(tmp_path, store_path), store_path)


def open_slo(case: SloCase, **params: str) -> AppTest:
    at = page_test(case.config_path, "slo")
    for name, value in params.items():
        at.query_params[name] = value
    return at.run()


# -- the SLO page --------------------------------------------------------------------------------------------
def test_slo_page_whole_fleet_numbers(slo_case: SloCase) -> None:
    at = open_slo(slo_case)  # the first SLO (tpot-40ms), the whole fleet
    assert_clean(at)
    good, total = counts("tpot-40ms", "")
    shown = metrics(at)
    assert shown["Attainment"] == pct(good / total, 2)
    assert shown["Error budget left"] == pct(budget_left("tpot-40ms", ""), 1)
    assert shown["Fastest burn"] == f"{burn('tpot-40ms', '', 5):.2f}× (5m)"
    assert shown["Firing"] == "none"  # the page fires in deployment west only
    captions = [c.value for c in at.caption]
    assert any(
        f"over the 4 h stored of 28 d: {total:,.0f} events, {total - good:,.0f} bad" in c for c in captions
    )
    assert any("burning now: page, ticket." in c for c in captions)
    rates = frame(at, "window", "burn_rate").set_index("window")
    for name, minutes in WINDOW_MINUTES.items():
        assert rates.loc[name, "burn_rate"] == pytest.approx(burn("tpot-40ms", "", minutes))
    assert rates.loc["5m", "alert_factor"] == f"page > {PAGE_FACTOR_1H:.3g}×"
    conditions = frame(at, "severity", "long_rate", "holds")
    assert list(conditions["holds"]) == ["yes", "yes", "yes"]
    assert conditions["factor"].iloc[0] == pytest.approx(PAGE_FACTOR_1H)
    # TPOT = step ÷ accept: 30 ms ÷ 2.5 = 12 ms → 60 ms ÷ 1.5 = 40 ms; log shares of ×2 and ÷(5/3).
    step_share = math.log(2) / (math.log(2) + math.log(2.5 / 1.5))
    sentence = (
        f"TPOT 12 → 40 ms: {step_share:.0%} step latency \\(context 2.0K → 58K\\), "
        f"{1 - step_share:.0%} accept length \\(2.50 → 1.50\\)"
    )
    assert f"**Why it burned (last 15 min):** {sentence}" in markdown(at)


def test_slo_page_goodput_worst_servers_and_burn_down(slo_case: SloCase) -> None:
    at = open_slo(slo_case)
    # Last 5 min: lower = total − Σ bad over both latency SLOs, upper = the fewest good of one SLO.
    tpot_good, total = counts("tpot-40ms", "", 5)
    ttft_good, _ = counts("ttft-1s", "", 5)
    lower = (total - (total - tpot_good) - (total - ttft_good)) / 300
    upper = min(tpot_good, ttft_good) / 300
    assert (
        f"Goodput, last 5 min: between {lower:.2f} and {upper:.2f} req/s met every latency SLO of this "
        "scope (tpot-40ms, ttft-1s)."
    ) in markdown(at)
    worst = frame(at, "server", "bad", "total")
    assert list(worst["server"]) == ["k3-west-1"]  # east served no bad event
    assert worst["bad"].iloc[0] == 10 * 5 * fx.TPOT_BAD_WEST  # ten 5-minute buckets in the last hour
    assert worst["attainment"].iloc[0] == pytest.approx(100 * (1 - fx.TPOT_BAD_WEST / fx.PER_MINUTE))
    links = [(e.proto.page, e.proto.query_string) for e in at.get("page_link")]
    assert ("server", "server=k3-west-1") in links
    [burn_down] = [c for c in chart_data(at) if any("budget_left" in d.columns for d in c)]
    [series] = [d for d in burn_down if "time" in d.columns]  # beside it: the empty-budget rule
    assert len(series) == fx.MINUTES
    assert series["budget_left"].iloc[0] == pytest.approx(1.0)  # the oldest minute burned nothing
    assert series["budget_left"].iloc[-1] == pytest.approx(budget_left("tpot-40ms", ""))


def test_slo_page_deployment_scope_ttft_attribution_and_firing(slo_case: SloCase) -> None:
    at = open_slo(slo_case, slo="ttft-1s", scope="deployment=west")
    assert_clean(at)
    good, total = counts("ttft-1s", "deployment=west")
    shown = metrics(at)
    assert shown["Attainment"] == pct(good / total, 2)
    assert shown["Error budget left"] == pct(budget_left("ttft-1s", "deployment=west"), 1)
    assert shown["Fastest burn"] == f"{burn('ttft-1s', 'deployment=west', 5):.2f}× (5m)"
    # 10× over 1 h is under the page factor; over 6 h the ticket's 0.93× is exceeded.
    assert burn("ttft-1s", "deployment=west", 60) < PAGE_FACTOR_1H
    assert any("burning now: ticket." in c.value for c in at.caption)
    share = (0.9 - 0.1) / (1.5 - 0.5)
    assert (
        f"TTFT 500 ms → 1.5 s: {share:.0%} queueing \\(100 ms → 900 ms\\), "
        f"{1 - share:.0%} prefill and the rest"
    ) in markdown(at)
    tpot_good, west_total = counts("tpot-40ms", "deployment=west", 5)
    ttft_good, _ = counts("ttft-1s", "deployment=west", 5)
    lower = (tpot_good + ttft_good - west_total) / 300
    assert f"between {lower:.2f} and {min(tpot_good, ttft_good) / 300:.2f} req/s" in markdown(at)
    # The alert engine pages for tpot-40ms in west: its tile and the overview say so.
    at = open_slo(slo_case, slo="tpot-40ms", scope="deployment=west")
    assert metrics(at)["Firing"] == "page"
    overview = frame(at, "slo", "scope", "budget_left", "firing")
    west = overview[(overview["slo"] == "tpot-40ms") & (overview["scope"] == "deployment west")]
    assert list(west["firing"]) == ["page"]
    assert west["budget_left"].iloc[0] == round(100 * budget_left("tpot-40ms", "deployment=west"), 1)
    whole = overview[(overview["slo"] == "tpot-40ms") & (overview["scope"] == "whole fleet")]
    good, total = counts("tpot-40ms", "")
    assert f"{whole['attainment'].iloc[0]:.2f} %" == metrics(open_slo(slo_case))["Attainment"]  # as the tile
    assert whole["attainment"].iloc[0] == round(100 * good / total, 2)


def test_an_slo_without_events_is_unknown_not_perfect(slo_case: SloCase) -> None:
    at = open_slo(slo_case, slo="availability")
    assert_clean(at)
    shown = metrics(at)
    assert shown["Attainment"] == shown["Error budget left"] == shown["Fastest burn"] == "—"
    assert "unknown: no events in the last hour" in markdown(at)
    assert "No events in this period yet, so no budget spent." in [i.value for i in at.info]
    overview = frame(at, "slo", "scope", "attainment").set_index("slo")
    assert pd.isna(overview.loc["availability", "attainment"])


def test_slos_configured_but_no_events_yet(tmp_path: Path) -> None:
    store_path = tmp_path / "history.sqlite"  # never written: no SLO tables at all
    config_path = slo_config(tmp_path, store_path)
    at = page_test(config_path, "slo").run()
    assert_clean(at)
    assert [i.value for i in at.info] == [empty_store_message(str(store_path))]
    store = SqliteStore(str(store_path))  # a collector wrote history, but counted no SLO event yet
    store.append([TargetSnapshot("k3-east-1", time.time(), True, deployment="east")])
    store.close()
    data.clear_all_caches()  # as the next interval would: the empty count is cached
    at = page_test(config_path, "slo").run()
    assert_clean(at)
    [info] = [i.value for i in at.info]
    assert info.startswith("No SLO events yet for **tpot-40ms**, **ttft-1s**, **availability**.")
    assert not at.metric


def test_no_slo_configured_shows_how(tmp_path: Path) -> None:
    config_path = write_config(tmp_path / "specwatch.yaml", tmp_path / "history.sqlite")
    at = page_test(config_path, "slo").run()
    assert_clean(at)
    assert [i.value for i in at.info] == [slo_page.NO_SLOS]
    [snippet] = at.code
    # The snippet is a working config: three SLOs that pass validation (thresholds on bucket boundaries).
    slos = build_slos(parse_config(yaml.safe_load(snippet.value), "snippet"))
    assert [s.name for s in slos] == ["ttft-1s", "tpot-40ms", "availability"]


def test_an_slo_off_the_bucket_boundaries_stops_the_start_with_the_nearest_boundaries(tmp_path: Path) -> None:
    off_buckets: dict[str, object] = {"name": "ttft", "sli": {"kind": "ttft", "threshold_s": 0.75}}
    config_path = slo_config(tmp_path, tmp_path / "history.sqlite", [{**off_buckets, "objective": 0.99}])
    at = page_test(config_path, "slo").run()
    assert not at.exception
    [error] = [e.value for e in at.error]
    assert "specwatch cannot start: bad configuration." in error
    assert "slos.0: expected sli.threshold_s 0.75 is not a bucket boundary" in error
    assert "nearest: 0.6 and 0.8" in error


# -- the Fleet status and the Alerts page ------------------------------------------------------------------
def test_fleet_shows_each_slo_per_deployment(slo_case: SloCase) -> None:
    at = page_test(slo_case.config_path, "fleet").run()
    assert_clean(at)
    status = frame(at, "slo", "scope", "budget_left", "fastest_burn")
    rows = {(r.slo, r.scope): r for r in status.itertuples()}
    # Trouble first: what fires, what burns (least budget left first), then the rest; unknown last.
    assert list(rows) == [
        ("tpot-40ms", "deployment west"),
        ("tpot-40ms", "whole fleet"),
        ("ttft-1s", "deployment west"),
        ("ttft-1s", "whole fleet"),
        ("tpot-40ms", "deployment east"),
        ("ttft-1s", "deployment east"),
        ("availability", "whole fleet"),
    ]
    assert budget_left("tpot-40ms", "") < budget_left("ttft-1s", "deployment=west")
    west = rows[("tpot-40ms", "deployment west")]
    assert west.budget_left == round(100 * budget_left("tpot-40ms", "deployment=west"), 1)
    assert west.fastest_burn == f"{burn('tpot-40ms', 'deployment=west', 5):.2f}× (5m)"
    assert west.burning == "page, ticket"
    assert west.firing == "page"
    # The firing tile counts the SLO's page beside the servers' alerts (the seed fires none on a server).
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Firing alerts"] == "1"
    east = rows[("tpot-40ms", "deployment east")]
    assert (east.budget_left, east.fastest_burn, east.burning) == (100.0, "0.00× (5m)", "")
    assert pd.isna(rows[("availability", "whole fleet")].budget_left)  # no events: unknown, not 100 %
    assert ("slo", "") in [(e.proto.page, e.proto.query_string) for e in at.get("page_link")]


def test_fleet_without_slos_shows_no_slo_status(tmp_path: Path) -> None:
    config_path = write_config(tmp_path / "specwatch.yaml", tmp_path / "history.sqlite")
    fx.build(str(tmp_path / "history.sqlite"), time.time())
    at = page_test(config_path, "fleet").run()
    assert_clean(at)
    assert not [f for f in at.dataframe if "fastest_burn" in f.value.columns]
    assert not at.get("page_link")


def test_alerts_page_lists_error_budget_burn_with_slo_scope_and_attribution(slo_case: SloCase) -> None:
    at = page_test(slo_case.config_path, "alerts").run()
    assert_clean(at)
    firing = frame(at, "rule", "slo", "scope", "description")
    row = firing[firing["rule"] == "ErrorBudgetBurn"].iloc[0]
    assert (row["slo"], row["scope"], row["severity"]) == ("tpot-40ms", "deployment west", "page")
    assert row["summary"] == fx.ALERT_SUMMARY
    assert row["description"] == fx.ALERT_DESCRIPTION
    assert f"**tpot-40ms · deployment west** (page): {plain(fx.ALERT_DESCRIPTION)}" in markdown(at)
    links = [(e.proto.page, e.proto.query_string) for e in at.get("page_link")]
    assert ("slo", "slo=tpot-40ms&scope=deployment%3Dwest") in links


def test_without_an_alert_engine_or_per_server_counts_it_says_so(tmp_path: Path) -> None:
    store_path = tmp_path / "history.sqlite"
    fx.build(str(store_path), time.time(), alerts=False, per_server=False)
    case = SloCase(slo_config(tmp_path, store_path), store_path)
    at = open_slo(case, slo="tpot-40ms", scope="deployment=west")
    assert_clean(at)
    assert metrics(at)["Firing"] == "—"
    assert metrics(at)["Error budget left"] == pct(budget_left("tpot-40ms", "deployment=west"), 1)
    # No closed 5-minute bucket per server: neither the worst servers nor the attribution are known.
    assert "Bad events in the last hour, but no server's own counts stored yet" in " ".join(
        c.value for c in at.caption
    )
    assert "unknown: the servers behind the bad events are not known" in markdown(at)


def test_a_stale_link_opens_the_first_slo_and_scope(slo_case: SloCase) -> None:
    at = open_slo(slo_case, slo="renamed-slo", scope="deployment=gone")  # an SLO or scope no longer there
    assert_clean(at)
    assert at.selectbox(key="slo").value == "tpot-40ms"
    assert at.selectbox(key="scope").value == "whole fleet"
    assert metrics(at)["Attainment"] == pct(counts("tpot-40ms", "")[0] / counts("tpot-40ms", "")[1], 2)


def test_an_unreadable_slo_table_leaves_the_rest_of_the_fleet_page(tmp_path: Path) -> None:
    store_path = tmp_path / "history.sqlite"
    fx.build(str(store_path), time.time(), alerts=False)
    with sqlite3.connect(store_path) as connection:  # a table of that name, not the SLO store's
        connection.executescript("DROP TABLE slo_minutes; CREATE TABLE slo_minutes (x INTEGER);")
    connection.close()
    at = page_test(slo_config(tmp_path, store_path), "fleet").run()
    assert not at.exception
    [error] = [e.value for e in at.error]
    assert error.startswith("Cannot read history: SLO store")
    assert "read failed" in error
    assert set(frame(at, "server", "status", "running_cap")["server"]) == set(fx.DEPLOYMENTS)
