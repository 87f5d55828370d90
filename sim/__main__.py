"""Command line: serve a simulated K3 + DSpark fleet on 127.0.0.1 until SIGINT/SIGTERM (then exit 0).

python -m sim --servers 500 --base-port 31000 --speed 10 --write-config fleet.yaml
python -m sim --fleet incident.yaml          # a scenario file (its servers may pin ports)
python -m sim --list                         # the built-in scenarios
python -m sim history --config FILE --hours 24   # fill the config's store with 24 h of its simulated fleet
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from collectors.errors import StoreError
from config import ConfigError
from sim.fleet import SimFleet
from sim.scenario import available_scenarios, load_scenario


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sim",
        description="Serve simulated SGLang 0.5.23 servers (Kimi-K3 + DSpark) that follow the seed.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--fleet", metavar="FILE", help="a scenario file (YAML) describing the fleet")
    source.add_argument(
        "--scenario", metavar="NAME", default="demo", help="built-in scenario (default: demo)"
    )
    parser.add_argument(
        "--servers", type=int, metavar="N", help="number of servers (default: the scenario's)"
    )
    parser.add_argument("--base-port", type=int, default=0, metavar="P", help="serve on ports P … P+N−1")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument(
        "--speed", type=float, default=1.0, metavar="X", help="simulated seconds per wall second"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of the simulated workload")
    parser.add_argument("--write-config", metavar="PATH", help="write a collector config for this fleet")
    parser.add_argument("--list", action="store_true", help="list the built-in scenarios and exit")
    return parser


def _history_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sim history",
        description="Fill the configured history store with hours of the configured simulated fleet "
        "(config `sim: {scenario, servers}`), every tier as the collector would have written it.",
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="specwatch config (YAML)")
    parser.add_argument(
        "--hours", type=float, required=True, metavar="H", help="hours of history, ending now"
    )
    return parser


def history(argv: Sequence[str]) -> int:
    """``python -m sim history``: a clear sentence and exit status 2 on bad input, never a traceback."""
    from config import load_config
    from sim.fill import StoreNotEmptyError, fill_store

    parser = _history_parser()
    options = parser.parse_args(argv)
    try:
        config = load_config(options.config)
    except (ConfigError, OSError) as exc:
        parser.error(str(exc))
    sim = config.sim
    if sim is None:
        parser.error(f"{options.config} has no `sim:` section: which simulated fleet should fill the store?")
    try:
        report = fill_store(
            config.store.path,
            scenario=sim.scenario,
            servers=sim.servers,
            hours=options.hours,
            raw_hours=min(config.store.raw_retention_h, config.store.retention_h),
            step_s=config.scrape.interval_s,
            seed=sim.seed,
            progress=lambda done: print(f"  {done}", file=sys.stderr, flush=True),
            sample_in_process=True,  # simulate in a child while this process writes: two cores, half the wall
            gpu_hour_usd=config.cost.gpu_hour_usd,
        )
    except StoreNotEmptyError as exc:
        print(f"python -m sim history: {exc}", file=sys.stderr)
        return 1
    except (ConfigError, ValueError, StoreError) as exc:
        parser.error(str(exc))
    print(
        f"wrote {report.hours:g} h of {report.servers} simulated servers into {config.store.path}: "
        f"{report.raw_rows:,} raw rows, {report.rollup_samples:,} older scrapes as rollups, "
        f"{report.events} events, in {report.seconds:.1f} s",
        flush=True,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["history"]:
        return history(args[1:])
    parser = _parser()
    options = parser.parse_args(args)
    if options.list:
        for name in available_scenarios():
            description = " ".join(load_scenario(name).spec.description.split())
            print(f"{name:24} {description}")
        return 0
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        fleet = SimFleet(
            options.fleet or options.scenario,
            servers=options.servers,
            speed=options.speed,
            seed=options.seed,
            base_port=options.base_port,
            host=options.host,
        ).start()
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    except OSError as exc:
        print(f"python -m sim: {exc}", file=sys.stderr)
        return 1
    try:
        if options.write_config:
            path = fleet.write_config(options.write_config)
            print(f"wrote collector config {path}", flush=True)
        ports = sorted(s.port for s in fleet.servers)
        exporters = sorted(s.gpu_exporter_port for s in fleet.servers)
        print(
            f"serving {len(ports)} simulated SGLang servers (scenario {fleet.scenario.name}, "
            f"speed {options.speed:g}) on {options.host} ports {ports[0]}–{ports[-1]}, their GPU exporters "
            f"(DCGM) on ports {exporters[0]}–{exporters[-1]}; Ctrl-C to stop",
            flush=True,
        )
        while not stop.wait(0.5):  # an untimed wait misses a signal the kernel gave another thread
            pass
    finally:
        fleet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
