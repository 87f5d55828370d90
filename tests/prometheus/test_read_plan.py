"""What a history read asks Prometheus for: aligned grids, the signals a read needs, the decoded answers, and
the answers kept between readers (no engine: the planning and the cache are pure)."""

from __future__ import annotations

import json
import math
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.model import SIGNAL_NAMES
from collectors.prometheus.matrix import RangeSeries, decode_matrix
from collectors.prometheus.read_plan import aligned_grid, needs_labels, signals_to_query
from collectors.prometheus.result_cache import RangeKey, RangeResults
from collectors.sample_columns import SAMPLE_VALUES
from collectors.signals import BY_NAME
from views.fleet_frames import FLEET_SERIES_SIGNALS


# -- the grid ------------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    end=st.floats(1.6e9, 1.9e9),
    span=st.floats(1.0, 8 * 86400.0),
    max_points=st.integers(2, 3000),
    interval=st.sampled_from([1.0, 5.0, 15.0, 30.0, 60.0]),
)
def test_the_grid_is_whole_intervals_on_multiples_of_its_step_within_the_points_asked(
    end: float, span: float, max_points: int, interval: float
) -> None:
    grid = aligned_grid(end - span, end, max_points, interval)
    ratio = grid.step_s / interval
    assert ratio == pytest.approx(round(ratio))
    assert round(ratio) >= 1
    for instant in (grid.first_ts, grid.last_ts):
        assert instant / grid.step_s == pytest.approx(round(instant / grid.step_s), abs=1e-6)
    assert grid.points <= max_points
    assert end <= grid.last_ts < end + grid.step_s + 1e-6  # the newest sample is inside
    assert grid.first_ts >= end - span - 1e-6


def test_the_same_window_asked_a_little_later_in_the_same_step_is_the_same_query() -> None:
    # Two tabs a few seconds apart (or the next rerun) ask for the same instants: one cache key.
    first = aligned_grid(1_800_000_000 - 86400, 1_800_000_000, 150, 15.0)
    later = aligned_grid(1_800_000_000 - 86400 + 40, 1_800_000_000 + 40, 150, 15.0)
    assert (first.first_ts, first.last_ts, first.step_s) == (later.first_ts, later.last_ts, later.step_s)


# -- the signals a read needs --------------------------------------------------------------------------------
def test_a_read_queries_the_signals_asked_and_what_their_plain_rules_recompute_them_from() -> None:
    assert signals_to_query(["running", "kv_usage"]) == ("running", "kv_usage")
    # Step latency of a plain-decoding server is 1 × TPOT: its inputs come along.
    assert set(signals_to_query(FLEET_SERIES_SIGNALS)) == {
        "output_tok_s",
        "accept_length",
        "step_latency_s",
        "tpot_s",
    }
    assert "max_running" not in signals_to_query(["max_running"])  # the recipe says it, not PromQL
    every = signals_to_query(SAMPLE_VALUES)
    assert set(every) == {name for name in SIGNAL_NAMES if BY_NAME[name].expr is not None}


def test_recipe_labels_are_read_only_when_a_text_or_a_plain_rule_needs_them() -> None:
    assert not needs_labels(["running", "kv_usage"], [])
    assert needs_labels(["running"], ["recipe_id"])
    assert needs_labels(["accept_length"], [])  # 1 for plain decoding: which servers decode plainly?


# -- decoding a range answer ---------------------------------------------------------------------------------
def _slow(body: bytes) -> list[tuple[dict[str, str], list[float], list[float]]]:
    """The answer as ``json`` reads it (the reference the fast path must equal)."""
    out = []
    for item in json.loads(body)["data"]["result"]:
        stamps = [float(p[0]) for p in item["values"]]
        values = [float(p[1]) if math.isfinite(float(p[1])) else math.nan for p in item["values"]]
        out.append((item["metric"], stamps, values))
    return out


def _body(result: list[dict[str, object]], **extra: object) -> bytes:
    payload = {"status": "success", "data": {"resultType": "matrix", "result": result}, **extra}
    return json.dumps(payload, separators=(",", ":")).encode()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(
                st.sampled_from(["instance", "job", "le", "x"]), st.text(max_size=12), max_size=3
            ),
            st.lists(
                st.one_of(
                    st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.sampled_from(["NaN", "+Inf", "-Inf"]),
                ),
                min_size=1,
                max_size=6,
            ),
        ),
        max_size=5,
    )
)
def test_a_matrix_decodes_to_what_json_reads_whatever_the_labels_and_values(
    series: list[tuple[dict[str, str], list[float | str]]],
) -> None:
    result = [
        {
            "metric": labels,
            "values": [
                [1_800_000_000 + 15 * i, v if isinstance(v, str) else repr(v)] for i, v in enumerate(vs)
            ],
        }
        for labels, vs in series
    ]
    body = _body(result)
    matrix = decode_matrix(body)
    assert matrix is not None
    assert matrix.envelope["data"]["resultType"] == "matrix"
    expected = _slow(body)
    assert len(matrix.labels) == len(expected)
    for (labels, stamps, values), got_labels, got_stamps, got_values in zip(
        expected, matrix.labels, matrix.timestamps, matrix.values, strict=True
    ):
        assert got_labels == labels
        assert got_stamps.tolist() == stamps
        np.testing.assert_array_equal(got_values, np.array(values))


def test_label_values_that_look_like_structure_and_warnings_survive_the_fast_read() -> None:
    tricky = {"instance": 'a"},"values":[[1,"2"]]},{"metric":{', "job": "]]}"}
    body = _body([{"metric": tricky, "values": [[1.5, "3"], [3, "4"]]}], warnings=["store x down"])
    matrix = decode_matrix(body)
    assert matrix is not None
    assert matrix.labels == [tricky]
    assert matrix.timestamps[0].tolist() == [1.5, 3.0]
    assert matrix.values[0].tolist() == [3.0, 4.0]
    assert matrix.envelope["warnings"] == ["store x down"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"2"]}]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[]}]}}',
        b"<html>not json</html>",
    ],
)
def test_anything_else_is_left_to_the_json_read(body: bytes) -> None:
    assert decode_matrix(body) is None


# -- the answers kept between readers ------------------------------------------------------------------------
class _Engine:
    """A stand-in ``fetch``: one series per instant range asked, counting the queries."""

    def __init__(self) -> None:
        self.asked: list[tuple[float, float]] = []

    def fetch(self, first: float, last: float, warnings: list[str]) -> list[RangeSeries]:
        self.asked.append((first, last))
        stamps = np.arange(first, last + 1, 15.0)
        return [RangeSeries({"instance": "a"}, stamps, stamps / 15.0)]


def test_an_answer_is_shared_within_its_ttl_and_asked_again_after() -> None:
    now = [100.0]
    cache, engine = RangeResults(clock=lambda: now[0]), _Engine()
    key = RangeKey("http://p#1", "up", 15.0)
    first = cache.read(key, 1500.0, 1800.0, engine.fetch, ttl_s=15.0)
    now[0] += 10
    assert cache.read(key, 1500.0, 1800.0, engine.fetch, ttl_s=15.0) is first
    assert engine.asked == [(1500.0, 1800.0)]
    now[0] += 10  # past the interval: samples may have landed
    cache.read(key, 1500.0, 1800.0, engine.fetch, ttl_s=15.0)
    assert len(engine.asked) == 2


def test_answers_are_kept_apart_by_engine_query_step_and_range() -> None:
    cache, engine = RangeResults(), _Engine()
    base = RangeKey("http://p#1", "up", 15.0)
    others = [
        RangeKey("http://p#2", "up", 15.0),  # another tenant's headers on the same URL
        RangeKey("http://q#1", "up", 15.0),
        RangeKey("http://p#1", "up == 0", 15.0),
        RangeKey("http://p#1", "up", 30.0),
    ]
    cache.read(base, 1500.0, 1800.0, engine.fetch, ttl_s=60.0)
    for key in others:
        cache.read(key, 1500.0, 1800.0, engine.fetch, ttl_s=60.0)
    cache.read(base, 1515.0, 1815.0, engine.fetch, ttl_s=60.0)
    assert len(engine.asked) == 6
    cache.drop("http://p#1")
    cache.read(base, 1500.0, 1800.0, engine.fetch, ttl_s=60.0)
    cache.read(others[1], 1500.0, 1800.0, engine.fetch, ttl_s=60.0)  # another engine's: still kept
    assert len(engine.asked) == 7


def test_readers_asking_at_once_send_one_query() -> None:
    cache = RangeResults()
    asked: list[float] = []
    release = threading.Event()

    def slow(first: float, last: float, warnings: list[str]) -> list[RangeSeries]:
        asked.append(first)
        release.wait(5)
        return [RangeSeries({}, np.array([first]), np.array([1.0]))]

    key = RangeKey("e", "up", 15.0)
    answers: list[list[RangeSeries]] = []
    threads = [
        threading.Thread(target=lambda: answers.append(cache.read(key, 15.0, 15.0, slow, ttl_s=60.0)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(5)
    assert asked == [15.0]
    assert len(answers) == 4
    assert all(a is answers[0] for a in answers)


def test_a_live_read_queries_only_the_instants_that_could_still_change() -> None:
    cache, engine = RangeResults(), _Engine()
    key = RangeKey("e", "up", 15.0)
    cache.read(key, 1500.0, 2400.0, engine.fetch, ttl_s=15.0, final_before=2300.0)
    # The next interval: the window slid by one step; instants up to 2295 were final when first read.
    slid = cache.read(key, 1515.0, 2415.0, engine.fetch, ttl_s=15.0, final_before=2315.0)
    assert engine.asked == [(1500.0, 2400.0), (2310.0, 2415.0)]
    assert slid[0].timestamps.tolist() == np.arange(1515.0, 2416.0, 15.0).tolist()
    assert slid[0].values.tolist() == (np.arange(1515.0, 2416.0, 15.0) / 15.0).tolist()
    with pytest.raises(ValueError, match="read-only"):
        slid[0].values[0] = 0.0  # shared between readers: read-only


def test_a_partial_answer_stays_partial_when_read_from_the_cache() -> None:
    cache = RangeResults()

    def partial(first: float, last: float, warnings: list[str]) -> list[RangeSeries]:
        warnings.append("store 10.0.0.7 did not answer")
        return []

    key = RangeKey("e", "up", 15.0)
    for _ in range(2):
        said: list[str] = []
        cache.read(key, 15.0, 30.0, partial, ttl_s=60.0, warnings=said)
        assert said == ["store 10.0.0.7 did not answer"]


def test_what_is_kept_stays_within_its_bytes() -> None:
    cache, engine = RangeResults(max_bytes=20_000), _Engine()
    for k in range(50):
        cache.read(RangeKey("e", f"q{k}", 15.0), 0.0, 15.0 * 99, engine.fetch, ttl_s=600.0)
    assert 0 < cache.kept_bytes <= 20_000
