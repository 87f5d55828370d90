"""Command line: ``python -m alerts run --config FILE`` (headless collector + alerts until SIGTERM) and
``python -m alerts export-rules [--config FILE]`` (the rules as a Prometheus rule file on stdout).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alerts.service import Service

from alerts.cli import exit_code
from alerts.engine import DEFAULT_EXTERNAL_URL, RESEND_INTERVAL_S
from alerts.export import render_rules
from alerts.lock import EvaluatorLock
from alerts.metrics import DeliveryMetrics
from alerts.rules import build_rules
from collectors.exporter import MetricsExporter
from collectors.store.integrity import store_folder_problem
from config import Config, ConfigError, load_config

log = logging.getLogger("specwatch.alerts")
# A free flock() try: polling it often keeps a takeover well inside two scrape intervals.
_STANDBY_POLL_S = 0.2
_STOP_DEADLINE_S = 8.0
# The kernel may deliver SIGTERM to any thread (the scrape loop's epoll, a notifier); Python runs the handler
# only when the main thread next wakes, and an untimed Event.wait() never does. Waiting in slices wakes it.
SIGNAL_POLL_S = 0.5


def _positive_s(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0.1 <= seconds <= 86400:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected seconds between 0.1 and 86400, found {text!r}")
    return seconds


def _load(path: str | None) -> Config:
    return load_config(path) if path else Config()


def _run(args: argparse.Namespace) -> int:
    from alerts.service import Service  # the collector stack is only needed here

    config = _load(args.config)
    if config.source == "direct" and not config.targets and not config.targets_file:
        hint = " (sim: is started by the dashboard, not by this daemon)" if config.sim is not None else ""
        print(f"{args.config}: no targets to scrape{hint}; add targets: or targets_file:", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    # Before the lock (a file beside the store): a read-only folder is one message naming it, exit 1.
    problem = store_folder_problem(config.store.path)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    lock = EvaluatorLock(config.store.path)
    if args.standby:
        if not _stand_by(lock, stop):
            return 0
    else:
        lock.acquire()
    try:
        service = Service(
            config,
            source=args.config,
            external_url=args.external_url,
            resend_interval_s=args.resend_interval_s,
        )
        return _serve(service, config, stop)
    finally:
        lock.release()


def _stand_by(lock: EvaluatorLock, stop: threading.Event) -> bool:
    """Wait for the evaluator role (the other daemon stopped or died); False if told to stop first."""
    if lock.try_acquire():
        return True
    log.warning("standing by: %s; this daemon takes over when it stops", lock.holder())
    while not stop.wait(_STANDBY_POLL_S):
        if lock.try_acquire():
            log.warning("the other evaluator stopped; this daemon takes over")
            return True
    return False


def _serve(service: Service, config: Config, stop: threading.Event) -> int:
    exporter = _exporter(service, config)
    service.start()
    rules = ", ".join(rule.name for rule in service.engine.rules)
    log.info(
        "watching %d targets every %g s; rules: %s",
        len(service.collector.targets),
        config.scrape.interval_s,
        rules,
    )
    while not stop.wait(SIGNAL_POLL_S):
        pass
    # Stopping may wait for a cycle in flight; past the deadline the process ends anyway (the outbox is on
    # disk, nothing delivered is sent twice) so SIGTERM never hangs.
    stopper = threading.Thread(target=service.stop, name="specwatch-stop", daemon=True)
    stopper.start()
    stopper.join(timeout=_STOP_DEADLINE_S)
    if stopper.is_alive():
        log.error("shutdown did not finish within %g s; exiting anyway", _STOP_DEADLINE_S)
    if exporter is not None:
        exporter.close()
    return 0


def _exporter(service: Service, config: Config) -> MetricsExporter | None:
    """The collector's /metrics with the outbox beside it; a busy port costs /metrics, not the alerts."""
    if not config.exporter.listen:
        return None
    try:
        exporter = MetricsExporter(service.collector, config.exporter.listen)
    except ConfigError as exc:
        log.error("not serving /metrics: %s", exc)
        return None
    exporter.registry.register(DeliveryMetrics(service.notifier))
    log.info("serving the collector's own metrics on %s", exporter.url)
    return exporter


def _export(args: argparse.Namespace) -> int:
    config, source = _load(args.config), args.config or "defaults"
    sys.stdout.write(render_rules(config, source, include_recordings=not args.without_recordings))
    return 0


def _check(args: argparse.Namespace) -> int:
    config = _load(args.config)
    for rule in build_rules(config.alerts.rules, args.config or "defaults"):
        state = "" if rule.enabled else " (disabled)"
        print(f"{rule.name}{state} [{rule.severity}]: {rule.describe()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alerts", description="specwatch alerts")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="scrape the fleet and evaluate alerts until SIGTERM")
    run.add_argument("--config", required=True, help="fleet configuration file (YAML or JSON)")
    run.add_argument(
        "--external-url",
        default=DEFAULT_EXTERNAL_URL,
        help="dashboard URL used in alert links (an HA pair: the same URL on both, e.g. their load balancer)",
    )
    run.add_argument(
        "--resend-interval-s",
        type=_positive_s,
        default=RESEND_INTERVAL_S,
        help="seconds between re-posts of every firing alert to Alertmanager, which keep it active "
        f"(Prometheus's --rules.alert.resend-delay; default {RESEND_INTERVAL_S:g})",
    )
    run.add_argument(
        "--standby",
        action="store_true",
        help="if another daemon holds this store, wait and take over when it stops (default: refuse)",
    )
    run.set_defaults(handler=_run)
    export = commands.add_parser("export-rules", help="print the rules as a Prometheus rule file")
    export.add_argument("--config", help="take thresholds from this file (default: the documented defaults)")
    export.add_argument(
        "--without-recordings",
        action="store_true",
        help="leave out the recording group (load `export-recording-rules` output beside the file instead)",
    )
    export.set_defaults(handler=_export)
    check = commands.add_parser("check", help="validate the rule settings and describe each rule")
    check.add_argument("--config", help="configuration file to check (default: the documented defaults)")
    check.set_defaults(handler=_check)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Callable[[argparse.Namespace], int] = args.handler
    return exit_code(lambda: handler(args))


if __name__ == "__main__":
    sys.exit(main())
