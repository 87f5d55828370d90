"""Run every benchmark module (``bench/bench_*.py`` with ``main() -> dict``), print and save the results.

``python -m bench`` runs all of them; ``python -m bench parse fleet`` runs ``bench_parse`` and
``bench_fleet``.
Results go to stdout (one JSON object per benchmark) and to ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import bench

RESULTS_DIR = Path(__file__).parent / "results"


def discover() -> list[str]:
    """Names of the benchmark modules, without the ``bench_`` prefix, sorted."""
    return sorted(
        info.name.removeprefix("bench_")
        for info in pkgutil.iter_modules(bench.__path__)
        if info.name.startswith("bench_") and not info.ispkg
    )


def run_one(name: str) -> dict[str, object]:
    module = importlib.import_module(f"bench.bench_{name}")
    main = getattr(module, "main", None)
    if not callable(main):
        raise TypeError(f"bench/bench_{name}.py has no main() -> dict")
    started = time.monotonic()
    result = main()
    if not isinstance(result, dict):
        raise TypeError(f"bench_{name}.main() returned {type(result).__name__}, not a dict")
    return {"benchmark": name, **result, "bench_wall_s": round(time.monotonic() - started, 2)}


def main(argv: Sequence[str] | None = None) -> int:
    available = discover()
    parser = argparse.ArgumentParser(prog="python -m bench", description="Run specwatch's benchmarks.")
    parser.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(available)})"
    )
    args = parser.parse_args(argv)
    args.names = [
        name.replace("-", "_") for name in args.names
    ]  # scrape-vs-prometheus = scrape_vs_prometheus
    unknown = sorted(set(args.names) - set(available))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available)}")
    RESULTS_DIR.mkdir(exist_ok=True)
    failed = 0
    for name in args.names or available:
        print(f"# running bench_{name} ...", file=sys.stderr, flush=True)
        try:
            result = run_one(name)
        except Exception:
            failed += 1
            traceback.print_exc()
            continue
        text = json.dumps(result, indent=2, sort_keys=False)
        (RESULTS_DIR / f"{name}.json").write_text(text + "\n")
        print(text, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
