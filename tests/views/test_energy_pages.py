"""Energy and cost on the pages, through AppTest on the seed fleet: every server's GPUs draw a known power
(tests/views/seed_fleet.py: 2 GPUs × 1000 W, the radix server without telemetry) at a known price, so each
number a page shows is computed here from those constants."""

from __future__ import annotations

import math

import pytest

from tests.views import seed_fleet as fx
from tests.views.conftest import SeedCase
from tests.views.test_pages import OpenPage, assert_clean, chart_data, frame, metrics, server_page

POWER_W = 2 * fx.GPU_W
WEST = {"k3-west-1", *fx.CTX}  # the servers up in deployment west (seed_fleet.build); the rest are east


def usd(output_tok_s: float, gpus: float = 2.0) -> float:
    return fx.PRICE * gpus / (output_tok_s * 3600.0) * 1e6


def test_fleet_table_shows_watts_tokens_per_joule_and_cost(open_page: OpenPage) -> None:
    at = open_page("fleet")
    assert_clean(at)
    table = frame(at, "server", "status", "tokens_per_joule").set_index("server")
    east = table.loc["k3-east-1"]
    assert east["gpu_power_w"] == POWER_W
    assert east["tokens_per_joule"] == pytest.approx(fx.DEFAULT_48.output_tok_s / POWER_W)
    assert east["usd_per_million_tokens"] == pytest.approx(usd(fx.DEFAULT_48.output_tok_s))
    tuned = table.loc["k3-east-2"]
    assert tuned["tokens_per_joule"] == pytest.approx(1.68 * east["tokens_per_joule"])  # the seed's 1.68×
    # No GPU telemetry: no watts, no tok/J — but a GPU count and a price, so a cost.
    radix = table.loc["k3-radix-1"]
    assert math.isnan(radix["gpu_power_w"])
    assert math.isnan(radix["tokens_per_joule"])
    assert radix["usd_per_million_tokens"] == pytest.approx(usd(fx.RADIX_LOAD.output_tok_s))
    assert math.isnan(table.loc["k3-down-1", "usd_per_million_tokens"])  # down: unknown, never 0


def test_server_page_shows_energy_tiles_and_charts(seed_case: SeedCase) -> None:
    at = server_page(seed_case, "k3-east-2")
    assert_clean(at)
    shown = metrics(at)
    assert shown["GPUs"] == "2"
    assert shown["GPU power"] == f"{POWER_W:,.0f} W"
    assert shown["Tokens per joule"] == f"{fx.TUNED_48.output_tok_s / POWER_W:.3f} tok/J"
    assert shown["Cost"] == f"{usd(fx.TUNED_48.output_tok_s):,.2f} $/Mtok"
    series = {
        column: frame_
        for chart in chart_data(at)
        for frame_ in chart
        for column in ("tokens_per_joule", "usd_per_million_tokens")
        if column in frame_
    }
    assert set(series["tokens_per_joule"]["tokens_per_joule"].round(6)) == {
        round(fx.TUNED_48.output_tok_s / POWER_W, 6)
    }
    assert series["usd_per_million_tokens"]["usd_per_million_tokens"].to_list() == pytest.approx(
        [usd(fx.TUNED_48.output_tok_s)] * len(series["usd_per_million_tokens"])
    )


def test_capacity_page_prices_each_deployment(open_page: OpenPage) -> None:
    at = open_page("capacity")
    assert_clean(at)
    cost = frame(at, "deployment", "usd_per_hour").set_index("deployment")
    up = fx.up_servers()
    for deployment in ("east", "west"):
        servers = {name: load for name, load in up.items() if (name in WEST) == (deployment == "west")}
        gpus = 2.0 * len(servers)
        output = sum(load.output_tok_s for load in servers.values())
        metered = [load for load in servers.values() if load.gpu_w is not None]
        row = cost.loc[deployment]
        assert row["servers"] == len(servers)
        assert row["gpus"] == gpus
        assert row["usd_per_hour"] == pytest.approx(fx.PRICE * gpus)
        assert row["usd_per_million_tokens"] == pytest.approx(fx.PRICE * gpus / (output * 3600) * 1e6)
        assert row["gpu_power_w"] == pytest.approx(POWER_W * len(metered))
        assert row["tokens_per_joule"] == pytest.approx(
            sum(load.output_tok_s for load in metered) / (POWER_W * len(metered))
        )


def test_recipes_page_compares_energy_at_matched_concurrency(open_page: OpenPage) -> None:
    at = open_page("recipes")
    assert_clean(at)
    table = frame(at, "concurrency", "recipe", "tokens_per_joule")
    at_48 = table[table["concurrency"] == "33–64"].set_index("recipe")
    assert {fx.DEFAULT.recipe_id, fx.TUNED.recipe_id, fx.BF16.recipe_id} <= set(at_48.index)
    default, tuned = at_48.loc[fx.DEFAULT.recipe_id], at_48.loc[fx.TUNED.recipe_id]
    assert default["tokens_per_joule"] == pytest.approx(fx.DEFAULT_48.output_tok_s / POWER_W)
    assert tuned["tokens_per_joule"] == pytest.approx(fx.TUNED_48.output_tok_s / POWER_W)
    assert default["usd_per_million_tokens"] == pytest.approx(usd(fx.DEFAULT_48.output_tok_s))
    assert tuned["usd_per_million_tokens"] == pytest.approx(usd(fx.DEFAULT_48.output_tok_s) / 1.68)
    assert tuned["tok_s_per_gpu"] == pytest.approx(fx.TUNED_48.output_tok_s / 2)
    assert set(table["matched"]) == {True}  # only the bins two recipes share
