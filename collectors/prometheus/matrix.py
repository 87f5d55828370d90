"""Range answers (``resultType: matrix``) read without a Python object per point.

A fleet's range answer is one series per target of ``[timestamp, "value"]`` pairs: 1,000 servers × 150
points is 150,000 pairs, ~4 MB of JSON. A JSON parser makes two lists and two Python numbers or strings of
every pair before numpy sees them; here only each series' labels are parsed as JSON (orjson): its points are
cut out of the body as bytes, stripped of brackets and quotes, and parsed by numpy in one pass
(``np.fromstring``, text mode).

The cut is safe because JSON escapes every quote inside a string: ``{"metric":`` and ``,"values":[[`` can
only occur as structure, never inside a label value. Anything unexpected (another layout, a value numpy
would not read) returns None and the caller reads the whole body as JSON instead: same answer, slower.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

RESULT = b'"result":['
SERIES = b'{"metric":'
_VALUES = b',"values":[['
_END = b"]]}"
# What a points list may hold once brackets and quotes are gone: numbers, NaN, ±Inf and the commas.
_NUMBER_BYTES = b"0123456789.,eE+-naNIf"
_STRUCTURE = b'[]"'


@dataclass(frozen=True, slots=True, eq=False)
class RangeSeries:
    """One series of a range (matrix) answer: float64 arrays of unix seconds and values (NaN = unknown,
    including ±Inf), as arrays because a fleet's range answer runs to millions of points."""

    labels: Mapping[str, str]
    timestamps: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Matrix:
    """A decoded range answer: the envelope without its result (status, data.resultType, warnings, ...) and
    each series' labels, timestamps and values (NaN for NaN and ±Inf: unknown)."""

    envelope: dict[str, Any]
    labels: list[Mapping[str, str]]
    timestamps: list[npt.NDArray[np.float64]]
    values: list[npt.NDArray[np.float64]]


def cut_series(
    body: bytes, opening: bytes, closing: bytes
) -> tuple[dict[str, Any], list[Any], list[bytes]] | None:
    """An answer's envelope (without its result), each series' labels (parsed) and the bytes between
    ``opening`` and ``closing`` after them (its points or value, unparsed); None when the answer is not laid
    out as Prometheus and VictoriaMetrics write it. Shared by range and instant answers."""
    start = body.find(RESULT)
    if start < 0:
        return None
    start += len(RESULT)
    labels: list[Any] = []
    raw: list[bytes] = []
    at = start
    while body.startswith(SERIES, at):
        split = body.find(opening, at)
        end = body.find(closing, split)
        if split < 0 or end < 0:
            return None
        try:
            metric = orjson.loads(body[at + len(SERIES) : split])
        except ValueError:
            return None
        if not isinstance(metric, dict):
            return None
        labels.append(metric)
        raw.append(body[split + len(opening) : end])
        at = end + len(closing)
        if body.startswith(b",", at):
            at += 1
    envelope = envelope_around(body, start, at)
    return (envelope, labels, raw) if envelope is not None else None


def envelope_around(body: bytes, start: int, end: int) -> dict[str, Any] | None:
    """The answer around its result's series (``body[start:end]``), parsed: None unless the result closes at
    ``end`` and what is left is a JSON object."""
    if not body.startswith(b"]", end):
        return None
    try:
        envelope = orjson.loads(body[:start] + body[end:])
    except ValueError:
        return None
    return envelope if isinstance(envelope, dict) else None


def decode_matrix(body: bytes) -> Matrix | None:
    """The matrix in ``body``, or None when it is not laid out as Prometheus and VictoriaMetrics write it."""
    cut = cut_series(body, _VALUES, _END)
    if cut is None:
        return None
    envelope, labels, points = cut
    parsed = _numbers(points)
    if parsed is None:
        return None
    timestamps, values = parsed
    return Matrix(envelope, labels, timestamps, values)


def _numbers(
    points: list[bytes],
) -> tuple[list[npt.NDArray[np.float64]], list[npt.NDArray[np.float64]]] | None:
    """Each series' ``ts,"v"],[ts,"v"`` as timestamps and values, all series in one numpy parse."""
    if not points:
        return [], []
    flat = [p.translate(None, _STRUCTURE) for p in points]
    joined = b",".join(flat)
    if joined.translate(None, _NUMBER_BYTES) or b",," in joined or joined.startswith(b","):
        return None
    counts = [f.count(b",") + 1 for f in flat]
    try:
        numbers = np.fromstring(joined, dtype=np.float64, sep=",")  # text mode: parses NaN, +Inf, -Inf
    except (ValueError, DeprecationWarning):  # a token numpy cannot read (warnings raised as errors)
        return None
    if len(numbers) != sum(counts) or any(count % 2 for count in counts):
        return None
    numbers[~np.isfinite(numbers)] = np.nan  # ±Inf values are unknown; timestamps are always finite
    timestamps: list[npt.NDArray[np.float64]] = []
    values: list[npt.NDArray[np.float64]] = []
    first = 0
    for count in counts:
        pairs = numbers[first : first + count]
        timestamps.append(pairs[0::2].copy())
        values.append(pairs[1::2].copy())
        first += count
    return timestamps, values
