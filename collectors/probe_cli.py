"""``python -m collectors probe --config FILE --once [--json]``: one sweep of every opted-in target, printed.

Without ``--once`` it sweeps every ``probes.interval_s`` until SIGTERM. One collector cycle runs first, so
each probe knows the target's recipe and whether it is queueing (a queueing server is skipped, said in words).
Wiring, beside ``collectors.runner``: the probes themselves (``collectors.probes``) know no collector.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from collectors.errors import CollectorError
from collectors.probe_result import ProbeResult
from collectors.probes.scheduler import ProbeScheduler
from collectors.runner import Collector
from collectors.source import open_history
from collectors.store.probes import ProbeStore
from config import Config


def known_values(record: object, names: Sequence[str]) -> str:
    """``name=value`` for each of ``names`` the record knows (unknown ones are left out, never shown as 0)."""
    return " ".join(f"{name}={value:.4g}" for name in names if (value := getattr(record, name)) is not None)


def _line(result: ProbeResult) -> str:
    head = f"{result.target} @ {result.context_tokens} tokens"
    if result.error:
        return f"{head}: {result.error}"
    parts = known_values(result, ("prompt_tokens", "accept_length", "step_latency_s", "ttft_s", "tpot_s"))
    return f"{head}: {parts} recipe={result.recipe_id}"


def probe(config: Config, args: argparse.Namespace) -> int:
    """Sweep the targets with ``probe: true``; exit 2 when nothing may be probed."""
    if not config.probes.enabled:
        print("specwatch: probes.enabled is false in this config; set it to true to probe", file=sys.stderr)
        return 2
    if not config.targets_file and not any(t.probe for t in config.targets):
        print("specwatch: no target has probe: true; probes go only to targets that opt in", file=sys.stderr)
        return 2
    try:
        history = open_history(config)
        store = ProbeStore(config.store.path)
    except CollectorError as exc:
        print(f"specwatch: store.path: {exc}", file=sys.stderr)
        return 2
    collector = Collector(config, history.store, source=history.source)
    scheduler = ProbeScheduler(config, collector, store)
    try:
        collector.run_cycle()  # recipes and running / queued counts for the back-off
        if args.once:
            for result in scheduler.run_due(force=True):
                print(
                    json.dumps(result.as_record(), allow_nan=False) if args.json else _line(result),
                    flush=True,
                )
            return 0
        stop = threading.Event()

        def request_stop(_signum: int, _frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        while not stop.is_set():
            collector.run_cycle()
            for result in scheduler.run_due():
                print(
                    json.dumps(result.as_record(), allow_nan=False) if args.json else _line(result),
                    flush=True,
                )
            stop.wait(config.scrape.interval_s)
        return 0
    finally:
        scheduler.stop()
        collector.close()
        store.close()
        history.close()
