"""The collector loop against real loopback fleets: signals, events, history, failing stores, targets."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from collectors.direct.direct_source import DirectSource
from collectors.model import Event, Recipe, SourceHealth, TargetSnapshot
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import Config, Target, load_config, parse_config
from tests.collectors.bodies import SERVER_INFO, Load
from tests.collectors.servers import FakeSGLang, LoopbackServer, Route, refused_url, reply, silent_listener
from tests.history_frames import read_frame

Start = Callable[..., FakeSGLang]


class Clock:
    """Unix time that moves only when the test says so: windows of exactly known length."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fleet_config(targets: Sequence[tuple[str, str]], **overrides: Any) -> Config:
    document: dict[str, Any] = {
        "scrape": {"interval_s": 5, "timeout_s": 1},
        "targets": [{"name": name, "url": url, "labels": {"deployment": "east"}} for name, url in targets],
        "exporter": {"listen": None},
    }
    document.update(overrides)
    return parse_config(document)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    history = SqliteStore(tmp_path / "history.sqlite", busy_timeout_s=0.05)
    yield history
    history.close()


def by_target(snapshots: Sequence[TargetSnapshot]) -> dict[str, TargetSnapshot]:
    return {s.target: s for s in snapshots}


def test_a_cycle_derives_signals_and_keeps_history(sglang: Start, store: SqliteStore) -> None:
    east, west = sglang(), sglang()
    dead = refused_url()
    clock = Clock()
    config = fleet_config([("east-0", east.url), ("dead-0", dead), ("west-0", west.url)])
    # Windows of exactly 5 s: the test's clock times the rates too (in production, time.monotonic does).
    source = DirectSource(config.scrape, config.targets, clock=clock, rate_clock=clock)
    with Collector(config, store, clock=clock, source=source) as collector:
        first = collector.run_cycle()
        east.load = east.load.advanced(
            generation_tokens=16000, realtime_decode=16000, verify_calls=6400, itl_sum=1600.0, itl_count=16000
        )
        clock.now += 5
        second = collector.run_cycle()

        assert [s.target for s in second] == [
            "east-0",
            "dead-0",
            "west-0",
        ]  # config order, whatever finished first
        signals = by_target(second)["east-0"].signals
        assert signals.tpot_s == pytest.approx(0.1)
        assert signals.step_latency_s == pytest.approx(0.291)
        assert signals.output_tok_s == pytest.approx(3200.0)
        assert signals.max_running == 48.0
        # 41 requests running but no decode counted in the window: the server's own gauge, never 0.
        assert by_target(second)["west-0"].signals.output_tok_s == 3127.55
        down = by_target(second)["dead-0"]
        assert not down.up
        assert "dead-0" in (down.error or "")
        assert "connection refused" in (down.error or "")
        assert down.signals.accept_length is None

        recipe = collector.recipe("east-0")
        assert recipe is not None
        assert recipe.recipe_id == by_target(first)["east-0"].recipe_id
        health = {t.target: t for t in collector.health().targets}
        assert health["dead-0"].consecutive_failures == 2
        assert health["dead-0"].last_success_ts is None
        assert health["east-0"].staleness_s == 0.0

    history = read_frame(store, clock.now - 60, clock.now + 1)
    assert len(history) == 6
    assert history[history.target == "east-0"].tpot_s.dropna().tolist() == pytest.approx([0.1])
    assert store.recipes() == {recipe.recipe_id: recipe}
    events = store.read_events(0, clock.now + 1)
    assert [(e.target, e.kind) for e in events] == [("dead-0", "down")]  # one transition, not one per cycle


def test_a_restart_is_an_event_and_brings_the_new_recipe(sglang: Start, store: SqliteStore) -> None:
    server = sglang()
    clock = Clock()
    with Collector(fleet_config([("k3", server.url)]), store, clock=clock) as collector:
        collector.run_cycle()
        old = collector.recipe("k3")
        server.load = Load(generation_tokens=50.0, prompt_tokens=400.0, verify_calls=20.0, itl_count=50.0)
        server.info = {**SERVER_INFO, "speculative_dspark_block_size": 7, "speculative_num_draft_tokens": 8}
        clock.now += 5
        snapshot = collector.run_cycle()[0]

    assert server.hits("/server_info") == 2
    new = collector.recipe("k3")
    assert old is not None
    assert new is not None
    assert new.recipe_id != old.recipe_id
    assert snapshot.recipe_id == new.recipe_id
    assert snapshot.signals.tpot_s is None  # the reset cycle has no window
    events = store.read_events(0, clock.now + 1)
    assert [e.kind for e in events] == ["restart", "recipe_change"]
    assert "sglang:generation_tokens_total fell from 615603 to 50" in events[0].detail
    assert "speculative_dspark_block_size 3 → 7" in events[1].detail
    assert set(store.recipes()) == {old.recipe_id, new.recipe_id}


def test_down_and_up_transitions(sglang: Start, store: SqliteStore) -> None:
    server = sglang()
    clock = Clock()
    with Collector(fleet_config([("k3", server.url)]), store, clock=clock) as collector:
        collector.run_cycle()
        server.metrics_status = 503
        clock.now += 5
        down = collector.run_cycle()[0]
        clock.now += 5
        collector.run_cycle()
        server.metrics_status = 200
        clock.now += 5
        up = collector.run_cycle()[0]
    assert not down.up
    assert "HTTP 503" in (down.error or "")
    assert up.up
    assert [e.kind for e in store.read_events(0, clock.now + 1)] == ["down", "up"]
    assert server.hits("/server_info") == 2  # re-read after coming back: it may have restarted


def test_a_live_server_without_server_info_is_up_with_an_unknown_recipe(
    sglang: Start, store: SqliteStore
) -> None:
    server = sglang(info=None)
    server.info = None
    with Collector(fleet_config([("k3", server.url)]), store, clock=Clock()) as collector:
        first = collector.run_cycle()[0]
        collector.run_cycle()
    assert first.up
    assert first.recipe_id is None
    assert first.signals.max_running is None
    assert "recipe unknown" in (first.error or "")
    assert "HTTP 404" in (first.error or "")
    assert server.hits("/get_server_info") == 1  # not hammered every cycle


def test_odd_but_readable_bodies_are_up_with_a_note(loopback: Callable[[dict[str, Route]], LoopbackServer],
                                                     store: SqliteStore) -> None:  # fmt: skip
    body = 'sglang:num_running_reqs{tp_rank="0"} 5\nsglang:num_running_reqs{tp_rank="0"} 5\n'
    server = loopback({"/metrics": reply(body)})
    with Collector(fleet_config([("odd", server.url)]), store, clock=Clock()) as collector:
        snapshot = collector.run_cycle()[0]
    assert snapshot.up
    assert snapshot.signals.running == 5.0
    assert "duplicate series" in (snapshot.error or "")


def test_dead_servers_do_not_hold_up_live_ones(sglang: Start, store: SqliteStore) -> None:
    live = [sglang(), sglang()]
    with silent_listener() as a, silent_listener() as b, silent_listener() as c, silent_listener() as d:
        hung = [("hung-a", a), ("hung-b", b), ("hung-c", c), ("hung-d", d)]
        config = fleet_config(
            [*hung, ("live-0", live[0].url), ("live-1", live[1].url)],
            scrape={"interval_s": 2, "timeout_s": 0.4, "concurrency": 2},
        )
        with Collector(config, store) as collector:
            collector.run_cycle()  # learns which targets time out
            started = time.time()
            snapshots = by_target(collector.run_cycle())
            elapsed = time.time() - started
    for name, _ in hung:
        assert "timeout" in (snapshots[name].error or "")
    for name in ("live-0", "live-1"):
        assert snapshots[name].up
        assert snapshots[name].ts - started < 0.3  # scraped first, not after two waves of timeouts
    assert elapsed < 2 * 0.4 + 0.6


def test_a_failing_store_keeps_rows_in_memory_until_it_recovers(
    sglang: Start, store: SqliteStore, tmp_path: Path
) -> None:
    server = sglang()
    seen: list[int] = []
    clock = Clock()
    with Collector(
        fleet_config([("k3", server.url), ("gone", refused_url())]),
        store,
        clock=clock,
        observers=[lambda snapshots, events: seen.append(len(snapshots))],
    ) as collector:
        collector.run_cycle()
        blocker = sqlite3.connect(tmp_path / "history.sqlite", isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock: "database is locked"
        for _ in range(3):
            clock.now += 5
            collector.run_cycle()
        health = collector.health()
        assert health.store_error is not None
        assert "locked" in health.store_error
        assert health.pending_rows == 6
        assert seen == [2, 2, 2, 2]  # observers still hear every cycle
        blocker.execute("ROLLBACK")
        blocker.close()
        clock.now += 5
        collector.run_cycle()
        health = collector.health()
    assert health.store_error is None
    assert health.pending_rows == 0
    assert store.count_samples() == 10  # 5 cycles × 2 targets, none lost


def test_rows_kept_in_memory_are_bounded(sglang: Start, store: SqliteStore, tmp_path: Path) -> None:
    server = sglang()
    clock = Clock()
    blocker = sqlite3.connect(tmp_path / "history.sqlite", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    with Collector(fleet_config([("k3", server.url)]), store, clock=clock, max_pending_rows=2) as collector:
        for _ in range(5):
            clock.now += 5
            collector.run_cycle()
        health = collector.health()
        assert (health.pending_rows, health.dropped_rows) == (2, 3)
        blocker.execute("ROLLBACK")
        blocker.close()
    samples = read_frame(store, 0, clock.now + 1)
    assert samples.ts.tolist() == [clock.now - 5, clock.now]  # the newest rows survive


def test_observer_failures_are_contained(sglang: Start, store: SqliteStore) -> None:
    server = sglang()
    heard: list[tuple[Sequence[TargetSnapshot], Sequence[Event]]] = []

    def broken(snapshots: Sequence[TargetSnapshot], events: Sequence[Event]) -> None:
        raise RuntimeError("observer bug")

    with Collector(
        fleet_config([("k3", server.url)]),
        store,
        clock=Clock(),
        observers=[broken, lambda s, e: heard.append((s, e))],
    ) as collector:
        snapshots = collector.run_cycle()
    assert heard == [(snapshots, [])]


class FlakySource:
    """A source whose second cycle blows up, to prove the loop survives a failing cycle."""

    def __init__(self) -> None:
        self.calls = 0
        self.targets: list[str] = []
        self.closed = False

    def collect(self, now: float) -> list[TargetSnapshot]:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("cycle bug")
        return [TargetSnapshot(target="k3", ts=now, up=True)]

    def recipe(self, target: str) -> Recipe | None:
        return None

    def drain_events(self) -> list[Event]:
        return []

    def health(self) -> SourceHealth:
        return SourceHealth("direct")

    def update_targets(self, targets: Sequence[Target]) -> None:
        self.targets = [t.name for t in targets]

    def close(self) -> None:
        self.closed = True


def test_run_forever_survives_a_failing_cycle_and_stops_on_request(store: SqliteStore) -> None:
    source = FlakySource()
    config = fleet_config([], scrape={"interval_s": 0.05, "timeout_s": 0.05})
    collector = Collector(config, store, source=source)
    stop = threading.Event()
    thread = threading.Thread(target=collector.run_forever, args=(stop,))
    thread.start()
    deadline = time.monotonic() + 5
    while collector.health().cycles < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=2)
    collector.close()
    assert not thread.is_alive()
    assert collector.health().cycles >= 3
    assert source.calls >= 4
    assert store.count_samples() == collector.health().cycles


def _write_targets(path: Path, targets: list[tuple[str, str]]) -> None:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text("".join(f"- {{name: {name}, url: '{url}'}}\n" for name, url in targets))
    os.utime(path, ns=(before + 10**9, before + 10**9))  # a visible change even on coarse-mtime filesystems


def test_a_handed_in_source_is_told_every_target_and_left_open(store: SqliteStore, tmp_path: Path) -> None:
    """The history's own Prometheus source, handed to the collector (``open_history``): it learns the
    targets_file's targets too, and stays open for the history's reads after the collector stops."""
    _write_targets(tmp_path / "listed.yaml", [("listed", "http://127.0.0.1:9")])
    config_file = tmp_path / "fleet.yaml"
    config_file.write_text(
        "scrape: {interval_s: 5, timeout_s: 1}\ntargets_file: listed.yaml\nexporter: {listen: null}\n"
        "targets: [{name: inline, url: 'http://127.0.0.1:9'}]\n"
    )
    source = FlakySource()
    with Collector(load_config(config_file), store, source=source) as collector:
        collector.run_cycle()
    assert source.targets == ["inline", "listed"]
    assert not source.closed  # its maker's to close


def test_the_targets_file_is_reread_when_it_changes(
    sglang: Start, store: SqliteStore, tmp_path: Path
) -> None:
    first, second = sglang(), sglang()
    targets_file = tmp_path / "fleet-targets.yaml"
    _write_targets(targets_file, [("a", first.url)])
    config_file = tmp_path / "fleet.yaml"
    config_file.write_text(
        "scrape: {interval_s: 5, timeout_s: 1}\ntargets_file: fleet-targets.yaml\nexporter: {listen: null}\n"
    )
    clock = Clock()
    with Collector(load_config(config_file), store, clock=clock) as collector:
        assert [s.target for s in collector.run_cycle()] == ["a"]
        _write_targets(targets_file, [("a", first.url), ("b", second.url)])
        assert [t.name for t in collector.targets] == ["a", "b"]
        clock.now += 5
        assert [s.target for s in collector.run_cycle()] == ["a", "b"]
        targets_file.write_text("- {name: a, url: not-a-url}\n")
        os.utime(targets_file, ns=(time.time_ns() + 5 * 10**9,) * 2)
        clock.now += 5
        assert [s.target for s in collector.run_cycle()] == ["a", "b"]  # a broken file changes nothing
        health = collector.health()
    assert health.config_error is not None
    assert "fleet-targets.yaml" in health.config_error
    assert "url" in health.config_error
    details = [e.detail for e in store.read_events(0, clock.now + 1) if e.kind == "config"]
    assert details[0] == "targets_file reloaded: 2 targets (+1, -0)"
    assert details[1].startswith("targets_file not reloaded:")


def test_retention_prunes_old_history(sglang: Start, store: SqliteStore) -> None:
    server = sglang()
    config = fleet_config([("k3", server.url)], store={"path": "unused", "retention_h": 1})
    old = Clock(1_700_000_000.0)
    with Collector(config, store, clock=old) as collector:
        collector.run_cycle()
    later = Clock(old.now + 2 * 3600)
    with Collector(config, store, clock=later) as collector:
        collector.run_cycle()
    assert read_frame(store, 0, later.now + 1).ts.tolist() == [later.now]
