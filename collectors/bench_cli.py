"""``specwatch import bench FILE… --config F [--json]``: store ``sglang.bench_serving`` results beside the
live history, so the Recipes page can put each offline run beside production at the same concurrency.

One line per run read (its recipe, concurrency, output tok/s, TPOT, accept length, and whether it was new), a
line per line that could not be read (``file:line`` and why), then a summary per file. ``--json`` prints one
JSON object per line of input instead, with the keys ``file``, ``line``, ``recipe_id``, ``max_concurrency``,
``output_throughput``, ``mean_tpot_ms``, ``accept_length``, ``stored`` (false for a run stored before) and
``error``; ``null`` is unknown.

Exit status: 0 when every line was stored or already stored (an empty file included); 1 when a line could not
be read (the others were stored); 2 when a file could not be read at all or the command is wrong; 3 when the
store could not be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collectors.bench_results import FileResult, LineResult, import_files
from collectors.errors import StoreError
from config import ConfigError, load_config

EXIT_OK, EXIT_BAD_LINES, EXIT_BAD_FILE, EXIT_STORE = 0, 1, 2, 3
PROG = "specwatch import bench"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specwatch import",
        description="Import offline benchmark results into the history store.",
        epilog="Exit status: 0 all stored or already stored; 1 some lines unreadable (the rest stored); "
        "2 a file unreadable or bad arguments; 3 the store could not be written.",
    )
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="WHAT")
    bench = kinds.add_parser(
        "bench",
        help="sglang.bench_serving result files (JSON lines, one run a line)",
        description="Store sglang.bench_serving result files (--output-file, JSON lines) in the history "
        "store the config names; a run stored before is not stored again.",
    )
    bench.add_argument("files", nargs="+", metavar="FILE", help="result files (.jsonl)")
    bench.add_argument("--config", required=True, metavar="F", help="specwatch config: where the store is")
    bench.add_argument("--json", action="store_true", help="one JSON object per line of input")
    return parser


def line_record(line: LineResult) -> dict[str, Any]:
    """The ``--json`` object of one line (the keys the README documents)."""
    run = line.run
    return {
        "file": line.file,
        "line": line.line,
        "recipe_id": run.recipe_id if run else None,
        "max_concurrency": run.max_concurrency if run else None,
        "output_throughput": run.output_tok_s if run else None,
        "mean_tpot_ms": run.mean_tpot_ms if run else None,
        "accept_length": run.accept_length if run else None,
        "stored": line.stored,
        "error": line.error,
    }


def _text(line: LineResult) -> str:
    run = line.run
    where = f"{line.file}:{line.line}"
    if run is None:
        return f"{where}: {line.error}"
    recipe = run.recipe_id or "recipe unknown (the run has no server_info)"
    concurrency = f"concurrency {run.max_concurrency}" if run.max_concurrency else "no concurrency cap"
    accept = f"accept length {run.accept_length:.2f}" if run.accept_length else "accept length unknown"
    state = "stored" if line.stored else "already stored"
    return (
        f"{where}: {recipe}, {concurrency}: {run.output_tok_s:,.1f} output tok/s, "
        f"TPOT {run.mean_tpot_ms:.2f} ms, {accept} — {state}"
    )


def _summary(result: FileResult) -> str:
    runs = [line for line in result.lines if line.run is not None]
    stored = sum(line.stored for line in runs)
    parts = [f"{stored} run{'s' * (stored != 1)} stored", f"{len(runs) - stored} already stored"]
    if result.failed:
        count = len(result.failed)
        parts.append(f"{count} line{'s' * (count != 1)} not imported")
    return f"{result.file}: {', '.join(parts)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    try:
        config = load_config(options.config)
    except (ConfigError, OSError) as exc:
        print(f"{PROG}: configuration error: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    try:
        results = import_files(config.store.path, [Path(name) for name in options.files])
    except (StoreError, OSError) as exc:  # OSError: the store's folder cannot be made (files are read apart)
        print(f"{PROG}: nothing stored: {exc}", file=sys.stderr)
        return EXIT_STORE
    status = EXIT_OK
    for result in results:
        if result.error is not None:
            print(f"{PROG}: {result.file}: {result.error}", file=sys.stderr)
            if options.json:
                record = line_record(LineResult(result.file, 0, None, result.error)) | {"line": None}
                print(json.dumps(record))
            status = EXIT_BAD_FILE
            continue
        if not result.lines:
            print(f"{PROG}: {result.file}: empty: no runs in it", file=sys.stderr)
            continue
        for line in result.lines:
            print(json.dumps(line_record(line)) if options.json else _text(line))
        if not options.json:
            print(_summary(result))
        if result.failed and status == EXIT_OK:
            status = EXIT_BAD_LINES
    return status
