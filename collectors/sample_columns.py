"""Samples as numpy columns: the one shape every history read answers in, whichever backend holds it.

A range of many targets (the Fleet chart, the analysis pages, a Server page, the alert windows' replay, the
SLO attribution) and the newest row of each target (the fleet table) come as ``SampleColumns``: an array per
column, rows sorted by target then time. A page asks for the 3-8 columns it draws, not 26; the dashboard turns
columns into DataFrames in one place (``views/frames.py``), the alerts and the CLI into snapshots here.

The sample columns are declared here once: the SQLite schema and its reads (``store/``), the Prometheus
history's grid (``prometheus/promql_history.py``) and the frames all follow ``SAMPLE_COLUMNS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from collectors.model import SIGNAL_NAMES, Signals, TargetSnapshot

FloatArray = npt.NDArray[np.float64]
ObjectArray = npt.NDArray[np.object_]
IntArray = npt.NDArray[np.int64]

# A stored sample, in the store's column order (its SQL schema and every row written).
SAMPLE_COLUMNS: tuple[str, ...] = (
    "ts",
    "target",
    "up",
    "error",
    "recipe_id",
    "deployment",
    "scrape_duration_s",
    *SIGNAL_NAMES,
)
# What a read may ask for beside ts, target and up: numbers (NaN = unknown) and texts (None = unknown/clean).
SAMPLE_VALUES: tuple[str, ...] = ("scrape_duration_s", *SIGNAL_NAMES)
SAMPLE_TEXTS: tuple[str, ...] = ("error", "recipe_id", "deployment")


@dataclass(frozen=True, slots=True)
class SampleColumns:
    """Samples of many targets as columns, sorted by target then time.

    ``code`` numbers the targets in name order (rows of one target are one run of equal codes: integer
    comparisons find the runs, not string ones). ``up`` is 1.0 / 0.0 (a regrouped bucket is up only if all its
    rows were), NaN when the source could not say (Prometheus blind: unknown, never down); ``weight`` is how
    many scrapes a row stands for; ``values`` holds the numbers asked for (``SAMPLE_VALUES``, NaN =
    unknown), ``texts`` the texts asked for (``SAMPLE_TEXTS``, None = unknown; a regrouped bucket keeps its
    newest row's).
    """

    target: ObjectArray
    code: IntArray
    ts: FloatArray
    up: FloatArray
    weight: FloatArray
    values: dict[str, FloatArray]
    texts: dict[str, ObjectArray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)


def check_columns(values: Sequence[str], texts: Sequence[str] = ()) -> None:
    """Only sample columns are ever asked for (and spliced into SQL)."""
    unknown = [name for name in values if name not in SAMPLE_VALUES]
    unknown += [name for name in texts if name not in SAMPLE_TEXTS]
    if unknown:
        raise ValueError(f"not a stored sample column: {', '.join(unknown)}")


def empty_columns(values: Sequence[str], texts: Sequence[str] = ()) -> SampleColumns:
    nothing = np.empty(0, np.float64)
    return SampleColumns(
        np.empty(0, object),
        np.empty(0, np.int64),
        nothing,
        nothing,
        nothing,
        {name: nothing for name in values},
        {name: np.empty(0, object) for name in texts},
    )


def objects(values: Sequence[object]) -> ObjectArray:
    """An object array of ``values`` as they are (numpy would turn a list of equal-length tuples 2-D)."""
    found = np.empty(len(values), dtype=object)
    found[:] = values
    return found


def target_codes(target: ObjectArray) -> IntArray:
    """Integer codes ordered as the names are (hashing, then sorting only the distinct names: fast)."""
    codes, names = pd.factorize(target)
    rank = np.empty(len(names), np.int64)
    rank[np.argsort(np.asarray(names, dtype=object), kind="stable")] = np.arange(len(names))
    return rank[codes]


def take(columns: SampleColumns, index: npt.NDArray[np.intp] | npt.NDArray[np.bool_]) -> SampleColumns:
    return SampleColumns(
        columns.target[index],
        columns.code[index],
        columns.ts[index],
        columns.up[index],
        columns.weight[index],
        {name: values[index] for name, values in columns.values.items()},
        {name: texts[index] for name, texts in columns.texts.items()},
    )


def runs(code: IntArray, bucket: npt.NDArray[np.float64] | IntArray | None = None) -> npt.NDArray[np.intp]:
    """Where each run of one target (and one bucket) starts, in rows sorted by target then time."""
    if len(code) == 0:
        return np.empty(0, np.intp)
    change = code[1:] != code[:-1]
    if bucket is not None:
        change |= bucket[1:] != bucket[:-1]
    return np.flatnonzero(np.r_[True, change])


def regroup(columns: SampleColumns, start_ts: float, bucket_s: float) -> SampleColumns:
    """Each target's rows merged into ``bucket_s`` buckets from ``start_ts``: means weighted by scrapes
    (unknowns skipped, a bucket of unknowns stays NaN), up only if every row was, texts of the newest row."""
    if len(columns) == 0:
        return columns
    starts = runs(columns.code, np.floor((columns.ts - start_ts) / bucket_s))
    ends = np.r_[starts[1:], len(columns)] - 1
    weight = columns.weight
    total = np.add.reduceat(weight, starts)
    values: dict[str, FloatArray] = {}
    for name, column in columns.values.items():
        known = ~np.isnan(column)
        sums = np.add.reduceat(np.where(known, column, 0.0) * weight, starts)
        counts = np.add.reduceat(known * weight, starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            values[name] = np.where(counts > 0, sums / np.where(counts > 0, counts, 1.0), np.nan)
    return SampleColumns(
        columns.target[starts],
        columns.code[starts],
        np.add.reduceat(columns.ts * weight, starts) / total,
        np.minimum.reduceat(columns.up, starts),
        total,
        values,
        {name: texts[ends] for name, texts in columns.texts.items()},  # SQL's MAX of text is no better
    )


def most_rows_per_target(columns: SampleColumns) -> int:
    if len(columns) == 0:
        return 0
    return int(np.diff(np.r_[runs(columns.code), len(columns)]).max())


def means_by_target(columns: SampleColumns) -> dict[str, dict[str, float]]:
    """Per target, the mean of each value over the rows it was up (unknowns skipped; a value never known in
    them is left out, a target never up too)."""
    up = take(columns, columns.up == 1.0)
    if len(up) == 0:
        return {}
    starts = runs(up.code)
    found: dict[str, dict[str, float]] = {str(name): {} for name in up.target[starts]}
    for name, column in up.values.items():
        known = ~np.isnan(column)
        sums = np.add.reduceat(np.where(known, column, 0.0), starts)
        counts = np.add.reduceat(known.astype(np.float64), starts)
        for target, total, count in zip(up.target[starts], sums.tolist(), counts.tolist(), strict=True):
            if count > 0:
                found[str(target)][name] = total / count
    return found


# -- snapshots: the newest row of each target, for the callers that want objects ---------------------------
def columns_of_snapshots(snapshots: Sequence[TargetSnapshot]) -> SampleColumns:
    """Every sample column of ``snapshots`` (sorted by target, then time, as reads are); an unknown
    snapshot's ``up`` is NaN."""
    ordered = sorted(snapshots, key=lambda s: (s.target, s.ts))
    nan = math.nan
    target = objects([s.target for s in ordered])
    numbers = np.array(
        [
            [
                s.ts,
                nan if s.unknown else float(s.up),
                nan if s.scrape_duration_s is None else s.scrape_duration_s,
            ]
            + [nan if v is None else v for v in s.signals.as_dict().values()]
            for s in ordered
        ],
        dtype=np.float64,
    ).reshape(len(ordered), 3 + len(SIGNAL_NAMES))
    return SampleColumns(
        target,
        target_codes(target),
        numbers[:, 0].copy(),
        numbers[:, 1].copy(),
        np.ones(len(ordered), np.float64),
        {name: numbers[:, 2 + i].copy() for i, name in enumerate(SAMPLE_VALUES)},
        {
            "error": objects([s.error for s in ordered]),
            "recipe_id": objects([s.recipe_id for s in ordered]),
            "deployment": objects([s.deployment for s in ordered]),
        },
    )


def snapshots_of(columns: SampleColumns) -> list[TargetSnapshot]:
    """Each row as a snapshot (NaN is unknown, i.e. None; a NaN ``up`` an unknown snapshot). Columns not read
    are unknown (texts: None, deployment "")."""
    values = {name: column.tolist() for name, column in columns.values.items()}
    signals = [name for name in SIGNAL_NAMES if name in values]
    texts = {name: column.tolist() for name, column in columns.texts.items()}
    nothing = [None] * len(columns)
    errors, recipes = texts.get("error", nothing), texts.get("recipe_id", nothing)
    deployments = texts.get("deployment", nothing)
    durations = values.get("scrape_duration_s", nothing)
    found: list[TargetSnapshot] = []
    for i, (target, ts, up) in enumerate(
        zip(columns.target.tolist(), columns.ts.tolist(), columns.up.tolist(), strict=True)
    ):
        unknown = math.isnan(up)
        found.append(
            TargetSnapshot(
                target=str(target),
                ts=float(ts),
                up=not unknown and up >= 1.0,
                error=_text(errors[i]),
                signals=Signals(**{name: _number(values[name][i]) for name in signals}),
                recipe_id=_text(recipes[i]) or None,
                deployment=_text(deployments[i]) or "",
                scrape_duration_s=_number(durations[i]),
                unknown=unknown,
            )
        )
    return found


def _number(value: object) -> float | None:
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
