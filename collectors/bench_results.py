"""``sglang.bench_serving`` result files → offline runs: each line one run, or that line's problem in words.

A result file is JSON lines, one line per run, as the client appends them (``--output-file``). A line is read
when every field the comparison needs is there with its type; anything else (not JSON, not an object, a field
missing, a string where a number belongs, NaN) is reported with its line number and the other lines still
import. The recipe comes from the run's ``server_info`` through the collector's own /server_info parser, so an
offline run of a recipe has the recipe id a live server of that recipe has.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.errors import BadServerInfo
from collectors.model import Recipe
from collectors.store.offline_runs import OfflineRun, OfflineRunStore

# The fields a run must have, by kind (the file's names). request_rate and max_concurrency must be present
# but may be "no limit": Infinity / "trace", and null.
TEXT_FIELDS = ("backend", "dataset_name")
COUNT_FIELDS = ("completed",)
NUMBER_FIELDS = (
    "duration",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
)
PRESENT_FIELDS = ("request_rate", "max_concurrency")
# Optional: older clients lack them, a server without speculation reports no accept length, goodput needs
# --goodput. A field present with a bad value is still an error.
OPTIONAL_NUMBERS = ("concurrency", "accept_length", "request_goodput", "slo_attainment")
OPTIONAL_COUNTS = ("total_input_tokens", "total_output_tokens")
# The file's name → OfflineRun's, where they differ.
_RENAMED = {
    "duration": "duration_s",
    "output_throughput": "output_tok_s",
    "request_rate": "request_rate_rps",
    "request_goodput": "request_goodput_rps",
}
MAX_COUNT = 2**53  # whole numbers beyond this are no benchmark's (and SQLite's integers end at 2**63)
MAX_LINE_BYTES = 256 * 1024 * 1024  # --output-details writes every request's token times: large, not endless


@dataclass(frozen=True, slots=True)
class LineResult:
    """One line of one file: the run read from it, or why not (``error``); ``stored`` once imported."""

    file: str
    line: int
    run: OfflineRun | None
    error: str | None = None
    stored: bool = False


@dataclass(slots=True)
class FileResult:
    """One file: its lines, or why it could not be read at all (``error``)."""

    file: str
    lines: list[LineResult] = field(default_factory=list)
    error: str | None = None

    @property
    def failed(self) -> list[LineResult]:
        return [line for line in self.lines if line.error is not None]


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_number(name: str, value: object, problems: list[str], *, infinite_ok: bool = False) -> None:
    if not _is_number(value):
        problems.append(f"{name} is {_kind(value)}, not a number")
    elif math.isnan(value):  # type: ignore[arg-type]
        problems.append(f"{name} is NaN")
    elif math.isinf(value) and not infinite_ok:  # type: ignore[arg-type]
        problems.append(f"{name} is infinite")
    elif value < 0:  # type: ignore[operator]
        problems.append(f"{name} is negative ({value})")


def _check_count(name: str, value: object, problems: list[str]) -> None:
    if isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_COUNT:
        return  # 12.0 is a count (some writers print every number as a float)
    if not isinstance(value, int) or isinstance(value, bool):
        problems.append(f"{name} is {_kind(value)}, not a whole number")
    elif value < 0:
        problems.append(f"{name} is negative ({value})")
    elif value > MAX_COUNT:
        problems.append(f"{name} is {value}, beyond any benchmark")


def _problems(data: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    required = (*TEXT_FIELDS, *COUNT_FIELDS, *NUMBER_FIELDS, *PRESENT_FIELDS)
    missing = [name for name in required if name not in data]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    for name in TEXT_FIELDS:
        if name in data and not isinstance(data[name], str):
            problems.append(f"{name} is {_kind(data[name])}, not text")
    for name in (*COUNT_FIELDS, *OPTIONAL_COUNTS):
        if name in data and (name in COUNT_FIELDS or data[name] is not None):
            _check_count(name, data[name], problems)
    for name in (*NUMBER_FIELDS, *OPTIONAL_NUMBERS):
        if name in data and (name in NUMBER_FIELDS or data[name] is not None):
            _check_number(name, data[name], problems)
    rate = data.get("request_rate")
    if "request_rate" in data and rate != "trace":  # "trace": paced by the dataset's timestamps
        _check_number("request_rate", rate, problems, infinite_ok=True)
    cap = data.get("max_concurrency")
    if cap is not None:
        _check_count("max_concurrency", cap, problems)
    info = data.get("server_info")
    if info is not None and not isinstance(info, dict):
        problems.append(f"server_info is {_kind(info)}, not an object")
    slos = data.get("goodput_slos_ms")
    if slos is not None and not isinstance(slos, dict):
        problems.append(f"goodput_slos_ms is {_kind(slos)}, not an object")
    return problems


def _recipe(info: Mapping[str, Any]) -> tuple[Recipe, int | None]:
    """The recipe and GPU count of a run's server_info, read as the collector reads /server_info."""
    # Imported here: the /server_info module lives beside the scrape transport, which a reader of stored runs
    # (the dashboard) never loads.
    from collectors.server_info import parse_server_info, recipe_from_server_info

    decode = info.get("decode")
    if isinstance(decode, list) and decode and isinstance(decode[0], dict):
        info = decode[0]  # a prefill/decode-disaggregated router: the decode servers run the recipe
    checked = parse_server_info(json.dumps(info).encode())  # the collector's checks: NaN, SGLang's keys
    return recipe_from_server_info(checked), _gpu_count(checked.get("tp_size"), checked.get("dp_size"))


def _gpu_count(tp: object, dp: object) -> int | None:
    """tp_size × dp_size (dp absent: 1); None without a tensor-parallel size."""
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        return None
    return tp * (dp if isinstance(dp, int) and not isinstance(dp, bool) and dp >= 1 else 1)


def run_id(data: Mapping[str, Any]) -> str:
    """The run's identity: a digest of its content (key order and whitespace aside)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "b-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def read_line(raw: bytes, *, file: str, line: int, now: float) -> LineResult | None:
    """One line of a result file: a run, the line's problem, or None for a blank line."""
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return LineResult(file, line, None, f"not UTF-8 text (byte {exc.start + 1})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return LineResult(file, line, None, f"not JSON ({exc.msg} at column {exc.colno})")
    except RecursionError:
        return LineResult(file, line, None, "not a benchmark result (JSON nested thousands of levels deep)")
    if not isinstance(data, dict):
        return LineResult(file, line, None, f"{_kind(data)}, not a benchmark result (a JSON object a line)")
    problems = _problems(data)
    recipe: Recipe | None = None
    gpus: int | None = None
    if not problems and data.get("server_info") is not None:
        try:
            recipe, gpus = _recipe(data["server_info"])
        except BadServerInfo as exc:
            problems.append(f"server_info is {exc}")
        except RecursionError:
            problems.append("server_info is nested thousands of levels deep; SGLang's is a few")
    if problems:
        return LineResult(file, line, None, "; ".join(problems))
    values: dict[str, Any] = {_RENAMED.get(name, name): data[name] for name in (*TEXT_FIELDS, *NUMBER_FIELDS)}
    values.update(
        completed=int(data["completed"]),
        max_concurrency=None if data["max_concurrency"] is None else int(data["max_concurrency"]),
        request_rate_rps=None if data["request_rate"] == "trace" else float(data["request_rate"]),
        tag=data["tag"] if isinstance(data.get("tag"), str) else None,
        goodput_slos_ms=json.dumps(data["goodput_slos_ms"]) if data.get("goodput_slos_ms") else None,
    )
    for name in OPTIONAL_NUMBERS:
        values[_RENAMED.get(name, name)] = data.get(name)
    for name in OPTIONAL_COUNTS:
        values[name] = None if data.get(name) is None else int(data[name])
    run = OfflineRun(
        run_id=run_id(data),
        recipe_id=recipe.recipe_id if recipe is not None else None,
        recipe_flags=json.dumps(recipe.as_dict()) if recipe is not None else None,
        gpu_count=gpus,
        source_file=file,
        source_line=line,
        imported_ts=now,
        **values,
    )
    return LineResult(file, line, run)


def read_file(path: Path) -> FileResult:
    """Every line of ``path`` read; a file that cannot be read at all says so in ``error``."""
    shown = str(path)
    result = FileResult(shown)
    now = time.time()
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(_lines(handle), start=1):
                if isinstance(raw, str):
                    result.lines.append(LineResult(shown, number, None, raw))
                    continue
                line = read_line(raw, file=shown, line=number, now=now)
                if line is not None:
                    result.lines.append(line)
    except FileNotFoundError:
        result.error = "no such file"
    except IsADirectoryError:
        result.error = "a directory, not a result file (name the .jsonl files in it)"
    except PermissionError:
        result.error = "not readable (permission denied)"
    except OSError as exc:
        result.error = f"cannot be read ({exc.strerror or exc})"
    return result


def _lines(handle: Any) -> Iterator[bytes | str]:
    """The file's lines, or for one longer than MAX_LINE_BYTES a sentence saying so (its rest skipped)."""
    while True:
        raw: bytes = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield f"longer than {MAX_LINE_BYTES // 2**20} MiB: not a benchmark result"
            continue
        yield raw


def import_files(store_path: str, paths: list[Path]) -> list[FileResult]:
    """Read each file and store its runs in the offline-run table of ``store_path``; a run stored before (or
    earlier in the same files) is left as it is, with ``stored`` False. ``StoreError`` if the store cannot be
    written."""
    results = [read_file(path) for path in paths]
    store = OfflineRunStore(store_path)
    try:
        for result in results:
            runs = [line.run for line in result.lines if line.run is not None]
            new = store.add(runs) if runs else set()
            marked: list[LineResult] = []
            for line in result.lines:
                first = line.run is not None and line.run.run_id in new
                if first and line.run is not None:
                    new.discard(line.run.run_id)  # the same run again further down is a duplicate
                marked.append(LineResult(line.file, line.line, line.run, line.error, first))
            result.lines = marked
    finally:
        store.close()
    return results
