"""Every page through AppTest on the seed-fleet history: the numbers a reader sees are the seed's numbers.

Expected values are computed here from the fixture's constants (tests/views/seed_fleet.py), never copied from
a page run.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from alerts.rules import capacity_thresholds
from tests.views import seed_fleet as fx
from tests.views.conftest import SeedCase, page_test

OpenPage = Callable[[str], AppTest]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def markdown(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in at.markdown)


def frames_with(at: AppTest, *columns: str) -> list[pd.DataFrame]:
    """The tables with all these columns, in page order (AppTest exposes no key on a plain table)."""
    found = [element.value for element in at.dataframe]
    return [f for f in found if set(columns) <= set(f.columns)]


def frame(at: AppTest, *columns: str) -> pd.DataFrame:
    tables = frames_with(at, *columns)
    assert tables, f"no table with columns {columns}"
    return tables[0]


def chart_data(at: AppTest) -> list[list[pd.DataFrame]]:
    """Per vega-lite chart on the page, the DataFrames the browser receives (Arrow-decoded)."""
    charts = []
    for element in at.get("vega_lite_chart"):
        proto: Any = element.proto
        json.loads(proto.spec)  # a valid spec
        charts.append([pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in proto.datasets])
    return charts


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def times(x: float) -> str:
    return f"{x:.2f}×"


# -- Fleet ---------------------------------------------------------------------------------------------------
def test_fleet_totals_are_the_sum_of_the_servers_up(open_page: OpenPage) -> None:
    at = open_page("fleet")
    assert_clean(at)
    up = fx.up_servers()
    shown = metrics(at)
    assert shown["Servers up"] == f"{len(up)} / {len(up) + 3}"  # + down, stale, configured-but-never-seen
    assert shown["Output"] == f"{sum(s.output_tok_s for s in up.values()):,.0f} tok/s"
    running, cap = sum(s.running for s in up.values()), 48 * len(up)
    assert shown["Running / cap"] == f"{running:,.0f} / {cap:,.0f}"
    assert shown["Queued"] == f"{sum(s.queued for s in up.values()):,.0f}"
    assert shown["Accept length (median)"] == f"{statistics.median(s.accept for s in up.values()):.2f}"
    assert shown["Down / stale"] == "1 / 2"
    assert shown["Firing alerts"] == "1"
    assert "k3-down-1" in at.warning[0].value
    assert fx.DOWN_ERROR in at.warning[0].value


def test_fleet_table_rows(open_page: OpenPage) -> None:
    at = open_page("fleet")
    table = frame(at, "server", "status", "running_cap").set_index("server")
    assert list(table.index[:3]) == ["k3-down-1", "k3-stale-1", fx.CONFIGURED_ONLY]  # trouble first
    east = table.loc["k3-east-1"]
    assert east["status"].endswith("up")
    assert east["accept_length"] == fx.DEFAULT_48.accept
    assert east["step_latency_ms"] == fx.DEFAULT_48.step_s * 1000
    assert east["running_cap"] == "48 / 48"
    assert east["firing_alerts"] == 1
    assert east["alerts"] == fx.FIRING[0]
    assert east["state_pool_usage"] == pytest.approx(fx.DEFAULT_48.state * 100)  # shown as a percent
    assert table.loc["k3-down-1", "status"].endswith("down")
    assert table.loc["k3-stale-1", "status"].endswith("stale")
    assert table.loc[fx.CONFIGURED_ONLY, "status"].endswith("no data")
    assert table.loc["k3-radix-1", "deployment"] == "east"


def test_fleet_filters_and_the_output_chart(open_page: OpenPage) -> None:
    at = open_page("fleet")
    [series] = chart_data(at)[0]
    now_total = sum(s.output_tok_s for s in fx.up_servers().values())
    assert series["output_tok_s"].iloc[-1] == pytest.approx(now_total)
    # An hour ago k3-west-1 still ran the default recipe, and k3-down-1 and k3-stale-1 were serving too.
    before = now_total - fx.TUNED_48.output_tok_s + 3 * fx.DEFAULT_48.output_tok_s
    assert series["output_tok_s"].iloc[0] == pytest.approx(before)
    at.multiselect(key="fleet_status").set_value(["down"]).run()
    assert list(frame(at, "server", "status", "running_cap")["server"]) == ["k3-down-1"]
    at.multiselect(key="fleet_status").set_value([]).run()
    at.multiselect(key="fleet_deployment").set_value(["west"]).run()
    assert set(frame(at, "server", "status", "running_cap")["server"]) == {
        "k3-west-1",
        "k3-down-1",
        fx.CONFIGURED_ONLY,
        *fx.CTX,
    }


def test_choosing_a_server_opens_its_page(open_page: OpenPage) -> None:
    at = open_page("fleet")
    at.selectbox(key="fleet_open").set_value("k3-east-2").run()
    assert_clean(at)
    assert at.query_params["server"] == "k3-east-2"
    assert "**k3-east-2**" in markdown(at)
    assert metrics(at)["Accept length"] == f"{fx.TUNED_48.accept:.2f}"


# -- Server --------------------------------------------------------------------------------------------------
def server_page(seed_case: SeedCase, target: str) -> AppTest:
    at = page_test(seed_case.config_path, "server")
    at.query_params["server"] = target
    return at.run()


def test_server_page_shows_the_fraction(seed_case: SeedCase) -> None:
    at = server_page(seed_case, "k3-east-1")
    assert_clean(at)
    load = fx.DEFAULT_48
    shown = metrics(at)
    assert shown["Accept length"] == f"{load.accept:.2f}"
    assert shown["Step latency"] == f"{load.step_s * 1000:.1f} ms"
    assert shown["Per request"] == f"{load.accept / load.step_s:.1f} tok/s"
    assert shown["Running / cap"] == "48 / 48"
    assert shown["Queued"] == f"{load.queued:.0f}"
    assert shown["State pool"] == f"{load.state * 100:.0f} %"
    assert shown["KV cache"] == f"{load.kv * 100:.0f} %"
    assert fx.FIRING[0] in at.warning[0].value
    data = chart_data(at)
    assert len(data) == 11  # the fraction, latency, load and memory, then energy and cost
    accept = data[0][0]
    assert set(accept["accept_length"].round(3)) == {load.accept}
    assert len(accept) == int(fx.HISTORY_S // fx.STEP_S)  # every sample of the hour, none above the cap


def test_server_page_marks_restarts_and_recipe_changes(seed_case: SeedCase) -> None:
    at = server_page(seed_case, "k3-west-1")
    assert_clean(at)
    events = frame(at, "kind", "detail")
    assert list(events["kind"]) == ["recipe_change"]
    assert fx.TUNED.recipe_id in events["detail"].iloc[0]
    markers = [df for chart in chart_data(at) for df in chart if "kind" in df]
    assert markers
    assert set(markers[0]["kind"]) == {"recipe_change"}
    at = server_page(seed_case, "k3-east-2")
    markers = [df for chart in chart_data(at) for df in chart if "kind" in df]
    assert set(markers[0]["kind"]) == {"restart", "alert"}  # the restart and the resolved alert's transitions


# -- Context -------------------------------------------------------------------------------------------------
def test_context_page_splits_the_long_context_loss(open_page: OpenPage) -> None:
    at = open_page("context")
    assert_clean(at)
    short, long = fx.CTX["k3-ctx-1k"], fx.CTX["k3-ctx-64k"]
    step = long.step_s / short.step_s
    accept = short.accept / long.accept
    measured = fx.per_request(short) / fx.per_request(long)
    shown = metrics(at)
    assert shown["Measured"] == times(measured)
    assert shown["Step latency"] == times(step)
    assert shown["Accept length"] == times(accept)
    assert shown["Predicted"] == times(step * accept)
    assert shown["Residual"] == times(measured / (step * accept))
    assert "**1K–2K context** is **6.35×** faster" in markdown(at)
    fit = frames_with(at, "trend", "per doubling")[0].set_index("recipe")
    assert fit.loc[fx.TUNED.recipe_id, "trend"] == "falling"
    batch = frames_with(at, "trend", "per doubling")[1].set_index("recipe")
    assert batch.loc[fx.TUNED.recipe_id, "trend"] == "flat"  # seed §08: batch is noise, context a mechanism
    assert "**Flat** within ±10%" in markdown(at)


def test_context_page_splits_two_time_windows_at_the_recipe_change(open_page: OpenPage) -> None:
    at = open_page("context")
    at.segmented_control(key="split_mode").set_value("two time windows").run()
    at.selectbox(key="split_target").set_value("k3-west-1").run()
    assert_clean(at)
    before, after = fx.DEFAULT_48, fx.TUNED_48
    shown = metrics(at)
    assert shown["Measured"] == times(fx.per_request(before) / fx.per_request(after))
    assert shown["Accept length"] == times(before.accept / after.accept)
    assert shown["Step latency"] == times(after.step_s / before.step_s)
    assert "**before** is **1.68×** slower" in markdown(at)


# -- Capacity ------------------------------------------------------------------------------------------------
def test_capacity_page_says_which_pool_binds(open_page: OpenPage) -> None:
    at = open_page("capacity")
    assert_clean(at)
    up = fx.up_servers()
    binds_at = capacity_thresholds().state_pool_binds_at  # StatePoolSaturation.fire_at: page and alert agree
    binding = [name for name, load in up.items() if load.state >= binds_at]
    shown = metrics(at)
    assert shown["State pool binds"] == f"{len(binding)} / {len(up)}"
    assert shown["KV binds"] == f"0 / {len(up)}"
    text = markdown(at)
    assert f"The state pool binds on {len(binding)} of {len(up)} servers up" in text
    assert "would not help: it trades token budget" in text
    assert (
        f"Recipe `{fx.RADIX.recipe_id}` runs the radix cache on 1 server(s) at a 3% prefix hit rate" in text
    )
    table = frame(at, "binding", "headline").set_index("server")
    assert table.loc["k3-radix-1", "binding"] == "state pool"
    assert table.loc["k3-ctx-1k", "binding"] == "none"
    assert table.loc["k3-down-1", "binding"] == "unknown"


# -- Recipes -------------------------------------------------------------------------------------------------
def test_recipes_page_compares_at_matched_concurrency_and_context(open_page: OpenPage) -> None:
    at = open_page("recipes")
    assert_clean(at)
    overview = frame(at, "server names").set_index("recipe")
    assert overview.loc[fx.TUNED.recipe_id, "servers"] == 1 + 1 + len(fx.CTX) + len(fx.BATCH)
    diff = frame(at, "flag")
    assert list(diff["flag"]) == ["speculative_dspark_block_size"]
    assert (
        at.selectbox(key="recipe_cell")
        .format_func(at.selectbox(key="recipe_cell").value)
        .startswith("running 33–64 · context 8K–16K")
    )
    fast, slow = fx.TUNED_48, fx.DEFAULT_48
    shown = metrics(at)
    assert shown["Throughput"] == times(fx.per_request(fast) / fx.per_request(slow))  # the seed's 1.68×
    assert shown["Accept length"] == times(fast.accept / slow.accept)  # gives up 15% of the numerator
    assert shown["Step latency"] == times(slow.step_s / fast.step_s)  # for a 2.01× cheaper denominator
    assert shown["Verdict"] == "A faster"


def test_recipes_page_says_within_noise(open_page: OpenPage) -> None:
    at = open_page("recipes")
    at.selectbox(key="recipe_b").set_value(fx.BF16.recipe_id).run()
    assert_clean(at)
    assert list(frame(at, "flag")["flag"]) == ["mamba_ssm_dtype"]
    shown = metrics(at)
    assert shown["Throughput"] == times(
        fx.BF16_48.output_tok_s / fx.TUNED_48.output_tok_s
    )  # seed §07: +1.24%
    assert shown["Verdict"] == "within noise"
    assert "within noise** (±10% run-to-run)" in markdown(at)
    at.number_input(key="recipe_noise").set_value(1).run()
    assert metrics(at)["Verdict"] == "B faster"


# -- Alerts --------------------------------------------------------------------------------------------------
def test_alerts_page_lists_firing_pending_and_resolved(open_page: OpenPage) -> None:
    at = open_page("alerts")
    assert_clean(at)
    assert metrics(at) == {"Firing": "1", "Pending": "1", "Resolved, last 1 h": "1"}
    firing = frames_with(at, "rule", "state", "since_ts")[0]
    assert list(firing["rule"]) == [fx.FIRING[0]]
    assert list(firing["target"]) == [fx.FIRING[1]]
    pending = frames_with(at, "rule", "state", "since_ts")[1]
    assert list(pending["rule"]) == [fx.PENDING[0]]
    resolved = frame(at, "rule", "from_state", "to_state")
    assert list(resolved["rule"]) == [fx.RESOLVED[0]]
    [[timeline]] = chart_data(at)
    assert set(timeline["kind"]) == {"pending", "firing", "resolved"}
