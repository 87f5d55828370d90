"""History from Prometheus: the same frames, snapshots and events the views read from the embedded store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from collectors.errors import QueryError, StoreError
from collectors.model import Event, Recipe
from collectors.prometheus.promql_history import PrometheusHistory
from collectors.source import open_history
from collectors.store.sqlite_store import SqliteStore
from config import Config
from tests.history_frames import read_frame
from tests.prometheus.engines import Engine, StaticServer, free_port, source_config, wait_scraped

pytestmark = pytest.mark.engines


def _config(engine_url: str, labelled: StaticServer, tmp_path: Path) -> Config:
    config = source_config(engine_url, [("golden", labelled.url)])
    return config.model_copy(
        update={"store": config.store.model_copy(update={"path": str(tmp_path / "meta.db")})}
    )


@pytest.fixture
def history(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer], tmp_path: Path
) -> Iterator[PrometheusHistory]:
    labelled, _ = golden_servers
    opened = open_history(_config(golden_engine.url, labelled, tmp_path))
    assert isinstance(opened.store, PrometheusHistory)
    assert opened.source is not None  # a collector over this history is handed the source it reads through
    yield opened.store
    opened.close()


def test_samples_have_the_embedded_store_columns_and_the_served_values(
    history: PrometheusHistory, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    _, flaky = golden_servers
    end = time.time()
    frame = read_frame(history, end - 3, end, ["golden"])
    embedded = read_frame(SqliteStore(":memory:"), end - 3, end)
    assert list(frame.columns) == list(embedded.columns)
    assert set(frame["target"]) == {"golden"}  # asking for one target reads only that one
    assert 2 <= len(frame) <= 4  # one row per second (the scrape interval) in 3 s
    assert frame["up"].all()
    assert (frame["running"] == 41).all()
    assert frame["kv_usage"].to_list() == pytest.approx([0.2419] * len(frame))
    assert frame["state_pool_usage"].to_list() == pytest.approx([0.7314] * len(frame))
    assert set(frame["deployment"]) == {"east"}
    recipe_id = frame["recipe_id"].iloc[0]
    assert recipe_id is not None
    assert set(frame["recipe_id"]) == {recipe_id}
    assert history.recipes()[recipe_id].get("speculative_dspark_block_size") == 3
    everyone = read_frame(history, end - 3, end)
    assert set(everyone["target"]) == {"golden", flaky.netloc}
    # A page asking for two columns gets those two, as from the embedded store.
    running = history.read_columns(end - 3, end, ["running"], targets=["golden"], texts=["recipe_id"])
    assert list(running.values) == ["running"]
    assert list(running.texts) == ["recipe_id"]
    assert running.values["running"].tolist() == frame["running"].tolist()


def test_long_ranges_come_back_downsampled_to_max_points(history: PrometheusHistory) -> None:
    end = time.time()
    frame = read_frame(history, end - 12, end, ["golden"], max_points=3)
    assert 1 <= len(frame) <= 3
    # Each point averages its 6 s step; the served gauges are constant, so the averages are the values.
    assert (frame["running"] == 41).all()
    assert frame["avg_context_tokens"].to_list() == pytest.approx([377904 / 41] * len(frame))


def test_latest_is_one_snapshot_per_target_now(
    history: PrometheusHistory, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    _, flaky = golden_servers
    latest = {s.target: s for s in history.latest()}
    assert set(latest) == {"golden", flaky.netloc}
    assert latest["golden"].signals.running == 41
    assert latest["golden"].ts == pytest.approx(time.time(), abs=5)
    assert history.count_samples() == 2


def test_down_and_up_events_come_from_prometheus_and_alerts_from_sqlite(
    history: PrometheusHistory, golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer]
) -> None:
    _, flaky = golden_servers
    start = time.time()
    flaky.status = 503
    try:
        wait_scraped(golden_engine, flaky.netloc, up=False)
        time.sleep(1.5)
    finally:
        flaky.status = 200
        wait_scraped(golden_engine, flaky.netloc)
    time.sleep(2)  # VictoriaMetrics makes fresh samples searchable by range queries within ~1-2 s
    history.add_events([Event(start + 0.5, "golden", "alert", "StatePoolSaturated firing")])
    history.add_events(
        [Event(start + 0.6, "golden", "down", "written by the collector, read from Prometheus")]
    )
    events = history.read_events(start - 1, time.time() + 1)
    kinds = [(e.target, e.kind) for e in events]
    # (An earlier test's outage may end inside the window: look at the transitions after this one began.)
    down = next(e for e in events if e.kind == "down" and e.target == flaky.netloc and e.ts >= start)
    assert any(e.kind == "up" and e.target == flaky.netloc and e.ts > down.ts for e in events)
    assert ("golden", "alert") in kinds  # alert transitions live in SQLite
    assert ("golden", "down") not in kinds  # up/down come from Prometheus only: no duplicates
    frame = read_frame(history, start - 1, time.time(), [flaky.netloc])
    assert not frame["up"].all()
    assert frame.loc[~frame["up"], "running"].isna().all()  # a failed scrape has no signals
    assert (frame.loc[~frame["up"], "error"].str.contains("up == 0")).all()


def test_recipes_written_by_the_collector_are_read_back(history: PrometheusHistory) -> None:
    recipe = Recipe.from_flags({"model": "kimi-k3", "speculative_algorithm": "DSPARK"})
    history.put_recipe(recipe, time.time())
    assert history.recipes()[recipe.recipe_id] == recipe
    history.append([])  # samples are Prometheus's own: appending writes nothing


def test_an_unreachable_prometheus_is_a_store_error_in_words(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    labelled_url = "http://127.0.0.1:9"
    config = source_config(dead, [("golden", labelled_url)], timeout_s=1)
    config = config.model_copy(
        update={"store": config.store.model_copy(update={"path": str(tmp_path / "m.db")})}
    )
    store = PrometheusHistory(config)
    try:
        for read in (lambda: read_frame(store, 0, 10), store.latest, lambda: store.read_events(0, 10)):
            with pytest.raises(StoreError, match="connection refused; check the server is running") as caught:
                read()
            assert isinstance(caught.value, QueryError)  # views catching either see it
            assert dead in str(caught.value)
    finally:
        store.close()


@pytest.mark.parametrize("golden_engine", ["prometheus"], indirect=True)  # VictoriaMetrics needs vmalert
def test_history_from_recorded_series_equals_history_from_raw_series(
    golden_engine: Engine, golden_servers: tuple[StaticServer, StaticServer], tmp_path: Path
) -> None:
    labelled, _ = golden_servers
    config = _config(golden_engine.url, labelled, tmp_path)  # the rules Prometheus evaluates: same selector
    assert config.prometheus is not None
    prometheus = config.prometheus.model_copy(update={"use_recording_rules": True})
    recorded_config = config.model_copy(update={"prometheus": prometheus})
    signals = ("running", "kv_usage", "state_pool_usage", "accept_length", "avg_context_tokens")

    def read(settings: Config, end: float) -> pd.DataFrame:
        store = PrometheusHistory(settings)
        try:
            return read_frame(store, end - 4, end, ["golden"]).set_index("ts")
        finally:
            store.close()

    # The rules' first evaluations come a few seconds after the engine's first scrapes: on a young engine (the
    # first test of a worker) the window's oldest instant has no recorded sample yet. Wait until the rules
    # cover the whole window (a recorded series that never does still fails below).
    deadline = time.monotonic() + 15
    while True:
        end = time.time() - 1
        recorded = read(recorded_config, end)
        covered = len(recorded) >= 3 and not recorded[list(signals)].isna().any().any()
        if covered or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    raw = read(config, end)
    assert len(recorded) >= 3
    assert list(recorded.index) == list(raw.index)
    for signal in signals:
        assert recorded[signal].to_list() == pytest.approx(raw[signal].to_list()), signal
