"""Headless collector: ``python -m collectors --config FILE`` runs until SIGTERM; add ``--cycles N --json``
to run N cycles and print the snapshots.

Commands are a small table (``COMMANDS``) so another one (e.g. ``export-recording-rules``) plugs in beside
``run``. A bad config prints the ConfigError on one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

from collectors.errors import CollectorError, StoreError
from collectors.exporter import MetricsExporter
from collectors.model import TargetSnapshot
from collectors.probe_cli import known_values, probe
from collectors.probes.scheduler import start_probes
from collectors.prometheus.recording_rules import export_recording_rules
from collectors.runner import Collector
from collectors.source import open_history
from config import Config, ConfigError, load_config

log = logging.getLogger("specwatch.collectors")

Command = Callable[[Config, argparse.Namespace], int]
# The signals a snapshot's one-line summary shows (the rest: --json).
SUMMARY_SIGNALS = (
    "accept_length", "step_latency_s", "output_tok_s", "running", "queued", "state_pool_usage", "kv_usage",
)  # fmt: skip


def _summary(snapshot: TargetSnapshot) -> str:
    if snapshot.unknown:
        return f"{snapshot.target}: UNKNOWN — {snapshot.error}"  # the source could not say; not down
    if not snapshot.up:
        return f"{snapshot.target}: DOWN — {snapshot.error}"
    parts = known_values(snapshot.signals, SUMMARY_SIGNALS)
    note = f" ({snapshot.error})" if snapshot.error else ""
    return f"{snapshot.target}: up {parts} recipe={snapshot.recipe_id}{note}"


def _run_cycles(collector: Collector, config: Config, cycles: int, as_json: bool) -> int:
    interval_s = config.scrape.interval_s
    next_start = time.monotonic()
    snapshots: list[TargetSnapshot] = []
    for index in range(cycles):
        if index:
            next_start += interval_s
            time.sleep(max(0.0, next_start - time.monotonic()))
        snapshots = collector.run_cycle()
    for snapshot in snapshots:
        if as_json:
            record = snapshot.as_record(collector.recipe(snapshot.target))
            print(json.dumps(record, allow_nan=False, sort_keys=False), flush=True)
        else:
            print(_summary(snapshot), flush=True)
    return 0


def _run_until_stopped(collector: Collector, config: Config) -> int:
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s; finishing the cycle in flight and flushing", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    exporter = MetricsExporter(collector, config.exporter.listen) if config.exporter.listen else None
    if exporter is not None:
        log.info("serving the collector's own metrics on %s", exporter.url)
    probes = start_probes(config, collector)  # sweeps in a thread of their own, off the scrape cycle
    try:
        collector.run_forever(stop)
    finally:
        if probes is not None:
            probes.stop()
        if exporter is not None:
            exporter.close()
    return 0


def run(config: Config, args: argparse.Namespace) -> int:
    """Scrape the fleet: forever (until SIGTERM), or ``--cycles N`` and then print the last snapshots."""
    if config.sim is not None and not config.targets and not config.targets_file:
        log.warning(
            "this config only has a sim: section; the headless collector does not start the simulator"
        )
    try:
        history = open_history(config)  # source: prometheus keeps its history in Prometheus
    except CollectorError as exc:
        where = "store.path: " if isinstance(exc, StoreError) else ""
        print(f"specwatch: {where}{exc}", file=sys.stderr)
        return 2
    try:
        collector = Collector(config, history.store, source=history.source)
        try:
            if args.cycles:
                code = _run_cycles(collector, config, args.cycles, args.json)
            else:
                code = _run_until_stopped(collector, config)
        finally:
            collector.close()
        pending = collector.health().pending_rows
        if pending:
            print(
                f"specwatch: {pending} snapshots could not be written to {config.store.path}", file=sys.stderr
            )
            code = code or 1
        return code
    finally:
        history.close()


COMMANDS: dict[str, Command] = {
    "run": run,
    "export-recording-rules": export_recording_rules,
    "probe": probe,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collectors",
        description="Scrape an SGLang fleet, derive the speculative-decoding signals, keep history.",
    )
    parser.add_argument("command", nargs="?", default="run", choices=sorted(COMMANDS), help="default: run")
    parser.add_argument("--config", required=True, help="fleet YAML/JSON file")
    parser.add_argument("--cycles", type=int, default=0, help="run N cycles, print the last snapshots, exit")
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --cycles: one JSON object per target per line; with probe: one per (target, context)",
    )
    parser.add_argument("--once", action="store_true", help="probe: one sweep of every opted-in target, exit")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cycles < 0:
        parser.error("--cycles must be a positive number")
    if args.json and not args.cycles and args.command != "probe":
        parser.error("--json needs --cycles N")
    if args.once and args.command != "probe":
        parser.error("--once is for the probe command")
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = load_config(args.config)
        return COMMANDS[args.command](config, args)
    except ConfigError as exc:
        print(f"specwatch: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
