"""``specwatch import bench``: sglang.bench_serving result files into the store, each run once, each bad line
named with its number while the rest import, and a typed read of what was stored.

The lines are the real client's: the demo's shipped results (``sim/bench_results/demo``), produced by
``python -m sglang.bench_serving`` against the simulated demo servers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from collectors.store.offline_runs import OfflineRunStore
from sim.bench_client import DEMO_CONCURRENCIES, DEMO_SERVERS, result_files
from sim.fleet import SimFleet
from specwatch_cli import main as specwatch
from tests.sim.bench_fields import assert_run_matches

DEMO_FILES = result_files("demo")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "specwatch.yaml"
    path.write_text(f"source: direct\nstore: {{path: {tmp_path / 'history.sqlite'}}}\n")
    return path


def store_of(config: Path) -> OfflineRunStore:
    return OfflineRunStore(str(config.parent / "history.sqlite"), create=False)


def run_import(
    capsys: pytest.CaptureFixture[str], config: Path, *files: Path | str, as_json: bool = True
) -> tuple[int, list[dict[str, Any]] | str, str]:
    status = specwatch(
        ["import", "bench", *map(str, files), "--config", str(config), *(["--json"] * as_json)]
    )
    out, err = capsys.readouterr()
    return status, ([json.loads(line) for line in out.splitlines()] if as_json else out), err


def demo_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for path in DEMO_FILES for line in path.read_text().splitlines()]


def test_the_shipped_demo_results_are_the_real_clients_for_the_demo_recipes() -> None:
    lines = demo_lines()
    assert len(DEMO_FILES) == len(DEMO_SERVERS)
    assert sorted({line["max_concurrency"] for line in lines}) == list(DEMO_CONCURRENCIES)
    assert all(line["backend"] == "sglang" and line["completed"] > 0 for line in lines)
    assert {line["server_info"]["version"] for line in lines} == {"0.5.23"}


def test_real_client_results_import_field_for_field(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    status, records, _ = run_import(capsys, config, *DEMO_FILES)
    assert status == 0
    assert isinstance(records, list)
    assert all(r["stored"] and r["error"] is None for r in records)
    lines = demo_lines()
    assert len(records) == len(lines)
    runs = {(run.source_file, run.source_line): run for run in store_of(config).runs()}
    for record, line in zip(records, lines, strict=True):
        run = runs[(record["file"], record["line"])]
        assert_run_matches(run, line)
        assert record["recipe_id"] == run.recipe_id
        assert record["max_concurrency"] == line["max_concurrency"]
        assert record["output_throughput"] == line["output_throughput"]
        assert record["mean_tpot_ms"] == line["mean_tpot_ms"]
        assert record["accept_length"] == line["accept_length"]
    # The recipe ids are the demo fleet's: each offline run joins its recipe's live servers.
    demo = SimFleet("demo")
    live = {demo.server(name).recipe.recipe_id for name in DEMO_SERVERS}
    assert {run.recipe_id for run in runs.values()} == live
    speculative = [run for run in runs.values() if run.accept_length is not None]
    assert speculative  # the DSpark recipes report an accept length; the plain one does not
    for run in speculative:
        assert run.step_latency_ms == pytest.approx(run.accept_length * run.mean_tpot_ms)
    run = next(iter(runs.values()))
    assert run.per_request_tok_s == pytest.approx(1000 / run.mean_tpot_ms)
    assert run.output_tok_s_per_gpu == pytest.approx(run.output_tok_s / 2)  # TP 2
    assert run.recipe is not None
    assert run.recipe.recipe_id == run.recipe_id


def test_a_file_imported_twice_stores_nothing_new(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    source = DEMO_FILES[0]
    assert run_import(capsys, config, source)[0] == 0
    count = len(store_of(config).runs())
    # The same runs again: from the same file, from a copy, and rewritten with other key order and spacing.
    copy = tmp_path / "copy.jsonl"
    copy.write_text(source.read_text())
    rewritten = tmp_path / "rewritten.jsonl"
    rewritten.write_text(
        "\n".join(
            json.dumps(json.loads(line), sort_keys=True, indent=None)
            for line in source.read_text().splitlines()
        )
    )
    status, records, _ = run_import(capsys, config, source, copy, rewritten)
    assert status == 0
    assert isinstance(records, list)
    assert records
    assert not any(r["stored"] for r in records)
    assert all(r["error"] is None for r in records)
    assert len(store_of(config).runs()) == count
    status, text, _ = run_import(capsys, config, source, as_json=False)
    assert status == 0
    assert f"{source}: 0 runs stored, {count} already stored" in str(text)


def test_bad_lines_are_named_and_the_rest_import(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    good, other = demo_lines()[:2]
    missing = {k: v for k, v in good.items() if k != "output_throughput"}
    wrong_type = {**good, "completed": "32"}
    server_info_list = {**good, "server_info": [good["server_info"]]}
    not_sglang = {**good, "server_info": {"hello": "world"}}
    lines = [
        json.dumps(good),  # 1
        "not json at all",  # 2
        "[1, 2, 3]",  # 3
        json.dumps(missing),  # 4
        json.dumps(wrong_type),  # 5
        json.dumps(good).replace(
            f'"mean_tpot_ms": {json.dumps(good["mean_tpot_ms"])}', '"mean_tpot_ms": NaN'
        ),  # 6
        "",  # 7: blank lines are no runs
        json.dumps(server_info_list),  # 8
        json.dumps(not_sglang),  # 9
        json.dumps(other),  # 10
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    status, records, _ = run_import(capsys, config, path)
    assert status == 1  # some lines failed; the good ones are stored
    assert isinstance(records, list)
    errors = {r["line"]: r["error"] for r in records if r["error"]}
    assert [r["line"] for r in records if r["stored"]] == [1, 10]
    assert set(errors) == {2, 3, 4, 5, 6, 8, 9}
    assert errors[2].startswith("not JSON")
    assert "not a benchmark result" in errors[3]
    assert errors[4] == "missing output_throughput"
    assert errors[5] == "completed is a string, not a whole number"
    assert errors[6] == "mean_tpot_ms is NaN"
    assert errors[8] == "server_info is a list, not an object"
    assert "without SGLang server-info fields" in errors[9]
    assert all(r["recipe_id"] is None and not r["stored"] for r in records if r["error"])
    assert len(store_of(config).runs()) == 2
    status, text, _ = run_import(capsys, config, path, as_json=False)
    assert status == 1
    assert f"{path}:4: missing output_throughput" in str(text)
    assert f"{path}: 0 runs stored, 2 already stored, 7 lines not imported" in str(text)


def test_a_run_without_server_info_is_stored_with_its_recipe_unknown(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    line = {**demo_lines()[0], "server_info": None, "request_rate": math.inf}  # /server_info was not readable
    path = tmp_path / "no-info.jsonl"
    path.write_text(json.dumps(line) + "\n")  # Infinity, as the client writes the default request rate
    status, records, _ = run_import(capsys, config, path)
    assert status == 0
    assert isinstance(records, list)
    assert records[0]["recipe_id"] is None
    assert records[0]["stored"] is True
    (run,) = store_of(config).runs()
    assert run.recipe_id is None
    assert run.gpu_count is None
    assert run.output_tok_s_per_gpu is None  # unknown, not zero
    assert run.request_rate_rps == math.inf


def test_empty_missing_and_directory_files(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    status, records, err = run_import(capsys, config, empty)
    assert status == 0
    assert records == []
    assert err.strip() == f"specwatch import bench: {empty}: empty: no runs in it"
    status, records, err = run_import(capsys, config, tmp_path / "nope.jsonl", tmp_path, DEMO_FILES[0])
    assert status == 2  # a file could not be read; the readable one was still imported
    assert err.splitlines() == [
        f"specwatch import bench: {tmp_path / 'nope.jsonl'}: no such file",
        f"specwatch import bench: {tmp_path}: a directory, not a result file (name the .jsonl files in it)",
    ]
    assert isinstance(records, list)
    assert [r["error"] for r in records if r["line"] is None] == [
        "no such file",
        "a directory, not a result file (name the .jsonl files in it)",
    ]
    assert sum(r["stored"] for r in records) == len(DEMO_FILES[0].read_text().splitlines())
    assert "Traceback" not in err


def test_bad_config_and_unwritable_store(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert specwatch(["import", "bench", str(DEMO_FILES[0]), "--config", str(tmp_path / "none.yaml")]) == 2
    assert "configuration error" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = tmp_path / "specwatch.yaml"
    config.write_text(f"source: direct\nstore: {{path: {blocker / 'history.sqlite'}}}\n")
    assert specwatch(["import", "bench", str(DEMO_FILES[0]), "--config", str(config)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("specwatch import bench: nothing stored:")
    assert "Traceback" not in err


def test_reader_of_a_store_without_offline_runs(tmp_path: Path) -> None:
    store = OfflineRunStore(str(tmp_path / "history.sqlite"), create=False)
    assert store.runs() == []
    frame = store.frame()
    assert frame.empty
    assert {
        "recipe_id",
        "max_concurrency",
        "output_tok_s",
        "per_request_tok_s",
        "output_tok_s_per_gpu",
    } <= set(frame.columns)


def test_the_demo_imports_its_shipped_runs_at_start_once(tmp_path: Path) -> None:
    import app

    store = str(tmp_path / "history.sqlite")
    app._import_shipped_bench_results(store, "demo")
    first = OfflineRunStore(store, create=False).runs()
    assert len(first) == len(demo_lines())
    app._import_shipped_bench_results(store, "demo")  # a restarted dashboard stores nothing new
    app._import_shipped_bench_results(store, "faults")  # a scenario without shipped results
    assert OfflineRunStore(store, create=False).runs() == first
