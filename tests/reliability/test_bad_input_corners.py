"""The last corners of bad input (issue 23, item 5): each costs one readable message and nothing else.

A /metrics body trickling forever under the byte cap, a /server_info of 10,000 keys, 5,000 targets with a
duplicate name, label values of 64 KiB, a targets_file rewritten 100 times a second. Real servers on
127.0.0.1, real files, the real collector over a real SqliteStore; each test counts what it names.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path

import pytest
import yaml

from collectors.direct import metrics_reader
from collectors.model import RECIPE_FLAGS
from collectors.runner import Collector
from collectors.store.sqlite_store import SqliteStore
from config import ConfigError, load_config, parse_config
from tests.collectors.bodies import SERVER_INFO, Load, render
from tests.collectors.servers import FakeSGLang, Handler, LoopbackServer, Route, send
from tests.reliability.harness import rss_mb, samples_by_target
from tests.reliability.test_bad_input import config_for

pytestmark = pytest.mark.slow  # each starts servers and runs cycles for seconds


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "history.sqlite")
    yield s
    s.close()


@pytest.fixture
def healthy() -> Iterator[FakeSGLang]:
    server = FakeSGLang()
    yield server
    server.stop()


def stored_errors(path: Path) -> list[tuple[str, str | None]]:
    with closing(sqlite3.connect(path)) as db:
        return list(db.execute("SELECT target, error FROM samples ORDER BY ts"))


# -- /metrics at 1 byte a second, forever, far under the byte cap -------------------------------------------
def byte_a_second(handler: Handler) -> None:
    """Headers at once (no Content-Length), then sample-looking bytes one per second until cut off."""
    owner = handler.server.owner
    handler.close_connection = True
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain; version=0.0.4")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.flush()
    line = b'sglang:num_running_reqs{tp_rank="0"} 1.0\n'
    with suppress(OSError):
        for index in itertools.count():
            handler.wfile.write(line[index % len(line) :][:1])
            handler.wfile.flush()
            with owner.lock:
                owner.bytes_sent += 1
            if owner.stopping.wait(1.0):
                return


def test_a_body_streaming_forever_at_one_byte_a_second_is_cut_at_the_deadline(
    tmp_path: Path, store: SqliteStore, healthy: FakeSGLang
) -> None:
    slow = LoopbackServer({"/metrics": byte_a_second})
    slow_info = FakeSGLang()  # its /metrics is fine, its /server_info trickles: the same deadline covers both
    slow_info.routes["/server_info"] = byte_a_second
    try:
        document = config_for(
            [
                {"name": "trickle", "url": slow.url},
                {"name": "info", "url": slow_info.url},
                {"name": "k3", "url": healthy.url},
            ],
            tmp_path / "history.sqlite",
        )
        document["scrape"] = {"interval_s": 1, "timeout_s": 0.8}
        cycles = 3
        with Collector(parse_config(document), store) as collector:
            for _ in range(cycles):
                started = time.monotonic()
                snapshots = {s.target: s for s in collector.run_cycle()}
                assert time.monotonic() - started < 0.8 + 0.7  # the deadline holds, whatever trickles in
                trickle = snapshots["trickle"]
                assert not trickle.up
                assert trickle.error is not None
                assert f"trickle: no complete answer from {slow.url}/metrics?… within 0.8 s" in trickle.error
                assert "raise scrape.timeout_s" in trickle.error
                assert snapshots["k3"].up
                assert snapshots["k3"].error is None
                info = snapshots["info"]
                assert info.up  # its metrics were read; only its recipe is unknown
                assert info.signals.running == 41.0
                assert f"info: recipe unknown: no complete answer from {slow_info.url}/server_info" in (
                    info.error or ""
                )
            assert collector.health().cycles == cycles
    finally:
        slow.stop()
        slow_info.stop()
    assert samples_by_target(tmp_path / "history.sqlite") == {"trickle": cycles, "info": cycles, "k3": cycles}
    assert slow_info.hits("/server_info") == 1  # asked again after RECIPE_RETRY_S, not every cycle
    assert slow.bytes_sent <= cycles * 2  # about one byte per 0.8 s request: nothing else was waited for


# -- /server_info with 10,000 keys ---------------------------------------------------------------------------
def test_a_server_info_of_ten_thousand_keys_keeps_only_the_known_flags(
    tmp_path: Path, store: SqliteStore, healthy: FakeSGLang
) -> None:
    info = {**SERVER_INFO, **{f"extra_flag_{i}": "x" * (i % 50) for i in range(10_000)}}
    info["internal_states"] = [{f"state_{i}": i for i in range(10_000)}]
    wide = FakeSGLang(info=info)
    # A known flag of 10,000 keys: kept, as a bounded text.
    keyed = FakeSGLang(info={**SERVER_INFO, "served_model_name": {f"model_{i}": i for i in range(10_000)}})
    # And 10,000 keys deep: nested 100,000 levels (200 KB, far under the byte cap).
    deep = FakeSGLang()
    nested = b'{"version": "0.5.23", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    deep.routes["/server_info"] = lambda handler: send(handler, nested, content_type="application/json")
    try:
        assert len(json.dumps(info)) > 300_000
        document = config_for(
            [
                {"name": "wide", "url": wide.url},
                {"name": "deep", "url": deep.url},
                {"name": "keyed", "url": keyed.url},
                {"name": "k3", "url": healthy.url},
            ],
            tmp_path / "history.sqlite",
        )
        with Collector(parse_config(document), store) as collector:
            started = time.monotonic()
            snapshots = {s.target: s for s in collector.run_cycle()}
            elapsed_s = time.monotonic() - started
            recipe, plain = collector.recipe("wide"), collector.recipe("k3")
            keyed_recipe = collector.recipe("keyed")
    finally:
        for server in (wide, deep, keyed):
            server.stop()
    assert elapsed_s < 1.0  # read and reduced in a fraction of the timeout
    assert snapshots["wide"].up
    assert snapshots["wide"].error is None
    assert recipe is not None
    assert plain is not None
    assert tuple(recipe.as_dict()) == RECIPE_FLAGS  # the 10,000 others are dropped at the door
    assert recipe.recipe_id == plain.recipe_id  # extra keys are not a different recipe
    assert keyed_recipe is not None
    model = keyed_recipe.get("model")
    assert isinstance(model, str)
    assert model.startswith('{"model_0":0,"model_1":1,')
    assert len(model) <= 1024
    assert "characters, sha256 " in model
    assert set(store.recipes()) == {recipe.recipe_id, keyed_recipe.recipe_id}
    # The deep one is up (its metrics are read), its recipe unknown, in words (was "internal error", down).
    assert snapshots["deep"].up
    assert snapshots["deep"].signals.running == 41.0
    assert snapshots["deep"].error is not None
    assert "recipe unknown: " in snapshots["deep"].error
    assert "returned JSON nested too deeply" in snapshots["deep"].error
    assert samples_by_target(tmp_path / "history.sqlite") == {"wide": 1, "deep": 1, "keyed": 1, "k3": 1}


# -- 5,000 targets, two with one name ------------------------------------------------------------------------
def fleet(count: int, url: str) -> list[dict[str, object]]:
    return [{"name": f"k3-{i}", "url": f"{url}/{i}", "labels": {"deployment": "east"}} for i in range(count)]


def test_five_thousand_targets_with_a_duplicate_name_name_both_positions(
    tmp_path: Path, store: SqliteStore
) -> None:
    targets = fleet(5_000, "http://10.0.0.1:30000")
    targets[4017] = {**targets[4017], "name": "k3-3"}
    started = time.monotonic()
    with pytest.raises(ConfigError) as inline:
        parse_config({"targets": targets}, "fleet.yaml")
    assert time.monotonic() - started < 2.0
    message = str(inline.value)
    assert message.startswith("fleet.yaml: targets: ")
    assert "targets[3] and targets[4017] are both named 'k3-3'" in message
    assert "http://10.0.0.1:30000/3" in message
    assert "http://10.0.0.1:30000/4017" in message
    assert "{'" not in message  # not the whole document quoted back

    # Many duplicates: the first few, then how many more.
    many = fleet(5_000, "http://10.0.0.1:30000") + fleet(100, "http://10.0.0.2:30000")
    with pytest.raises(ConfigError) as repeated:
        parse_config({"targets": many}, "fleet.yaml")
    assert "targets[0] and targets[5000] are both named 'k3-0'" in str(repeated.value)
    assert "and 97 more repeated names" in str(repeated.value)
    assert len(str(repeated.value)) < 1000

    # The same in a targets_file, and a file's name clashing with the config's own targets.
    listed = tmp_path / "targets.yaml"
    listed.write_text(yaml.safe_dump(targets), encoding="utf-8")
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump({"targets_file": "targets.yaml"}), encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(ConfigError) as in_file:
        load_config(config)
    assert time.monotonic() - started < 10.0
    assert str(in_file.value).startswith(f"{listed}: name: ")
    assert "[3] and [4017] are both named 'k3-3'" in str(in_file.value)
    assert "http://10.0.0.1:30000/4017" in str(in_file.value)

    listed.write_text(yaml.safe_dump(fleet(5_000, "http://10.0.0.1:30000")), encoding="utf-8")
    config.write_text(
        yaml.safe_dump(
            {"targets": [{"name": "k3-4017", "url": "http://east:1"}], "targets_file": "targets.yaml"}
        )
    )
    with pytest.raises(ConfigError) as clash:
        load_config(config)
    assert "targets[0] and [4017] of the file are both named 'k3-4017'" in str(clash.value)

    # A running collector's reload of a 5,000-target file (JSON: YAML's pure-Python reader takes ~1 s) that
    # reuses an inline target's name: reported naming both, the previous targets kept.
    listed = tmp_path / "targets.json"
    listed.write_text(json.dumps(fleet(3, "http://127.0.0.1:9")), encoding="utf-8")
    inline = [{"name": "k3-4017", "url": "http://127.0.0.1:9/east"}]
    document = config_for(inline, tmp_path / "history.sqlite", targets_file=str(listed))
    document["scrape"] = {"interval_s": 1, "timeout_s": 0.2}
    with Collector(parse_config(document), store) as collector:
        assert len(collector.run_cycle()) == 4
        listed.write_text(json.dumps(fleet(5_000, "http://127.0.0.1:9")), encoding="utf-8")
        # The file is read off the cycle path: each cycle stays short and keeps the previous targets until the
        # read is judged (a slow machine takes a few cycles to validate 5,000 targets).
        error: str | None = None
        deadline = time.monotonic() + 30.0
        while error is None and time.monotonic() < deadline:
            started = time.monotonic()
            assert len(collector.run_cycle()) == 4
            assert time.monotonic() - started < 2.0
            error = collector.health().config_error
    assert error is not None
    assert error.startswith(f"{listed}: name: expected names not already in targets")
    assert "targets[0] and [4017] of the file are both named 'k3-4017'" in error


# -- label values of 64 KiB ----------------------------------------------------------------------------------
LONG_LABEL_BYTES = 64 * 1024
MODEL = 'model_name="moonshotai/Kimi-K3"'


def long_labels() -> Route:
    """SGLang's body with every model_name 64 KiB long and new each scrape (a per-request label gone wrong),
    plus one kept line repeated (a duplicate series)."""

    def route(handler: Handler) -> None:
        body, content_type = render(Load())
        value = f"{random.getrandbits(64):016x}".ljust(LONG_LABEL_BYTES, "x")
        body = body.replace(MODEL.encode(), f'model_name="{value}"'.encode())
        running = next(line for line in body.split(b"\n") if line.startswith(b"sglang:num_running_reqs{"))
        body += running + b"\n"
        send(handler, body, content_type=content_type)

    return route


def cache_chars() -> int:
    """Characters held by the signals' label cache (heads, raw blocks and label values)."""
    return sum(
        len(head) + len(raw) + sum(len(v) for _, v in (key[1] if key else ()))
        for head, (key, _, raw) in metrics_reader.sample_plan().series.items()
    )


def test_label_values_of_64_kib_are_read_and_bounded(
    tmp_path: Path, store: SqliteStore, healthy: FakeSGLang
) -> None:
    wide = LoopbackServer({"/metrics": long_labels(), "/server_info": healthy.routes["/server_info"]})
    try:
        document = config_for(
            [{"name": "wide", "url": wide.url}, {"name": "k3", "url": healthy.url}],
            tmp_path / "history.sqlite",
        )
        document["scrape"] = {"interval_s": 2, "timeout_s": 2}
        cycles = 12
        with Collector(parse_config(document), store) as collector:
            collector.run_cycle()
            before_mb, cached = rss_mb(), cache_chars()
            for _ in range(cycles - 1):
                snapshots = {s.target: s for s in collector.run_cycle()}
            grown_mb, cache_grown = rss_mb() - before_mb, cache_chars() - cached
    finally:
        wide.stop()
    snap = snapshots["wide"]
    assert snap.up
    plain = snapshots["k3"].signals
    assert (snap.signals.running, snap.signals.kv_usage) == (plain.running, plain.kv_usage) == (41.0, 0.2419)
    assert snap.error is not None
    assert "duplicate series sglang:num_running_reqs" in snap.error
    assert len(snap.error) < 1024  # the note quotes the series, not its 64 KiB label
    assert all(len(error or "") < 1024 for _, error in stored_errors(tmp_path / "history.sqlite"))
    assert samples_by_target(tmp_path / "history.sqlite") == {"wide": cycles, "k3": cycles}
    assert grown_mb < 50  # was +110 MB over 11 cycles and climbing ~10 MB a cycle (the label cache)
    assert cache_grown < 64 * 1024  # the label cache: heads this long are not kept (was +100 MB)


def test_a_64_kib_label_value_in_the_config_is_refused_and_the_old_targets_stay(
    tmp_path: Path, store: SqliteStore, healthy: FakeSGLang
) -> None:
    pasted = "x" * LONG_LABEL_BYTES
    with pytest.raises(ConfigError) as caught:
        parse_config({"targets": [{"name": "k3", "url": healthy.url, "labels": {"deployment": pasted}}]})
    assert "targets.0.labels: expected label values of at most 1024 characters (deployment has 65536)" in str(
        caught.value
    )
    assert len(str(caught.value)) < 300
    # The same label arriving in a targets_file reload: refused, the previous targets scraped, then it clears.
    listed = tmp_path / "targets.json"
    good = [{"name": "k3", "url": healthy.url, "labels": {"deployment": "east"}}]
    listed.write_text(json.dumps(good), encoding="utf-8")
    document = config_for([], tmp_path / "history.sqlite", targets_file=str(listed))
    with Collector(parse_config(document), store) as collector:
        collector.run_cycle()
        listed.write_text(json.dumps([{**good[0], "labels": {"deployment": pasted}}]), encoding="utf-8")
        (snap,) = collector.run_cycle()
        error = collector.health().config_error
        listed.write_text(json.dumps(good) + "\n", encoding="utf-8")
        collector.run_cycle()
        cleared = collector.health().config_error
    assert snap.up
    assert snap.deployment == "east"
    assert error is not None
    assert error.startswith(f"{listed}: 0.labels: expected label values of at most 1024 characters")
    assert cleared is None
    assert samples_by_target(tmp_path / "history.sqlite") == {"k3": 3}


# -- a targets_file rewritten 100 times a second -------------------------------------------------------------
def test_a_targets_file_rewritten_a_hundred_times_a_second_skips_no_cycle(
    tmp_path: Path, store: SqliteStore
) -> None:
    servers = [FakeSGLang() for _ in range(4)]
    sets = {
        "a": [{"name": f"k3-{i}", "url": servers[i].url} for i in (0, 1, 2)],
        "b": [{"name": f"k3-{i}", "url": servers[i].url} for i in (1, 2, 3)],
    }
    # Flow style: a save cut anywhere before its closing "]" is never valid YAML (a block list cut at a line
    # end would be a shorter list, which no reader can tell from a real one).
    texts = {key: yaml.safe_dump(targets, default_flow_style=True) for key, targets in sets.items()}
    width = max(len(text) for text in texts.values())
    texts = {key: text.rstrip("\n").ljust(width - 1) + "\n" for key, text in texts.items()}  # one size
    valid = {tuple(t["name"] for t in targets) for targets in sets.values()}
    listed = tmp_path / "targets.yaml"
    listed.write_text(texts["a"], encoding="utf-8")
    stop = threading.Event()
    writes = {"atomic": 0, "half": 0, "garbage": 0}

    def writer() -> None:
        rng = random.Random(23)
        spare = tmp_path / "targets.yaml.new"
        due = time.monotonic()
        while not stop.is_set():
            text = texts[rng.choice("ab")]
            kind = rng.choices(list(writes), weights=(6, 2, 2))[0]
            if kind == "atomic":  # as the docs ask: a new file renamed over the old one
                spare.write_text(text, encoding="utf-8")
                os.replace(spare, listed)
            elif kind == "half":  # an editor saving in place, caught half-way
                listed.write_text(text[: rng.randrange(1, len(text) - 2)], encoding="utf-8")
            else:
                listed.write_text("- {name: k3-0, url: http://\x00\n", encoding="utf-8")
            writes[kind] += 1
            due += 0.01  # 100 a second, catching up after a slow one
            time.sleep(max(0.0, due - time.monotonic()))

    thread = threading.Thread(target=writer, daemon=True)
    document = config_for([], tmp_path / "history.sqlite", targets_file=str(listed))
    document["scrape"] = {"interval_s": 0.4, "timeout_s": 0.4}
    seen: list[tuple[str, ...]] = []
    errors: list[str] = []
    try:
        with Collector(parse_config(document), store) as collector:
            thread.start()
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                started = time.monotonic()
                names = tuple(s.target for s in collector.run_cycle())
                assert time.monotonic() - started < 1.0
                seen.append(names)
                if (error := collector.health().config_error) is not None:
                    errors.append(error)
            stop.set()
            thread.join(timeout=5)
            # The writer's last word: set a, then set b saved in place with a's size and mtime kept (rsync -t,
            # cp -p): only its ctime says it changed.
            listed.write_text(texts["a"], encoding="utf-8")
            final = [tuple(s.target for s in collector.run_cycle())]
            before = listed.stat()
            listed.write_text(texts["b"], encoding="utf-8")
            os.utime(listed, ns=(before.st_atime_ns, before.st_mtime_ns))
            assert (listed.stat().st_size, listed.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
            final += [tuple(s.target for s in collector.run_cycle()) for _ in range(3)]
            health = collector.health()
    finally:
        stop.set()
        for server in servers:
            server.stop()
    assert sum(writes.values()) > 250  # about 100 a second for the 4 s the cycles ran
    assert writes["half"] > 10
    assert writes["garbage"] > 10
    assert len(seen) >= 10
    assert set(seen) <= valid  # every cycle scraped one whole good list, never a half-read one
    assert health.cycles == len(seen) + len(final)  # no cycle skipped
    assert final[0] == ("k3-0", "k3-1", "k3-2")
    assert final[-1] == ("k3-1", "k3-2", "k3-3")  # the last good file is the one in force
    assert health.config_error is None  # and the error cleared
    assert errors, "the broken saves were reported"
    assert all(str(listed) in error for error in errors)
    rows = samples_by_target(tmp_path / "history.sqlite")
    assert sum(rows.values()) == 3 * (len(seen) + len(final))  # every scrape of every cycle stored
