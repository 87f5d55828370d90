"""Samples as a DataFrame: the one conversion from the read contract's columns to rows, shared by the pages
(``views.frames``) and the analyses the CLI runs without them (``analysis.advice_inputs``)."""

from __future__ import annotations

import pandas as pd

from collectors.sample_columns import SAMPLE_TEXTS, SampleColumns


def samples_frame(columns: SampleColumns, *, with_time: bool = False) -> pd.DataFrame:
    """Samples as rows (sorted by target, then time): ts, target, up (bool), the texts read
    (``SAMPLE_TEXTS`` order), the values read (in the order asked), and ``time`` (UTC) if ``with_time``."""
    frame = pd.DataFrame(
        {
            "ts": columns.ts,
            "target": columns.target,
            "up": columns.up == 1.0,
            **{name: columns.texts[name] for name in SAMPLE_TEXTS if name in columns.texts},
            **columns.values,
        }
    )
    if with_time:
        frame["time"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    return frame
