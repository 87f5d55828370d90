"""A source cycle's answers decoded: what ``source: prometheus`` pays in Python every interval to read the
fleet from its engine, before any page draws.

A cycle asks ~28 instant queries, each answering one series per target (1,000 targets: ~2.3 MB of JSON in
all, as VictoriaMetrics and Prometheus answered in ``bench prometheus``). Timed in the same run, on answers
laid out as both engines write them, cycle after cycle with a dashboard-sized heap alive (``HEAP_OBJECTS``
objects the garbage collector tracks: a full collection walks all of them, and what a cycle leaves
promoted to the oldest generation decides how often one runs):

- ``json_samples``: the path before (``json.loads``, an ``InstantSample`` with a copy of its labels per
  series, then a dict keyed by target) — the baseline;
- ``orjson_parsed``: ``orjson.loads`` of the whole answer, then ``vector_by_target`` (the fallback);
- ``per_series``: ``decode_vector`` with its one-pass read of ``by (instance, job)`` answers switched off:
  each series' labels parsed on their own (the lean read before the one pass);
- ``lean``: ``decode_vector``, the client's path (``collectors/prometheus/vector.py``).

Each path's CPU per cycle is the median of ``CYCLES`` cycles' mean, GC included, and the full collections
it set off are counted. Results: the README's Benchmarks table (``python -m bench cycle_decode``).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import orjson

from collectors.prometheus import vector
from collectors.prometheus.client import InstantSample
from collectors.prometheus.naming import TargetKey
from collectors.prometheus.vector import decode_vector, finite, vector_by_target

TARGETS = 1000
ANSWERS = 28
CYCLES = 20
HEAP_OBJECTS = 1_500_000


def _answer(query: int, targets: int) -> bytes:
    """One instant answer as the engines write it: a vector, one series per target, values as strings."""
    result = [
        {
            "metric": {"instance": f"sglang-{i:04d}.fleet.internal:30000", "job": "sglang"},
            "value": [1796649231.415, repr(0.5 + (i * 7 + query) % 97 / 31.0)],
        }
        for i in range(targets)
    ]
    envelope = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(envelope, separators=(",", ":")).encode()


def _json_samples(body: bytes) -> dict[TargetKey, float | None]:
    result = json.loads(body)["data"]["result"]
    samples = [
        InstantSample(dict(item.get("metric", {})), finite(item["value"][1]), float(item["value"][0]))
        for item in result
    ]
    return {TargetKey.of(sample.labels): sample.value for sample in samples}


def _orjson_parsed(body: bytes) -> dict[TargetKey, float | None]:
    return vector_by_target(orjson.loads(body)["data"]["result"])


def _lean(body: bytes) -> dict[TargetKey, float | None]:
    vector = decode_vector(body)
    if vector is None:
        raise AssertionError("the lean read refused an answer laid out as the engines write it")
    return vector.by_target


def _one_pass_off() -> mock._patch[Any]:
    return mock.patch.object(vector, "_decode_by_instance_job", return_value=None)


def _cycles(
    decode: Callable[[bytes], dict[TargetKey, float | None]], bodies: list[bytes]
) -> dict[str, float]:
    """CPU seconds per cycle (each cycle keeps its answers until the next, as the source does) and the full
    collections per cycle."""
    full = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full[0] += 1

    gc.collect()
    gc.callbacks.append(count)
    kept: list[dict[TargetKey, float | None]] = []
    try:
        started = time.process_time()
        for _ in range(CYCLES):
            kept = [decode(body) for body in bodies]
        cpu_s = (time.process_time() - started) / CYCLES
    finally:
        gc.callbacks.remove(count)
    if sum(len(answer) for answer in kept) != TARGETS * len(bodies):
        raise AssertionError(f"{decode.__name__} lost targets")
    return {"cpu_ms": round(cpu_s * 1000, 1), "full_collections_per_cycle": round(full[0] / CYCLES, 2)}


def main() -> dict[str, object]:
    bodies = [_answer(query, TARGETS) for query in range(ANSWERS)]
    expected = _json_samples(bodies[0])
    for decode in (_orjson_parsed, _lean):
        if decode(bodies[0]) != expected:
            raise AssertionError(f"{decode.__name__} answers otherwise than json")
    with _one_pass_off():
        if _lean(bodies[0]) != expected:
            raise AssertionError("the per-series read answers otherwise than json")
    heap = [{"kept": [i]} for i in range(HEAP_OBJECTS // 2)]  # tracked: a dict and a list each
    per_cycle = {
        "json_samples": _cycles(_json_samples, bodies),
        "orjson_parsed": _cycles(_orjson_parsed, bodies),
    }
    with _one_pass_off():
        per_cycle["per_series"] = _cycles(_lean, bodies)
    per_cycle["lean"] = _cycles(_lean, bodies)
    del heap
    baseline = per_cycle["json_samples"]["cpu_ms"]
    return {
        "targets": TARGETS,
        "answers": ANSWERS,
        "answer_mb": round(sum(len(b) for b in bodies) / 1e6, 2),
        "heap_objects": HEAP_OBJECTS,
        "per_cycle": per_cycle,
        "speedup_over_json_samples": {
            name: round(baseline / found["cpu_ms"], 2) for name, found in per_cycle.items() if found["cpu_ms"]
        },
    }
