"""Parity: on one loopback fleet, the Prometheus source gives what the direct source gives — every catalogue
signal, every page headline, ``collect --json``, ``specwatch slo --json``, probes and the alert engine's
verdicts — or says in words what it cannot know. The rows of the parity table (``parity_table.ROWS``, rendered
into docs/prometheus.md) drive the comparisons.

The fleet (``parity_fleet``): SGLang stand-ins with two TP ranks, both spellings negotiated, gauges that hold
still and counters that move as SGLang's do (per request at completion, per batch smoothly). It is scraped by
specwatch's direct collector and, at the same time, by a real Prometheus (which negotiates OpenMetrics, so
stores ``sglang_...``) and VictoriaMetrics (which keeps ``sglang:...``), each read by a ``source: prometheus``
specwatch. One run of the three collectors and alert engines serves every comparison; pages are opened once
per source.
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.capacity_cli import run as run_capacity_cli
from alerts.rules import build_rules
from alerts.slo_cli import run as run_slo_cli
from alerts.state_store import AlertStateStore
from analysis.fraction import MIN_SAMPLES
from analysis.slo_report import GOODPUT_WINDOW_S
from collectors.__main__ import main as collectors_main
from collectors.direct.direct_source import DirectSource
from collectors.model import SIGNAL_NAMES, TargetSnapshot
from collectors.prometheus.promql_source import PrometheusSource
from collectors.signals import config_params
from collectors.source import open_history
from config import Config, parse_config
from tests.loopback import reaped, start_module
from tests.prometheus.conftest import skip_without
from tests.prometheus.engines import PROMETHEUS, VICTORIA, Engine
from tests.prometheus.parity_checks import SIGNAL_GROUPS, Events, Field, Firing, Table, Tile, Words
from tests.prometheus.parity_fleet import (
    GPU_HOUR_USD,
    GPU_WATTS,
    RATES,
    SERVERS,
    Fleet,
    fleet_config,
    running_fleet,
    scraping_engine,
    wait_fleet_scraped,
)
from tests.prometheus.parity_pages import (
    Shown,
    open_page,
    rows_of,
    same_text,
    same_value,
    sentences,
    table_with,
)
from tests.prometheus.parity_table import checks_of

pytestmark = [pytest.mark.engines, pytest.mark.slow]

WINDOW_S = 6.0  # the rate window of both: the direct source's two snapshots, Prometheus's rate_window_s
# The analysis pages compare ≥ MIN_SAMPLES samples a side, two servers a side: samples with a rate from the
# direct daemon, and as many grid points from Prometheus at the 15 min range's 3 s grid (300 a server).
CYCLES = MIN_SAMPLES // 2 + 3
ANALYSIS_HISTORY_S = 3.0 * CYCLES
SIGNAL_REL = 0.02
# Plain counter rates move with the windows' edges (``PROMQL_APPROXIMATION``: up to a scrape's worth of change
# when one lands late, as on a busy machine); gauges and ratios of rates over the same scrapes do not.
RATE_REL = 0.05
ENGINES = ("prometheus", "victoria-metrics")
PAGES = ("fleet", "server", "context", "capacity", "recipes", "slo", "alerts")
DIRECT = "direct"


@dataclass
class World:
    """The fleet, the engines scraping it, and the specwatch daemons over it (direct, one per engine)."""

    fleet: Fleet
    workdir: Path
    engines: dict[str, Engine]
    configs: dict[str, Path] = field(default_factory=dict)  # source → its daemon's config file
    firing: dict[str, set[tuple[str, str, str]]] = field(default_factory=dict)  # (rule, target, severity)
    signals: dict[str, dict[str, TargetSnapshot]] = field(default_factory=dict)
    pages: dict[tuple[str, str], Shown] = field(default_factory=dict)
    outputs: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)

    def engine(self, name: str) -> Engine:
        skip_without(PROMETHEUS if name == "prometheus" else VICTORIA, name)
        return self.engines[name]

    def config(self, source: str, kind: str = "", *, probes: bool = False) -> Path:
        """A config file for ``source`` (direct or an engine); ``kind`` names one with a store of its own."""
        name = f"{source}-{kind}" if kind else source
        path = self.workdir / f"{name}.yaml"
        if not path.exists():
            engine = None if source == DIRECT else self.engines[source]
            raw = fleet_config(self.fleet, self.workdir / f"{name}.sqlite", engine, probes=probes)
            path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return path

    def store(self, source: str) -> str:
        return _load(self.configs[source]).store.path

    def resolved(self, source: str) -> list[tuple[str, str, str, str]]:
        """The alert transitions other than a first firing (what a failed comparison of alerts shows)."""
        with closing(sqlite3.connect(f"file:{self.store(source)}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT rule, target, from_state, to_state FROM alert_transitions").fetchall()
        return [row for row in rows if row[2:] != ("inactive", "firing")]

    def page(self, source: str, page: str) -> Shown:
        if (source, page) not in self.pages:
            self.pages[source, page] = open_page(self.configs[source], page)
        return self.pages[source, page]

    def output(
        self, source: str, command: str, run: Callable[[Path], int], config: Path
    ) -> list[dict[str, Any]]:
        """The JSON lines ``run(config)`` prints (once per source and command)."""
        if (source, command) not in self.outputs:
            out = io.StringIO()
            with redirect_stdout(out):
                code = run(config)
            assert code == 0, out.getvalue()
            self.outputs[source, command] = [json.loads(line) for line in out.getvalue().splitlines()]
        return self.outputs[source, command]


def _load(path: Path) -> Config:
    return parse_config(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


def _samples_per_target(path: str) -> int:
    """The fewest samples of any target in a direct store (0 before the first cycle)."""
    if not Path(path).exists():
        return 0
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        try:
            rows = db.execute("SELECT COUNT(*) FROM samples GROUP BY target").fetchall()
        except sqlite3.Error:
            return 0
    return min((n for (n,) in rows), default=0) if len(rows) == len(SERVERS) else 0


def _firing(path: str) -> set[tuple[str, str, str]]:
    if not Path(path).exists():
        return set()
    with closing(AlertStateStore(path)) as alerts:
        return {(i.rule, i.target, i.severity) for i in alerts.active() if i.state.value == "firing"}


def stop_daemon(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, as a service manager stops it; SIGKILL if it has not exited within 20 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("parity")
    with running_fleet() as fleet, ExitStack() as stack:
        engines: dict[str, Engine] = {}
        for name, binary in zip(ENGINES, (PROMETHEUS, VICTORIA), strict=True):
            if binary is not None:
                engines[name] = scraping_engine(name, workdir / name, fleet)
                stack.callback(engines[name].stop)
        world = World(fleet, workdir, engines)
        sources = [DIRECT, *engines]
        world.configs = {source: world.config(source) for source in sources}
        # The daemons as operators run them, each in its own process (a collector sharing the test's GIL with
        # AppTest scraped late under load: its one-interval rates were off by half).
        daemons: dict[str, subprocess.Popen[Any]] = {}

        def start_daemon(source: str) -> None:
            log = stack.enter_context((workdir / f"{source}.log").open("wb"))
            config = str(world.configs[source])
            daemons[source] = stack.enter_context(
                reaped(start_module("alerts", "run", "--config", config, stdout=log, stderr=log))
            )
            stack.callback(stop_daemon, daemons[source])

        for source in sources:
            start_daemon(source)
        # Enough samples with a rate for the analysis pages, and every alert engine past its first verdicts:
        # what fires here fires within seconds: the alerts of a burning SLO (page and ticket on the fleet and
        # on each deployment), the saturated state pools and the broken server.
        _until(lambda: _samples_per_target(world.store(DIRECT)) > CYCLES, 60, "the direct daemon's samples")
        _until(lambda: all(len(_firing(world.store(s))) >= 9 for s in sources), 60, "every daemon's alerts")
        world.firing = {source: _firing(world.store(source)) for source in sources}
        for source in engines:  # their alert state stays in their stores; Prometheus holds the rest
            stop_daemon(daemons[source])
        # The signals, on a quieter machine (the direct daemon's cycles are light): the direct source's rates
        # over WINDOW_S, each engine's at the same moment.
        config = _load(world.configs[DIRECT])
        direct = DirectSource(config.scrape, config.targets, params=config_params(config.cost.gpu_hour_usd))
        stack.callback(direct.close)
        readers = {name: PrometheusSource(_load(world.configs[name])) for name in engines}
        for reader in readers.values():
            stack.callback(reader.close)
        direct.collect(time.time())
        time.sleep(WINDOW_S)
        now = time.time()
        world.signals[DIRECT] = {s.target: s for s in direct.collect(now)}
        world.signals.update({n: {s.target: s for s in r.collect(now)} for n, r in readers.items()})
        # The analysis pages read a grid of 300 points a server (3 s at 15 min) from the engines, where SQLite
        # answers every scrape: enough of them too.
        for engine in engines.values():
            wait_fleet_scraped(engine, fleet, ANALYSIS_HISTORY_S)
        yield world


# -- signals -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_every_catalogue_signal_agrees(world: World, engine: str) -> None:
    world.engine(engine)
    direct, prometheus = world.signals[DIRECT], world.signals[engine]
    assert set(direct) == set(prometheus) == set(SERVERS)
    disagreements: list[str] = []
    compared: set[str] = set()
    for name, want_snapshot in direct.items():
        got_snapshot = prometheus[name]
        assert want_snapshot.up == got_snapshot.up == (name != "broken"), (want_snapshot, got_snapshot)
        for signal in SIGNAL_NAMES:
            want = getattr(want_snapshot.signals, signal)
            have = getattr(got_snapshot.signals, signal)
            rel = RATE_REL if signal in SIGNAL_GROUPS["rates"] else SIGNAL_REL
            if (want is None) != (have is None) or (
                want is not None and have != pytest.approx(want, rel=rel, abs=1e-9)
            ):
                disagreements.append(f"{name} {signal}: direct {want}, {engine} {have}")
            elif want is not None:
                compared.add(signal)
    assert not disagreements, "\n".join(disagreements)
    assert compared == set(SIGNAL_NAMES)  # every catalogue signal carried a number on some server
    for snapshots in (direct, prometheus):  # the truths hold on both sources
        steady = snapshots["steady"].signals
        assert steady.output_tok_s == pytest.approx(RATES["realtime_decode"], rel=RATE_REL)
        assert steady.tokens_per_verify == pytest.approx(RATES["generation_tokens"] / RATES["verify_calls"])
        assert snapshots["priorities"].signals.as_dict() == pytest.approx(steady.as_dict(), rel=RATE_REL)
        assert snapshots["no-mamba-pool"].signals.state_pool_usage is None
        idle = snapshots["idle"].signals
        assert idle.output_tok_s == 0.0
        assert idle.cache_hit_rate is None
        assert idle.accept_length is None
        assert snapshots["plain"].signals.accept_length == 1.0
        assert steady.gpu_count == 8
        assert steady.gpu_power_w == pytest.approx(8 * GPU_WATTS, rel=SIGNAL_REL)
        assert steady.tokens_per_joule == pytest.approx(
            RATES["realtime_decode"] / (8 * GPU_WATTS), rel=RATE_REL
        )
        assert steady.usd_per_million_tokens == pytest.approx(
            GPU_HOUR_USD * 8 / (RATES["realtime_decode"] * 3600) * 1e6, rel=RATE_REL
        )


# -- pages ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("engine", ENGINES)
def test_every_page_headline_agrees(world: World, engine: str, page: str) -> None:
    world.engine(engine)
    want, have = world.page(DIRECT, page), world.page(engine, page)
    assert not want.exceptions, want.exceptions
    assert not have.exceptions, have.exceptions
    tiles = {c.label: c for c in checks_of(Tile) if c.page == page}
    assert set(want.tiles) == set(tiles), "every tile shown has a parity row"
    assert set(have.tiles) == set(tiles), (
        have.sentences,
        [t.to_string() for t in have.tables],
        [t.to_string() for t in want.tables],
    )
    for label, check in tiles.items():
        if not check.compared:
            continue
        a, b = (
            re.sub(check.mask, "", s.tiles[label]) if check.mask else s.tiles[label] for s in (want, have)
        )
        assert same_text(a, b, check.rel), (label, want.tiles, have.tiles, world.resolved(engine))
    for check in checks_of(Words) + checks_of(Table):
        if isinstance(check, Words) and check.page == page:
            a, b = (sentences(shown, check.besides, check.mask) for shown in (want, have))
            assert len(a) == len(b), (a, b)
            for x, y in zip(a, b, strict=True):
                assert same_text(x, y, check.rel), (x, y)
        if isinstance(check, Table) and check.page == page:
            a, b = (rows_of(table_with(s, check.columns), check.columns, check.mask) for s in (want, have))
            assert len(a) == len(b), (a, b)
            for ra, rb in zip(a, b, strict=True):
                assert all(same_text(x, y, check.rel) for x, y in zip(ra, rb, strict=True)), (ra, rb)


# -- CLI commands --------------------------------------------------------------------------------------------
def _collect(config: Path) -> int:
    return collectors_main(["--config", str(config), "--cycles", "2", "--json", "--log-level", "ERROR"])


def _probe(config: Path) -> int:
    return collectors_main(["probe", "--config", str(config), "--once", "--json", "--log-level", "ERROR"])


def _slo(config: Path) -> int:
    return run_slo_cli(_load(config), json_lines=True)


def _capacity(config: Path) -> int:
    return run_capacity_cli(_load(config), json_lines=True)


def _compare_lines(
    command: str, want: list[dict[str, Any]], have: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]
) -> None:
    rows = [check for check in checks_of(Field) if check.command == command]
    named = {name for check in rows for name in SIGNAL_GROUPS.get(check.name, (check.name,))}
    fields = {name for line in want + have for name in line}
    assert fields <= named, f"fields without a parity row: {sorted(fields - named)}"
    assert sorted(map(key, want)) == sorted(map(key, have))
    by_key = {key(line): line for line in have}
    for line in want:
        other = by_key[key(line)]
        for check in rows:
            names = SIGNAL_GROUPS.get(check.name, (check.name,))
            for name in names:
                if name not in line or not check.compared:
                    continue
                a, b = line[name], other[name]
                ok = (a is None) == (b is None) if check.known else same_value(a, b, check.rel)
                assert ok, f"{command} {key(line)} {name}: direct {a!r}, prometheus {b!r}\n{line}\n{other}"


@pytest.mark.parametrize("engine", ENGINES)
def test_collect_json_agrees(world: World, engine: str) -> None:
    world.engine(engine)
    want, have = (world.output(s, "collect", _collect, world.config(s, "collect")) for s in (DIRECT, engine))
    _compare_lines("collect", want, have, lambda line: line["target"])
    assert {line["target"] for line in have if line["up"]} == set(SERVERS) - {"broken"}


@pytest.mark.parametrize("engine", ENGINES)
def test_slo_json_agrees(world: World, engine: str) -> None:
    world.engine(engine)
    # The stores the running services write: their counts (direct) and alert state (both).
    want, have = (world.output(s, "slo", _slo, world.configs[s]) for s in (DIRECT, engine))
    scopes = {json.dumps(line["scope"]) for line in have if "slo" in line}
    assert scopes == {"{}", '{"deployment": "chat"}', '{"deployment": "long"}'}  # the config's labels scope
    for command, wanted in (("slo", True), ("goodput", False)):
        _compare_lines(
            command,
            [line for line in want if ("slo" in line) == wanted],
            [line for line in have if ("slo" in line) == wanted],
            lambda line: (line.get("slo"), json.dumps(line["scope"])),
        )
    fleet = next(line for line in have if line.get("slo") == "ttft-10ms" and not line["scope"])
    assert fleet["attainment"] == pytest.approx(0.5, abs=0.02)  # half the stand-ins' requests within 10 ms
    assert fleet["alerts"] == ["page", "ticket"]
    # Goodput over the time the engine holds (under a minute or two here), not five minutes of it.
    goodput = next(line for line in have if "slo" not in line and not line["scope"])
    assert goodput["window_s"] < GOODPUT_WINDOW_S


@pytest.mark.parametrize("engine", ENGINES)
def test_probe_json_agrees(world: World, engine: str) -> None:
    world.engine(engine)
    want, have = (
        world.output(s, "probe", _probe, world.config(s, "probe", probes=True)) for s in (DIRECT, engine)
    )
    _compare_lines("probe", want, have, lambda line: (line["target"], line["context_tokens"]))
    skipped = {line["target"] for line in have if (line["error"] or "").startswith("skipped")}
    assert skipped == {"saturated", "steady"}  # both queue (probes.max_queued = 0); idle is probed


@pytest.mark.parametrize("engine", ENGINES)
def test_capacity_json_agrees(world: World, engine: str) -> None:
    world.engine(engine)
    want, have = (world.output(s, "capacity", _capacity, world.configs[s]) for s in (DIRECT, engine))
    _compare_lines("capacity", want, have, lambda line: line["deployment"])
    assert {line["deployment"] for line in have} == {"chat", "long"}
    assert all(line["reason"] for line in have)  # unknown or not, each says why


# -- events --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_the_histories_hold_the_same_events(world: World, engine: str) -> None:
    world.engine(engine)
    [check] = checks_of(Events)
    now = time.time()
    found = {}
    for source in (DIRECT, engine):
        with closing(open_history(_load(world.configs[source]))) as history:
            events = history.store.read_events(now - 900.0, now)
        found[source] = {(e.target, e.kind) for e in events if e.kind in check.kinds}
    # A scrape that failed on one scraper only (a timeout on a busy machine) is a down and an up on that side:
    # what differs must be such pairs, never a lone transition.
    differs = found[engine] ^ found[DIRECT]
    assert all({(t, "down"), (t, "up")} <= differs for t, _ in differs), differs
    assert ("broken", "down") in found[engine]  # first seen down, by either scraper
    assert ("broken", "down") in found[DIRECT]


# -- alerts --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_the_alert_engines_fire_the_same_alerts(world: World, engine: str) -> None:
    world.engine(engine)
    want, have = world.firing[DIRECT], world.firing[engine]
    rules = {check.rule for check in checks_of(Firing)}
    assert rules == {rule.name for rule in build_rules({}, "test")}, "every alert rule has a parity row"
    for rule in rules:
        assert {f for f in have if f[0] == rule} == {f for f in want if f[0] == rule}, rule
    assert ("StatePoolSaturation", "saturated", "critical") in have
    assert ("StatePoolSaturation", "saturated-b", "critical") in have
    assert ("TargetDown", "broken", "critical") in have
    burns = {(target, severity) for rule, target, severity in have if rule == "ErrorBudgetBurn"}
    assert {severity for _, severity in burns} == {"page", "ticket"}
    assert len(burns) == 6  # page and ticket on the whole fleet and on each deployment


def test_the_rule_file_records_what_the_source_reads() -> None:
    from collectors.prometheus.recording_rules import render_rules
    from collectors.signals import PROMQL_APPROXIMATION
    from tests.prometheus.engines import source_config

    text = render_rules(source_config("http://127.0.0.1:9", selector='job="parity"'))
    assert 'mode="decode"' in text  # decode throughput from the per-batch counter
    assert "cache_hit_rate{" not in text.replace("sglang_cache_hit_rate:ratio", "")  # no gauge fallback
    assert " ".join(PROMQL_APPROXIMATION.split()[:6]) in text.replace("\n# ", " ")
