"""History reads on real engines ask for no more than the page needs and share what they got: a read of a
few signals equals the same signals of a full read, sends fewer queries, lands on the aligned grid; a repeat
within the scrape interval sends none; a live read re-queries only what can still change."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.fleet_chart import FleetChartTotals
from collectors.prometheus.client import QUERY_STATS
from collectors.prometheus.promql_history import PrometheusHistory
from collectors.prometheus.read_plan import aligned_grid, signals_to_query
from collectors.prometheus.result_cache import RANGE_RESULTS
from collectors.sample_columns import SAMPLE_TEXTS, SAMPLE_VALUES, SampleColumns
from config import Config
from sim.fleet import SimFleet
from tests.prometheus.conftest import skip_without
from tests.prometheus.engines import (
    PROMETHEUS,
    Engine,
    StaticServer,
    scrape_config,
    source_config,
    start_prometheus,
    wait_scraped,
)
from views import fleet_frames
from views.fleet_frames import FLEET_SERIES_SIGNALS
from views.page_context import TimeWindow

pytestmark = pytest.mark.engines


def _config(engine: Engine, tmp_path: Path) -> Config:
    config = source_config(engine.url, selector='job="sim"')
    assert config.prometheus is not None
    return config.model_copy(
        update={
            "store": config.store.model_copy(update={"path": str(tmp_path / "meta.db")}),
            # The test engines answer from their newest samples (VictoriaMetrics: -search.latencyOffset=0s).
            "prometheus": config.prometheus.model_copy(update={"latency_offset_s": 0.0}),
        }
    )


@pytest.fixture
def history(golden_engine: Engine, sim_fleet: SimFleet, tmp_path: Path) -> Iterator[PrometheusHistory]:
    del sim_fleet  # scraped by the engine as job "sim": three servers whose signals move
    opened = PrometheusHistory(_config(golden_engine, tmp_path))
    # The targets met, as a viewer's fleet table meets them: a first range read finding targets never met
    # runs one source cycle first (its instant queries are not the read's).
    opened.latest()
    opened.drop_caches()
    yield opened
    opened.drop_caches()
    opened.close()


def _queries_of(read: object) -> int:
    before, _ = QUERY_STATS.snapshot()
    del read
    return QUERY_STATS.snapshot()[0] - before


def _counted(history: PrometheusHistory, *args: object, **kwargs: object) -> tuple[SampleColumns, int]:
    before, _ = QUERY_STATS.snapshot()
    columns = history.read_columns(*args, **kwargs)  # type: ignore[arg-type]
    return columns, QUERY_STATS.snapshot()[0] - before


@pytest.mark.old_samples  # waits until the engine holds samples 25 s old: runs last on it (conftest)
def test_a_read_of_a_few_signals_equals_them_in_a_full_read_and_sends_fewer_queries(
    golden_engine: Engine, history: PrometheusHistory
) -> None:
    _wait_for_samples_older_than(golden_engine, 25.0)
    end = time.time() - 5  # instants already scraped: both reads see the same samples
    few, few_queries = _counted(history, end - 20, end, FLEET_SERIES_SIGNALS, 10)
    history.drop_caches()  # the full read asks the engine again, nothing from the first read
    full, full_queries = _counted(history, end - 20, end, SAMPLE_VALUES, 10, texts=SAMPLE_TEXTS)
    assert len(few) > 0
    assert few.target.tolist() == full.target.tolist()
    assert few.ts.tolist() == full.ts.tolist()
    assert few.up.tolist() == full.up.tolist()
    for name in FLEET_SERIES_SIGNALS:
        np.testing.assert_array_equal(few.values[name], full.values[name])
    assert np.isfinite(few.values["accept_length"]).any()  # the fleet decodes: something to compare
    # The Fleet chart's 3 signals (+ TPOT, which plain decoding recomputes step latency from), up and the
    # recipe labels; the Server page's every signal PromQL can say without a price (cost needs
    # cost.gpu_hour_usd), up, the scrape duration and the labels.
    assert few_queries == 6
    assert full_queries == len(signals_to_query(SAMPLE_VALUES)) - 1 + 3


def test_a_long_read_lands_on_the_aligned_grid(history: PrometheusHistory) -> None:
    end = time.time()
    columns = history.read_columns(end - 60, end, ["running"], 60)
    grid = aligned_grid(end - 60, end, 60, history.interval_s)
    assert len(columns) > 0
    steps = columns.ts / grid.step_s
    np.testing.assert_allclose(steps, np.round(steps))  # VictoriaMetrics shifted nothing: the cache can hit
    assert columns.ts.min() >= grid.first_ts
    assert columns.ts.max() <= grid.last_ts


def test_a_repeat_within_the_interval_sends_nothing_and_after_it_reads_again(
    history: PrometheusHistory,
) -> None:
    end = time.time()
    first, sent = _counted(history, end - 10, end, FLEET_SERIES_SIGNALS, 10)
    again, repeat = _counted(history, end - 10, end, FLEET_SERIES_SIGNALS, 10)
    assert sent > 0
    assert repeat == 1  # the recipe labels' index lookup only: every range answer was kept
    assert again.ts.tolist() == first.ts.tolist()
    time.sleep(history.interval_s + 0.2)  # a scrape may have landed: the answers are read again
    _, later = _counted(history, end - 10, end, FLEET_SERIES_SIGNALS, 10)
    assert later == sent


@pytest.mark.old_samples  # waits until the engine holds samples older than the live margin: runs last
def test_a_live_read_requeries_only_the_newest_instants_and_equals_a_fresh_read(
    golden_engine: Engine, history: PrometheusHistory
) -> None:
    # The engine must hold samples older than the live margin: 3 intervals + the latency offset (0 s here).
    assert history.config.prometheus is not None
    margin_s = 3 * history.interval_s + history.config.prometheus.latency_offset_s
    _wait_for_samples_older_than(golden_engine, margin_s + 10.0)
    window = 45.0
    end = time.time()
    history.read_columns(end - window, end, FLEET_SERIES_SIGNALS, 100, live=True)
    extended_before = RANGE_RESULTS.extended
    later = end + 3
    time.sleep(max(0.0, later - time.time()) + 0.1)
    slid = history.read_columns(later - window, later, FLEET_SERIES_SIGNALS, 100, live=True)
    assert RANGE_RESULTS.extended - extended_before >= 4  # every signal and up, from the final instants on
    history.drop_caches()
    fresh = history.read_columns(later - window, later, FLEET_SERIES_SIGNALS, 100)
    final = fresh.ts <= end - margin_s
    assert final.any()
    assert slid.ts[slid.ts <= end - margin_s].tolist() == fresh.ts[final].tolist()
    for name in FLEET_SERIES_SIGNALS:
        np.testing.assert_array_equal(slid.values[name][slid.ts <= end - margin_s], fresh.values[name][final])


def _wait_for_samples_older_than(engine: Engine, age_s: float) -> None:
    """The session's engine started moments ago when this test runs alone: wait until it holds old enough
    samples (a deadline, not a sleep)."""
    deadline = time.monotonic() + age_s + 30
    while True:
        found = engine.query('min(min_over_time(timestamp(up{job="sim"})[10m:1s]))')
        oldest = float(found[0]["value"][1]) if found else time.time()
        if time.time() - oldest >= age_s:
            return
        assert time.monotonic() < deadline, f"the engine holds no samples older than {age_s:.0f} s"
        time.sleep(1)


def test_a_restart_is_one_event_and_only_targets_ever_down_are_read_step_by_step(
    golden_text: str, tmp_path: Path
) -> None:
    skip_without(PROMETHEUS, "prometheus")
    restarting, steady = StaticServer(golden_text.encode()), StaticServer(golden_text.encode())
    engine = start_prometheus(
        tmp_path / "prometheus", scrape_config({"sglang": [restarting.netloc, steady.netloc]})
    )
    try:
        wait_scraped(engine, restarting.netloc)
        started = time.time()
        time.sleep(3)
        # The request counters fall: the server restarted.
        restarting.body = re.sub(
            r"(sglang:num_requests_total\{[^}]*\}) [0-9.]+", r"\1 3.0", golden_text
        ).encode()
        time.sleep(4)
        config = source_config(engine.url)
        history = PrometheusHistory(
            config.model_copy(
                update={"store": config.store.model_copy(update={"path": str(tmp_path / "m.db")})}
            )
        )
        try:
            events = history.read_events(started - 5, time.time())
        finally:
            history.close()
    finally:
        engine.stop()
        restarting.stop()
        steady.stop()
    restarts = [(e.target, e.kind) for e in events if e.kind == "restart"]
    assert restarts == [(restarting.netloc, "restart")]  # once, however many steps its window spans
    assert not [e for e in events if e.kind in ("up", "down")]  # neither was ever down


def test_a_viewers_first_fleet_table_is_one_cycle_of_queries_with_the_recipes_server_info_gave(
    golden_engine: Engine, sim_fleet: SimFleet, tmp_path: Path
) -> None:
    """A viewer's first read meets every target at once: the recipes their /server_info gives are built into
    that cycle's answers, not asked for with a second round of the fleet-wide queries."""
    del sim_fleet
    fresh = PrometheusHistory(_config(golden_engine, tmp_path))
    try:
        before, _ = QUERY_STATS.snapshot()
        first = {s.target: s for s in fresh.latest()}
        first_queries = QUERY_STATS.snapshot()[0] - before
        time.sleep(fresh.interval_s + 0.2)  # the next interval: a plain cycle, every target already met
        before, _ = QUERY_STATS.snapshot()
        again = {s.target: s for s in fresh.latest()}
        cycle_queries = QUERY_STATS.snapshot()[0] - before
    finally:
        fresh.close()
    assert cycle_queries > 0
    # One cycle (plus what a cycle asks only now and then: the targets seen lately), not two.
    assert first_queries <= cycle_queries + 2
    assert set(first) == set(again)
    served = [name for name, snapshot in again.items() if snapshot.recipe_id is not None]
    assert served  # the sim servers answer /server_info
    assert {name: first[name].recipe_id for name in served} == {
        name: again[name].recipe_id for name in served
    }


def test_a_cold_fleet_page_reading_its_chart_and_table_at_once_makes_one_cycle(
    golden_engine: Engine, sim_fleet: SimFleet, tmp_path: Path
) -> None:
    """The Fleet chart's range read meets the targets while the table's first read is making the interval's
    cycle: it waits for that cycle instead of making its own (two rounds of the fleet-wide queries)."""
    del sim_fleet

    def instant_queries() -> int:
        return QUERY_STATS.snapshot_of("query")

    fresh = PrometheusHistory(_config(golden_engine, tmp_path))
    try:
        end = time.time()
        before = instant_queries()
        with ThreadPoolExecutor(2) as pool:
            table = pool.submit(fresh.latest)
            chart = pool.submit(fresh.read_columns, end - 60, end, FLEET_SERIES_SIGNALS, 10)
            assert table.result()
            assert len(chart.result()) > 0
        both = instant_queries() - before
        time.sleep(fresh.interval_s + 0.2)
        before = instant_queries()
        fresh.latest()
        cycle = instant_queries() - before
    finally:
        fresh.close()
    assert cycle > 0
    assert both <= cycle + 2, (both, cycle)


@pytest.mark.old_samples  # waits until the engine holds samples 25 s old: runs last on it (conftest)
def test_the_fleet_chart_summed_by_the_engine_is_the_one_summed_from_every_targets_columns(
    golden_engine: Engine, history: PrometheusHistory
) -> None:
    """The Fleet chart from the engine's sums and medians (one series per number) is the chart the page
    draws from every target's columns: the same points, the same numbers."""
    _wait_for_samples_older_than(golden_engine, 25.0)
    end = time.time() - 5  # instants already scraped: both reads see the same samples
    window = TimeWindow(end - 20, end)
    points = 10
    totals, sent = _counted_totals(history, window, points)
    assert totals is not None
    columns = history.read_columns(window.start_ts, window.end_ts, FLEET_SERIES_SIGNALS, points)
    bucket_s = window.duration_s / points
    from_engine = fleet_frames.fleet_series_of_chart_totals(totals, window.start_ts, bucket_s)
    from_columns = fleet_frames.fleet_series_of(columns, window.start_ts, bucket_s)
    assert len(from_columns) > 0
    assert from_columns["output_tok_s"].notna().any()
    assert from_columns["accept_length"].notna().any()
    pd.testing.assert_frame_equal(from_engine, from_columns, check_dtype=False, rtol=1e-9)
    # Four queries of a series or two each (targets by `up`, a sum, two medians), not every target's series.
    assert sent == 4


def _counted_totals(
    history: PrometheusHistory, window: TimeWindow, points: int
) -> tuple[FleetChartTotals | None, int]:
    history.latest()  # the interval's cycle, shared with the fleet table: not the chart's queries
    before, _ = QUERY_STATS.snapshot()
    totals = history.fleet_chart_totals(window.start_ts, window.end_ts, points)
    return totals, QUERY_STATS.snapshot()[0] - before
