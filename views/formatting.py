"""The one home for formatting numbers and words on the pages: tiles, ages, percentages, escaping (ratios and
token counts, which the analyses' sentences also write, are ``analysis.words``).

None or NaN is unknown and shows as an em dash, never as 0.
"""

from __future__ import annotations

import math
import re

DASH = "—"


# Markdown that text from a server (an error's reason phrase, a quoted line) could use to draw links, images
# (a request to any host from every viewer's browser), HTML, math or Streamlit's colour directives.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#!|~$])")


def plain(text: str) -> str:
    """``text`` as literal characters inside st.markdown/st.error/...: every markup character is escaped and
    newlines become spaces, so a server's words are shown, never interpreted."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text.replace("\r", " ").replace("\n", " "))


def num(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    """Format a number for a metric tile; unknown (None / NaN) becomes an em dash, never 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    text = format(value, spec)
    return f"{text} {unit}".rstrip() if unit else text


def pct(value: float | None, digits: int = 0) -> str:
    return num(None if value is None else value * 100.0, f".{digits}f", "%")


def format_age(seconds: float | None) -> str:
    """'4 s ago', '12 min ago', '3 h ago' — how old a sample is, in words."""
    if seconds is None or math.isnan(seconds):
        return "never"
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} d ago"
