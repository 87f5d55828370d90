"""The store's reads as numpy columns (``SampleColumns``): only the columns a page draws, never every row
of 26 columns.

A 1,000-server Fleet chart needs ts, target, up and two or three signals of ~100 k rows. Read as 26-column
tuples turned into a DataFrame those cost ~1 s at 24 h; here they come as a handful of columns straight into
arrays, with the same means, the same pixel regrouping and the same order (target, then time) as a full read.

Three things make it cheap:

- Tier reads walk each target's primary-key range (a skip-scan over the distinct targets, then
  ``target = ? AND bucket_ts BETWEEN``): contiguous pages, instead of the ``bucket_ts`` index whose every
  entry costs a random lookup into a multi-GB table (0.16 s instead of 0.55 s for 96 k rows).
- Fleet-wide reads (``read_fleet``) go a batch of targets (tiers) or a slice of the range (raw rows) at a
  time, each regrouped to the pixel width before the next is read: at 1,000 servers a 1 h raw read held
  720 k rows (a 6 h one 360 k rows of the 1 min tier) before regrouping them to ~300 k; now it holds the
  result plus one batch's rows (peak RSS of those reads 143 -> 82 MB and 100 -> 52 MB, same time).
- Raw reads can go through a ``RawTail``: the last window's rows kept in memory, and on the next read only
  rows written since (``rowid`` above the newest one held): one cycle's rows instead of 15 minutes of them.
  Rowids grow with every insert whatever the row's timestamp, so late or backfilled rows are caught too.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from collectors.sample_columns import (
    SAMPLE_TEXTS,
    SAMPLE_VALUES,
    FloatArray,
    IntArray,
    ObjectArray,
    SampleColumns,
    check_columns,
    empty_columns,
    objects,
    regroup,
    runs,
    take,
    target_codes,
)
from collectors.store.tiers import Tier


def _distinct_targets_cte(table: str) -> str:
    """Every target of ``table`` in order, one index seek each (SQLite has no skip-scan of its own here)."""
    return (
        f"WITH RECURSIVE names(name) AS (SELECT MIN(target) FROM {table} "
        f"UNION ALL SELECT (SELECT MIN(target) FROM {table} WHERE target > names.name) FROM names "
        "WHERE names.name IS NOT NULL) "
    )


def _names_cte(names: Sequence[str]) -> str:
    """The batch's target names as a CTE in the order given (name order: the rows come out in it)."""
    return f"WITH names(name) AS (VALUES {', '.join('(?)' for _ in names)}) "


def _tier_select(tier: Tier, values: Sequence[str], texts: Sequence[str]) -> str:
    means = "".join(f", t.{name}_sum / NULLIF(t.{name}_n, 0)" for name in values)
    text = "".join(f", t.{name}" for name in texts)
    return f"SELECT t.target{text}, t.ts_sum / t.n, t.up_n = t.n, t.n{means} FROM "


def read_tier(
    connection: sqlite3.Connection,
    tier: Tier,
    start_ts: float,
    end_ts: float,
    values: Sequence[str],
    targets: Sequence[str],
    texts: Sequence[str] = (),
) -> SampleColumns:
    """Bucket means of ``values`` from one tier, of ``targets``, in [start_ts, end_ts] (and each bucket's
    newest ``texts``). Every target: ``read_fleet``."""
    check_columns(values, texts)
    sql = (
        f"{_tier_select(tier, values, texts)}{tier.table} AS t "
        f"WHERE t.target IN ({', '.join('?' for _ in targets)}) "
        "AND t.bucket_ts >= ? AND t.bucket_ts <= ? ORDER BY t.target, t.bucket_ts"
    )
    return _tier_columns(connection.execute(sql, [*targets, start_ts, end_ts]), values, texts)


def _read_tier_batch(
    connection: sqlite3.Connection,
    tier: Tier,
    start_ts: float,
    end_ts: float,
    values: Sequence[str],
    names: Sequence[str],
    texts: Sequence[str],
) -> SampleColumns:
    """``names`` (sorted) read one primary-key range each (``target = ? AND bucket_ts BETWEEN``, forced by
    the CROSS JOIN): contiguous pages, not the ``bucket_ts`` index's random lookups."""
    sql = (
        f"{_names_cte(names)}{_tier_select(tier, values, texts)}names "
        f"CROSS JOIN {tier.table} AS t ON t.target = names.name AND t.bucket_ts >= ? AND t.bucket_ts <= ?"
    )
    return _tier_columns(connection.execute(sql, [*names, start_ts, end_ts]), values, texts)


def _tier_columns(cursor: sqlite3.Cursor, values: Sequence[str], texts: Sequence[str]) -> SampleColumns:
    target, text, numeric = _fetch(cursor, 3 + len(values), len(texts))
    if len(target) == 0:
        return empty_columns(values, texts)
    columns = SampleColumns(
        target,
        target_codes(target),
        numeric[0],
        numeric[1],
        numeric[2],
        {name: numeric[3 + i] for i, name in enumerate(values)},
        dict(zip(texts, text, strict=True)),
    )
    # The key yields target, then bucket order; a planner that chose otherwise costs a sort, not a bug.
    if not _is_sorted(columns.code, columns.ts):
        columns = take(columns, np.lexsort((columns.ts, columns.code)))
    return columns


_CHUNK_ROWS = 4_096


def _fetch(
    cursor: sqlite3.Cursor, numeric_columns: int, text_columns: int = 0
) -> tuple[ObjectArray, list[ObjectArray], list[FloatArray]]:
    """A result of (target, *texts, *numbers) rows as a target column, one object array per text (None
    kept) and one float array per number, a chunk at a time.

    ``fetchall`` of 180 k rows holds ~70 MB of tuples and floats at once (and the allocator keeps the peak);
    chunks keep that to one chunk's worth, and building column by column never holds the rows twice. Each
    target name (and each recipe id) is one string object, not one per row.
    """
    names: dict[str, str] = {}
    targets: list[str] = []
    texts: list[list[str | None]] = [[] for _ in range(text_columns)]
    first = 1 + text_columns
    parts: list[list[FloatArray]] = [[] for _ in range(numeric_columns)]
    while rows := cursor.fetchmany(_CHUNK_ROWS):
        targets.extend([names.setdefault(row[0], row[0]) for row in rows])
        for index, text in enumerate(texts, start=1):
            text.extend(
                [None if row[index] is None else names.setdefault(row[index], row[index]) for row in rows]
            )
        block = np.array([row[first:] for row in rows], dtype=np.float64).reshape(len(rows), numeric_columns)
        for index, column in enumerate(parts):
            column.append(block[:, index].copy())
    numbers: list[FloatArray] = []
    for index in range(numeric_columns):
        numbers.append(np.concatenate(parts[index]) if parts[index] else np.empty(0, np.float64))
        parts[index] = []  # this column's chunks go before the next column is joined
    return np.array(targets, dtype=object), [objects(text) for text in texts], numbers


def _is_sorted(code: IntArray, ts: FloatArray, rowid: IntArray | None = None) -> bool:
    """Whether rows are ordered by code, then ts (then rowid)."""
    if len(code) < 2:
        return True
    step = np.diff(code)
    same = step == 0
    later = np.diff(ts)
    ok = (step > 0) | (same & (later > 0))
    ties = same & (later == 0)
    ok |= ties if rowid is None else ties & (np.diff(rowid) > 0)
    return bool(ok.all())


def read_raw(
    connection: sqlite3.Connection,
    start_ts: float,
    end_ts: float,
    values: Sequence[str],
    targets: Sequence[str],
    texts: Sequence[str] = (),
) -> SampleColumns:
    """Raw rows of ``values`` (and ``texts``) of ``targets`` in [start_ts, end_ts]. Every target:
    ``read_fleet`` (or a ``RawTail``)."""
    check_columns(values, texts)
    where = f"ts >= ? AND ts <= ? AND target IN ({', '.join('?' for _ in targets)})"
    cursor = connection.execute(f"{_raw_select(values, texts)} WHERE {where}", [start_ts, end_ts, *targets])
    return _raw_columns(cursor, values, texts)[0]


def _raw_select(values: Sequence[str], texts: Sequence[str]) -> str:
    text = "".join(f", {name}" for name in texts)
    return f"SELECT target{text}, ts, up, rowid{''.join(', ' + name for name in values)} FROM samples"


def _raw_columns(
    cursor: sqlite3.Cursor, values: Sequence[str], texts: Sequence[str]
) -> tuple[SampleColumns, IntArray]:
    """Rows (target, *texts, ts, up, rowid, *values) as columns ordered by target, time, rowid (the order
    of the (target, ts) index a full read walks), and their rowids."""
    target, text, numbers = _fetch(cursor, 3 + len(values), len(texts))
    if len(target) == 0:
        return empty_columns(values, texts), np.empty(0, np.int64)
    rowid = numbers[2].astype(np.int64)  # exact: rowids stay far below 2**53
    code = target_codes(target)
    order = np.lexsort((rowid, numbers[0], code))
    for index in (0, 1, *range(3, len(numbers))):  # one column at a time: the unsorted one goes at once
        numbers[index] = numbers[index][order]
    columns = SampleColumns(
        target[order],
        code[order],
        numbers[0],
        numbers[1],
        np.ones(len(target), np.float64),
        {name: numbers[3 + i] for i, name in enumerate(values)},
        {name: column[order] for name, column in zip(texts, text, strict=True)},
    )
    return columns, rowid[order]


def read_latest(connection: sqlite3.Connection, since_ts: float | None) -> SampleColumns:
    """Each target's last-written row (``latest_samples``, seen at or after ``since_ts`` if given), every
    sample column, one row per target in name order."""
    values, texts = SAMPLE_VALUES, SAMPLE_TEXTS
    where, params = ("WHERE ts >= ?", (since_ts,)) if since_ts is not None else ("", ())
    cursor = connection.execute(
        f"SELECT target, {', '.join(texts)}, ts, up, {', '.join(values)} FROM latest_samples {where} "
        "ORDER BY target",
        params,
    )
    target, text, numbers = _fetch(cursor, 2 + len(values), len(texts))
    if len(target) == 0:
        return empty_columns(values, texts)
    return SampleColumns(
        target,
        target_codes(target),
        numbers[0],
        numbers[1],
        np.ones(len(target), np.float64),
        {name: numbers[2 + i] for i, name in enumerate(values)},
        dict(zip(texts, text, strict=True)),
    )


# How many targets' rows a fleet-wide read holds at a time. Why: regrouping only after every row was read
# held them all at once (1,000 servers, a 1 h raw read: 720 k rows for 294 k kept; a 6 h one 360 k minute
# buckets for 300 k), and the fetch's tuples fragment the heap in proportion. Tier reads go this many targets
# at a time (a primary-key range each); raw reads go a slice of the range at a time, 1 / ceil(targets / this)
# of it, through the ts index: raw rows lie in write order (a cycle's rows together), so a target's rows are
# one per page and walking them per target re-reads every page once per target (1 h raw: 3.2 s of CPU
# instead of 2.2 s), while time slices read the pages in order as one read did. 16 to 128 measured alike
# (1,000 servers: 143 -> 82 MB for the 1 h raw read, 100 -> 52 MB for 6 h of minutes); tests shrink it.
BATCH_TARGETS = 64


def list_targets(connection: sqlite3.Connection, table: str) -> list[str]:
    """Every target of ``table`` (``samples`` or a tier's) in name order, one index seek each."""
    sql = f"{_distinct_targets_cte(table)}SELECT name FROM names WHERE name IS NOT NULL"
    return [str(row[0]) for row in connection.execute(sql)]


def read_fleet(
    connection: sqlite3.Connection,
    tier: Tier | None,
    start_ts: float,
    end_ts: float,
    values: Sequence[str],
    max_points: int,
    texts: Sequence[str] = (),
) -> SampleColumns:
    """Every target's rows of ``values`` (and ``texts``) in [start_ts, end_ts] from ``tier`` (None: raw
    rows), regrouped into ``max_points`` buckets per target if any target has more rows than that: what
    reading every target at once then ``regroup`` gives, to the bit, holding only ``BATCH_TARGETS`` targets'
    rows at a time (tier: batches of targets; raw: slices of the range, see ``BATCH_TARGETS``). One read
    transaction: one snapshot for every batch."""
    check_columns(values, texts)
    bucket_s = max((end_ts - start_ts) / max(max_points, 1), 1e-9)
    began = not connection.in_transaction
    if began:
        connection.execute("BEGIN")
    try:
        if tier is None:
            parts = _Parts(values, texts, start_ts, bucket_s, max_points)
            for rows in _raw_slices(connection, start_ts, end_ts, values, texts, bucket_s, max_points):
                parts.add(rows)
        else:
            names = list_targets(connection, tier.table)
            # A target has a row per bucket at most (regrouping only merges them): the result fits this.
            buckets = int(max(end_ts - start_ts, 0.0) // tier.seconds) + 1
            parts = _Parts(values, texts, start_ts, bucket_s, max_points, rows=len(names) * buckets)
            for first in range(0, len(names), BATCH_TARGETS):
                batch = names[first : first + BATCH_TARGETS]
                parts.add(_read_tier_batch(connection, tier, start_ts, end_ts, values, batch, texts))
    finally:
        if began and connection.in_transaction:
            connection.execute("ROLLBACK")  # only read: nothing to keep
    return parts.result()


class _Parts:
    """The pieces of one fleet-wide read, each holding whole buckets (every row of a target's bucket in one
    piece, in (target, time) order), regrouped as one read would be.

    Whether to regroup is the whole read's choice (a regrouped bucket of one row is not always that row to
    the bit: ts * n / n), so pieces are kept as read until some target has more than ``max_points`` rows in
    all, then those held (at most ``max_points`` rows per target: no more than the result) are regrouped
    and so is every later one. ``regroup`` works bucket by bucket, so piece by piece equals all at once.

    Pieces of batches of targets (``rows``: how many the result may have) go straight into columns of that
    length (allocated, touched only as far as written): joining pieces at the end would hold the result
    twice. Pieces of slices of the range are joined and sorted by target at the end (``_concat``).
    """

    def __init__(
        self,
        values: Sequence[str],
        texts: Sequence[str],
        start_ts: float,
        bucket_s: float,
        max_points: int,
        *,
        rows: int | None = None,
    ) -> None:
        self.values, self.texts = tuple(values), tuple(texts)
        self.start_ts, self.bucket_s, self.max_points = start_ts, bucket_s, max_points
        self.parts: list[SampleColumns] = []  # pieces (no ``rows``), or the names and texts of the pieces
        self.regrouping = False
        self._rows: dict[str, int] = {}  # each target's rows so far (until regrouping)
        self._into: list[FloatArray] | None = None  # ts, up, weight, *values of the written rows
        self._written = 0
        if rows is not None:
            self._into = [np.empty(rows, np.float64) for _ in range(3 + len(values))]

    def add(self, rows: SampleColumns) -> None:
        if len(rows) == 0:
            return
        if not self.regrouping:
            first = runs(rows.code)
            counts = np.diff(np.r_[first, len(rows)])
            for name, count in zip(rows.target[first], counts.tolist(), strict=True):
                self._rows[name] = self._rows.get(name, 0) + count
            if max(self._rows.values()) > self.max_points:
                self.regrouping = True
                if self.parts:
                    held, self.parts, self._written = self._held(), [], 0
                    self._keep(regroup(held, self.start_ts, self.bucket_s))
        self._keep(regroup(rows, self.start_ts, self.bucket_s) if self.regrouping else rows)

    def _keep(self, rows: SampleColumns) -> None:
        if self._into is None:
            self.parts.append(rows)
            return
        start, end = self._written, self._written + len(rows)
        if end > len(self._into[0]):  # not expected (a row per bucket): room, at the cost of a copy
            self._into = [np.concatenate([column, np.empty(end, np.float64)]) for column in self._into]
        values = (rows.ts, rows.up, rows.weight, *(rows.values[name] for name in self.values))
        for column, written in zip(self._into, values, strict=True):
            column[start:end] = written
        self._written = end
        nothing = np.empty(0)  # only the names and texts stay in the pieces
        self.parts.append(
            replace(rows, code=np.empty(0, np.int64), ts=nothing, up=nothing, weight=nothing, values={})
        )

    def _held(self) -> SampleColumns:
        """Everything kept so far as one set of rows (views of the written columns, or pieces joined)."""
        if self._into is None:
            return _concat(self.parts, self.values, self.texts)
        target = np.concatenate([part.target for part in self.parts])
        written = [column[: self._written] for column in self._into]
        return SampleColumns(
            target,
            target_codes(target),
            written[0],
            written[1],
            written[2],
            dict(zip(self.values, written[3:], strict=True)),
            {name: np.concatenate([part.texts[name] for part in self.parts]) for name in self.texts},
        )

    def result(self) -> SampleColumns:
        if not self.parts:
            return empty_columns(self.values, self.texts)
        return self._held()


# How far past its buckets' edges a raw slice's ts range reaches (s). A row's bucket is computed from its ts
# with rounding (a few ulps of ts, ~1e-6 s), so the index range is kept wider and the bucket test in SQL
# decides which slice a row is in; a second of rows read twice and dropped by SQLite costs nothing.
_SLICE_MARGIN_S = 1.0


def _raw_slices(
    connection: sqlite3.Connection,
    start_ts: float,
    end_ts: float,
    values: Sequence[str],
    texts: Sequence[str],
    bucket_s: float,
    max_points: int,
) -> Iterator[SampleColumns]:
    """Raw rows of [start_ts, end_ts] a slice of the range at a time, each in (target, ts, rowid) order and
    holding whole buckets: a slice is a range of bucket numbers ``(ts - start_ts) / bucket_s``, computed in
    SQL with the IEEE operations ``regroup`` does them with (each row lands in the slice of its bucket),
    over a ts range a little wider for the ``samples_ts`` index to walk."""
    slices = max(1, -(-len(list_targets(connection, "samples")) // BATCH_TARGETS))
    buckets = max_points + 1  # numbers 0 .. max_points (a row at end_ts); the first and last slices are open
    select = _raw_select(values, texts)
    bucket = "(ts - ?) / ?"
    for index in range(slices):
        low, high = index * buckets // slices, (index + 1) * buckets // slices
        where, params = ["ts >= ?", "ts <= ?"], [start_ts, end_ts]
        if index > 0:
            where.append(f"{bucket} >= ?")
            params[0] = max(start_ts, start_ts + low * bucket_s - _SLICE_MARGIN_S)
            params += [start_ts, bucket_s, float(low)]
        if index < slices - 1:
            if high <= low:
                continue
            where.append(f"{bucket} < ?")
            params[1] = min(end_ts, start_ts + high * bucket_s + _SLICE_MARGIN_S)
            params += [start_ts, bucket_s, float(high)]
        cursor = connection.execute(f"{select} WHERE {' AND '.join(where)}", params)
        yield _raw_columns(cursor, values, texts)[0]


def _concat(parts: list[SampleColumns], values: Sequence[str], texts: Sequence[str]) -> SampleColumns:
    """``parts`` (each in (target, time) order, later parts later in time for a target they share) as one
    set of rows in (target, time) order, with codes across them. ``parts`` is emptied and each column's
    pieces go as soon as it is joined: the peak is the result plus a column or two, not the result twice."""
    if not parts:
        return empty_columns(values, texts)
    pieces = {
        "ts": [p.ts for p in parts],
        "up": [p.up for p in parts],
        "weight": [p.weight for p in parts],
        **{f"value {name}": [p.values[name] for p in parts] for name in values},
    }
    text_pieces = {name: [p.texts[name] for p in parts] for name in texts}
    target = np.concatenate([p.target for p in parts])
    parts.clear()
    code = target_codes(target)
    order = None if len(code) < 2 or bool((np.diff(code) >= 0).all()) else np.argsort(code, kind="stable")
    if order is not None:  # raw slices: each target's rows are in every slice
        target, code = target[order], code[order]

    def join(pieces: list[npt.NDArray[_Scalar]]) -> npt.NDArray[_Scalar]:
        joined = np.concatenate(pieces)
        pieces.clear()
        return joined if order is None else joined[order]

    return SampleColumns(
        target,
        code,
        join(pieces["ts"]),
        join(pieces["up"]),
        join(pieces["weight"]),
        {name: join(pieces[f"value {name}"]) for name in values},
        {name: join(text_pieces[name]) for name in texts},
    )


_Scalar = TypeVar("_Scalar", bound=np.generic)


class RawTail:
    """The raw rows of a sliding window kept in memory, topped up with the rows written since the last read.

    ``read(connection, start_ts, end_ts)`` equals a full read of [start_ts, end_ts] (same rows, same order)
    as long as raw rows are only ever inserted (never updated) — true of the store: appends and backfills
    insert, prune deletes the oldest. A window that moves back, or a store whose newest held row is gone or
    changed (file replaced, VACUUM renumbered rows) reloads the window in full.
    """

    def __init__(self, values: Sequence[str], texts: Sequence[str] = ()) -> None:
        check_columns(values, texts)
        self.values, self.texts = tuple(values), tuple(texts)
        self._lock = threading.Lock()
        self._held: SampleColumns | None = None
        self._rowid = np.empty(0, np.int64)
        self._start_ts = float("inf")
        self._last: tuple[int, float, str] | None = None  # the newest rowid held, its ts and target
        self.full_reads = 0  # how often the whole window was read (tests and the bench look)
        self.tail_rows = 0  # rows read as tails

    def read(self, connection: sqlite3.Connection, start_ts: float, end_ts: float) -> SampleColumns:
        with self._lock:
            if self._held is None or start_ts < self._start_ts or not self._still_valid(connection):
                self._load(connection, start_ts)
            else:
                self._top_up(connection, start_ts)
            held = self._held
            assert held is not None
            # Everything held is at or after start_ts; usually nothing is past end_ts either (no copy then).
            if len(held) == 0 or held.ts.max() <= end_ts:
                return held
            return take(held, held.ts <= end_ts)

    def _still_valid(self, connection: sqlite3.Connection) -> bool:
        if self._last is None:
            return True  # nothing held: a tail read of everything is a full read
        rowid, ts, target = self._last
        found = connection.execute("SELECT ts, target FROM samples WHERE rowid = ?", (rowid,)).fetchone()
        return found is not None and float(found[0]) == ts and str(found[1]) == target

    def _load(self, connection: sqlite3.Connection, start_ts: float) -> None:
        # The store's newest row first: the next top-up starts after it even when the window held nothing
        # (a collector stopped for longer than the window), instead of reading every row ever written
        # (1,000 servers: a 1.4 GB, 20 s read). Rows written after it are left to that top-up.
        newest = connection.execute(
            "SELECT rowid, ts, target FROM samples ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        # Everything from the window's start on (rows stamped after its end too: the next window wants them),
        # up to that row (``+rowid``: a filter, not a rowid range scan of the whole table).
        query = f"{_raw_select(self.values, self.texts)} WHERE ts >= ?"
        params: tuple[float, ...] = (start_ts,)
        if newest is not None:
            query, params = f"{query} AND +rowid <= ?", (start_ts, int(newest[0]))
        self.full_reads += 1
        self._held, self._rowid = _raw_columns(connection.execute(query, params), self.values, self.texts)
        self._start_ts = start_ts
        self._last = None if newest is None else (int(newest[0]), float(newest[1]), str(newest[2]))

    def _top_up(self, connection: sqlite3.Connection, start_ts: float) -> None:
        newest = -1 if self._last is None else self._last[0]
        select = _raw_select(self.values, self.texts)
        new, new_rowid = _raw_columns(
            connection.execute(f"{select} WHERE rowid > ?", (newest,)), self.values, self.texts
        )
        self.tail_rows += len(new)
        held, rowid = self._held, self._rowid
        assert held is not None
        if start_ts > self._start_ts:  # rows that slid out of the window
            keep = held.ts >= start_ts
            if not bool(keep.all()):
                held, rowid = take(held, keep), rowid[keep]
            self._start_ts = start_ts
        if len(new):
            self._remember_last(new, new_rowid)
            fresh = new.ts >= start_ts  # a late row older than the window is of no later window either
            held, rowid = _merge(held, rowid, take(new, fresh), new_rowid[fresh])
        self._held, self._rowid = held, rowid

    def _remember_last(self, rows: SampleColumns, rowid: IntArray) -> None:
        if len(rows) == 0:
            return
        newest = int(np.argmax(rowid))
        self._last = (int(rowid[newest]), float(rows.ts[newest]), str(rows.target[newest]))


def _merge(
    held: SampleColumns, rowid: IntArray, new: SampleColumns, new_rowid: IntArray
) -> tuple[SampleColumns, IntArray]:
    """Both sets of rows in (target, ts, rowid) order. The usual case — every new row later than its
    target's held rows, all targets known — is a stable sort of two sorted runs by code (linear)."""
    if len(new) == 0:
        return held, rowid
    first = runs(held.code)
    index = {str(name): int(code) for name, code in zip(held.target[first], held.code[first], strict=True)}
    if all(str(name) in index for name in new.target):
        new_code = np.fromiter((index[str(t)] for t in new.target), np.int64, len(new))
        code = np.concatenate([held.code, new_code])
    else:  # a new target: renumber everything in name order
        code = target_codes(np.concatenate([held.target, new.target]))
    merged = SampleColumns(
        np.concatenate([held.target, new.target]),
        code,
        np.concatenate([held.ts, new.ts]),
        np.concatenate([held.up, new.up]),
        np.concatenate([held.weight, new.weight]),
        {name: np.concatenate([values, new.values[name]]) for name, values in held.values.items()},
        {name: np.concatenate([texts, new.texts[name]]) for name, texts in held.texts.items()},
    )
    both = np.concatenate([rowid, new_rowid])
    order = np.argsort(merged.code, kind="stable")
    if not _is_sorted(merged.code[order], merged.ts[order], both[order]):
        order = np.lexsort((both, merged.ts, merged.code))
    return take(merged, order), both[order]
