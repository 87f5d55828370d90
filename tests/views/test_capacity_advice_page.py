"""The Capacity page's "Servers needed per deployment" shows what ``specwatch capacity`` prints for the same
minute: every number of the table and every reason, on a simulated fleet written into a real store."""

from __future__ import annotations

import calendar
import math
import re
import time
from pathlib import Path

import pandas as pd
import pytest

from alerts import capacity_cli
from config import load_config
from tests.analysis import advice_fleet as af
from tests.views.conftest import page_test
from views.formatting import plain

NUMBERS = (
    "knee_running",
    "tok_s_per_server_at_knee",
    "demand_tok_s",
    "forecast_peak_tok_s",
    "servers_needed_now",
    "servers_needed_peak",
)


@pytest.fixture(scope="module")
def fleet_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("capacity-page")
    filled = af.fill(folder, "fleet", af.FLEET, af.FLEET_S / 3600.0, time.time(), window_s=af.STEP_S)
    return af.write_config(
        folder / "fleet.yaml", filled.store_path, targets=[{"name": "spare-1", "url": "http://127.0.0.1:9"}]
    )


def advice_table(frames: list[pd.DataFrame]) -> pd.DataFrame:
    (table,) = [f for f in frames if "servers_needed_now" in f.columns]
    return table


def test_the_page_shows_the_numbers_the_cli_prints(fleet_config: Path) -> None:
    at = page_test(fleet_config, "capacity").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    (caption,) = [str(c.value) for c in at.caption if "Advice only" in str(c.value)]
    found = re.search(r"As of (\d{4}-\d\d-\d\d \d\d:\d\d) UTC", caption)
    assert found is not None
    minute = calendar.timegm(time.strptime(found.group(1), "%Y-%m-%d %H:%M"))
    # The CLI's advice for the minute the page shows (it quantises to the same minute).
    records = [a.record() for a in capacity_cli.advise(load_config(fleet_config), now=minute)]
    table = advice_table([d.value for d in at.dataframe])
    assert list(table["deployment"]) == ["gone", "hot", "idle", "lab", "(no deployment label)"]
    for (_, row), record in zip(table.iterrows(), records, strict=True):
        assert row["servers_up"] == f"{record['servers_up']} / {record['servers']}"
        assert row["binding"] == (record["binding"] or "unknown")
        assert row["forecast_method"] == (record["forecast_method"] or "unknown")
        for key in NUMBERS:
            shown, printed = row[key], record[key]
            if printed is None:
                assert math.isnan(shown), (record["deployment"], key)  # a dash, never 0
            else:
                assert shown == pytest.approx(printed), (record["deployment"], key)
    reasons = "\n".join(str(m.value) for m in at.markdown)
    for record in records:
        assert f"- {plain(record['reason'])}" in reasons
    hot = table.set_index("deployment").loc["hot"]
    assert hot["servers_needed_now"] > int(hot["servers_up"].split(" / ")[0])
