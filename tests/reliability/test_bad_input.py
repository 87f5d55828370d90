"""Bad input from targets and files costs one clear per-target (or per-file) error and nothing else: no
false TargetDown, no crash, no stalled cycle, no restart storm. Real servers on 127.0.0.1, a real FIFO."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import parse_config
from tests.collectors.bodies import Load, render
from tests.collectors.servers import FakeSGLang, Handler, send

ROOT = Path(__file__).resolve().parents[2]
NON_FINITE = {"nan": b"NaN", "infinity": b"Infinity", "overflow": b"1e999"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "history.sqlite")
    yield s
    s.close()


def raw_server_info(literal: bytes) -> object:
    """/server_info as SGLang's JSON, with ``literal`` (not finite) as max_running_requests."""
    from tests.collectors.bodies import SERVER_INFO

    text = json.dumps({**SERVER_INFO, "max_running_requests": 0}).encode()
    body = text.replace(b'"max_running_requests": 0', b'"max_running_requests": ' + literal)
    return lambda handler: send(handler, body, content_type="application/json")


def config_for(targets: list[dict[str, str]], store: Path, **extra: object) -> dict[str, object]:
    return {
        "scrape": {"interval_s": 1, "timeout_s": 1},
        "targets": targets,
        "store": {"path": str(store)},
        "exporter": {"listen": None},
        **extra,
    }


def test_non_finite_numbers_in_server_info_are_a_recipe_error_not_a_down_target(
    tmp_path: Path, store: SqliteStore
) -> None:
    servers = {name: FakeSGLang() for name in NON_FINITE}
    for name, literal in NON_FINITE.items():
        servers[name].routes["/server_info"] = raw_server_info(literal)  # type: ignore[assignment]
    try:
        targets = [{"name": name, "url": s.url} for name, s in servers.items()]
        document = config_for(targets, tmp_path / "history.sqlite")
        with Collector(parse_config(document), store) as collector:
            snapshots = {s.target: s for s in collector.run_cycle()}
        for name, literal in NON_FINITE.items():
            snap = snapshots[name]
            assert snap.up, f"{name}: a bad flag must not make the target down"
            assert snap.signals.kv_usage is not None  # its metrics are still read
            assert snap.error is not None
            assert f"not finite ({literal.decode()} in max_running_requests)" in snap.error
            assert "internal error" not in snap.error
        # the command line's --json exits 0 and prints strict JSON for all of them
        path = tmp_path / "fleet.yaml"
        path.write_text(yaml.safe_dump(document))
        done = subprocess.run(
            [sys.executable, "-m", "collectors", "--cycles", "1", "--json", "--config", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        records = [json.loads(line) for line in done.stdout.splitlines()]
        assert sorted(r["target"] for r in records) == sorted(NON_FINITE)
        assert all(r["up"] for r in records)
    finally:
        for server in servers.values():
            server.stop()


def many_series(handler: Handler) -> None:
    """A million short series beside SGLang's own, still under the 16 MiB byte cap."""
    body, _ = render(Load())
    extra = b"".join(b'x{i="%x"} 1\n' % i for i in range(1_000_000))
    assert len(body + extra) < 16 * 1024 * 1024
    send(handler, body + extra)


def test_a_body_over_the_series_cap_is_refused_fast_with_the_reason(
    tmp_path: Path, store: SqliteStore
) -> None:
    server = FakeSGLang()
    server.routes["/metrics"] = many_series
    try:
        document = config_for([{"name": "wide", "url": server.url}], tmp_path / "history.sqlite")
        document["scrape"] = {"interval_s": 5, "timeout_s": 5}
        with Collector(parse_config(document), store) as collector:
            (snap,) = collector.run_cycle()
    finally:
        server.stop()
    assert not snap.up
    assert snap.error is not None
    assert "over scrape.max_samples (50000)" in snap.error
    assert snap.scrape_duration_s is not None
    assert snap.scrape_duration_s < 3.0  # the old parse took 4.9 s for this body


def test_a_counter_going_backwards_without_a_restart_is_a_counter_reset(
    tmp_path: Path, store: SqliteStore
) -> None:
    server = FakeSGLang()
    try:
        document = config_for([{"name": "k3", "url": server.url}], tmp_path / "history.sqlite")
        with Collector(parse_config(document), store) as collector:
            collector.run_cycle()
            notes = []
            for step in range(6):
                # generation_tokens alternates between two replicas' values; everything else keeps counting
                back = step % 2 == 0
                server.load = server.load.advanced(prompt_tokens=100.0, verify_calls=10.0)
                if back:
                    server.load = server.load.advanced(generation_tokens=-500.0)
                else:
                    server.load = server.load.advanced(generation_tokens=600.0)
                (snap,) = collector.run_cycle()
                assert snap.up
                if back:
                    notes.append(snap.error or "")
        events = store.read_events(0, time.time() + 3600)
    finally:
        server.stop()
    assert [e.kind for e in events if e.kind == "restart"] == []
    assert server.hits("/server_info") == 1  # no refetch storm
    assert all("counter reset without a restart" in note for note in notes)


def huge(path: Path) -> None:
    """A 40 MiB (sparse) file: over the 32 MiB cap for configuration files."""
    with path.open("wb") as out:
        out.truncate(40 * 1024 * 1024)


def test_a_targets_file_turned_fifo_directory_or_huge_is_an_error_and_the_cycle_goes_on(
    tmp_path: Path, store: SqliteStore
) -> None:
    server = FakeSGLang()
    listed = tmp_path / "targets.yaml"
    listed.write_text(yaml.safe_dump([{"name": "k3", "url": server.url}]))
    try:
        document = config_for([], tmp_path / "history.sqlite", targets_file=str(listed))
        with Collector(parse_config(document), store) as collector:
            assert [s.up for s in collector.run_cycle()] == [True]
            for make, words in (
                (lambda: os.mkfifo(listed), "a FIFO (named pipe)"),
                (lambda: listed.mkdir(), "a directory"),
                (lambda: huge(listed), "expected a file under"),
            ):
                if listed.is_dir():
                    listed.rmdir()
                else:
                    listed.unlink()
                make()
                started = time.monotonic()
                snapshots = collector.run_cycle()
                assert time.monotonic() - started < 3.0  # open() of the FIFO no longer blocks the cycle
                assert [s.target for s in snapshots] == ["k3"]  # the previous targets stay in force
                error = collector.health().config_error
                assert error is not None
                assert words in error
    finally:
        if listed.is_dir():
            listed.rmdir()
        server.stop()


def test_sigterm_is_honoured_with_a_fifo_as_targets_file(tmp_path: Path) -> None:
    server = FakeSGLang()
    listed = tmp_path / "targets.yaml"
    listed.write_text(yaml.safe_dump([{"name": "k3", "url": server.url}]))
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump(config_for([], tmp_path / "history.sqlite", targets_file=str(listed))))
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "alerts", "run", "--config", str(config)], cwd=ROOT, stderr=log, stdout=log
    )
    try:
        deadline = time.monotonic() + 30
        while server.hits("/metrics") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        listed.unlink()
        os.mkfifo(listed)
        time.sleep(2.5)  # a few cycles over the FIFO
        started = time.monotonic()
        daemon.terminate()
        daemon.wait(timeout=15)
        assert time.monotonic() - started < 10
        assert daemon.returncode == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        log.close()
        server.stop()
    assert "a FIFO (named pipe)" in (tmp_path / "daemon.log").read_text()
