"""Instant answers (``resultType: vector``) read as (instance, job) → value, what the source's cycle needs.

A cycle reads ~28 of them every interval, one series per target each (1,000 targets: ~2.3 MB). Parsed whole,
every series is a dict and a list the garbage collector tracks, ~3,000 per answer alive at once, and its
key one more: in a dashboard's heap that promoted enough of them to the oldest generation to set off a full
collection most cycles (0.13–0.15 s each in a 1,000-server bench process, half the cycle's CPU). Here each
series' labels alone are parsed (a dict of strings, which the collector does not track), its key is the
process's one key of that target (``target_key``), and its value is cut out of the body as bytes, as
``matrix.py`` does for range answers and for the same reason it is safe: JSON escapes every quote inside a
string, so ``{"metric":`` and ``,"value":[`` occur only as structure. Anything unexpected returns None and
the caller parses the whole body instead: same answer, more garbage (``bench/bench_source_cycle.py``).

Nearly every answer of a cycle is ``by (instance, job)``: each series is the same 50-odd bytes of structure
around four strings. Those are read with one regular expression over the whole result (in C), checked to
have met every series and nothing else; any other answer has each series' labels parsed one by one. The
one pass costs 0.6× that per-series read (``bench/bench_cycle_decode.py``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from collectors.prometheus.matrix import RESULT, SERIES, cut_series, envelope_around
from collectors.prometheus.naming import TargetKey

_VALUE = b',"value":['
_END = b"]}"
# One series of a `by (instance, job)` answer exactly as both engines write it (labels in name order, no
# escape in any string: a backslash anywhere and the series is not met, so the count check sends the answer
# to the per-series read).
_INSTANCE_JOB = re.compile(
    rb'\{"metric":\{"instance":"([^"\\]*)","job":"([^"\\]*)"\},"value":\[([0-9.eE+-]+),"([^"\\]*)"\]\}'
)
_INSTANCE_JOB_FIXED = len(b'{"metric":{"instance":"","job":""},"value":[,""]}')


# One key object per target for the process: a cycle's ~28,000 keys are then the same few thousand objects
# cycle after cycle, not new ones the collector tracks (a NamedTuple, unlike a plain tuple of strings, stays
# tracked for good). Cleared past a bound, for a fleet whose targets keep changing names.
_KEYS: dict[tuple[str, str], TargetKey] = {}
_KEYS_KEPT = 100_000


def target_key(instance: str, job: str) -> TargetKey:
    """The process's one ``TargetKey`` of (instance, job)."""
    pair = (instance, job)
    key = _KEYS.get(pair)
    if key is None:
        if len(_KEYS) >= _KEYS_KEPT:
            _KEYS.clear()
        key = _KEYS[pair] = TargetKey(instance, job)
    return key


_BYTE_KEYS: dict[tuple[bytes, bytes], TargetKey] = {}


def _target_key_of_bytes(instance: bytes, job: bytes) -> TargetKey:
    """``target_key`` of labels as the answer's bytes (UTF-8, unescaped), without decoding them each cycle."""
    key = _BYTE_KEYS.get((instance, job))
    if key is None:
        if len(_BYTE_KEYS) >= _KEYS_KEPT:
            _BYTE_KEYS.clear()
        key = _BYTE_KEYS[(instance, job)] = target_key(instance.decode(), job.decode())
    return key


@dataclass(frozen=True, slots=True)
class Vector:
    """A decoded instant answer: the envelope without its result, and each target's value (None: unknown)."""

    envelope: dict[str, Any]
    by_target: dict[TargetKey, float | None]


def finite(text: object) -> float | None:
    """A sample value as Prometheus writes it (a string), None for NaN and ±Inf (unknown, never zero)."""
    try:
        value = float(text if isinstance(text, bytes) else str(text))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def vector_by_target(result: list[Any]) -> dict[TargetKey, float | None]:
    """A parsed vector's ``result`` as (instance, job) → value, the last series of a key winning; raises
    KeyError, TypeError, ... on an entry not shaped as Prometheus writes one."""
    by_key: dict[TargetKey, float | None] = {}
    for item in result:
        metric = item.get("metric") or {}
        by_key[target_key(metric.get("instance", ""), metric.get("job", ""))] = finite(item["value"][1])
    return by_key


def decode_vector(body: bytes) -> Vector | None:
    """The vector in ``body`` by target (as ``vector_by_target``), or None when it is not laid out as
    Prometheus and VictoriaMetrics write it."""
    by_instance_job = _decode_by_instance_job(body)
    if by_instance_job is not None:
        return by_instance_job
    cut = cut_series(body, _VALUE, _END)
    if cut is None:
        return None
    envelope, labels, values = cut
    by_key: dict[TargetKey, float | None] = {}
    for metric, value in zip(labels, values, strict=True):
        pair = value.split(b",")
        if len(pair) != 2 or not pair[1].startswith(b'"'):
            return None
        by_key[target_key(metric.get("instance", ""), metric.get("job", ""))] = finite(pair[1].strip(b'"'))
    return Vector(envelope, by_key)


def _decode_by_instance_job(body: bytes) -> Vector | None:
    """A vector whose every series is labelled ``instance`` and ``job`` alone, read in one pass; None for any
    other (the per-series read then decides)."""
    start = body.find(RESULT)
    if start < 0:
        return None
    start += len(RESULT)
    found = _INSTANCE_JOB.findall(body, start)
    # Every series met, and met whole: as many as the series that open in the result (``{"metric":`` is
    # never inside a string), the first where the result opens, and their bytes with a comma between each
    # two span it to its closing bracket.
    if not found or len(found) != body.count(SERIES, start) or not body.startswith(SERIES, start):
        return None
    by_key: dict[TargetKey, float | None] = {}
    end = start + len(found) - 1
    try:
        for instance, job, at, value in found:
            end += _INSTANCE_JOB_FIXED + len(instance) + len(job) + len(at) + len(value)
            by_key[_target_key_of_bytes(instance, job)] = finite(value)
    except UnicodeDecodeError:
        return None
    envelope = envelope_around(body, start, end)
    return Vector(envelope, by_key) if envelope is not None else None
