"""The docs' signal tables, rendered from the signal catalogue (``collectors.signals``), never by hand.

Each table stands in a doc between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` markers. ``python -m
collectors.signals_doc`` rewrites them in place; ``--check`` only says which are stale (exit 1), as
tests/collectors/test_signals_doc.py does, so a catalogue change that leaves a doc behind fails the suite.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from collectors import signal_expr as node
from collectors.signals import COMPLETION_WINDOW_S, SIGNALS, Signal, format_duration

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RATE_WINDOW_S = 60.0  # the recorded names shown are those of the default window (scrape every 5 s)

# How tightly each node binds in the notation: a child binding no tighter than its parent is parenthesised.
_ATOM, _TIMES, _PLUS, _COMPARE, _GUARD, _OR = 9, 6, 5, 4, 3, 2


def _family(family: node.Family, part: str = "") -> str:
    matchers = ",".join(f'{label}="{value}"' for label, value in family.match)
    return f"{family.name}{part}" + (f"{{{matchers}}}" if matchers else "")


_COMPARISONS = {node.Positive: "> 0", node.Zero: "== 0"}  # the value only where it compares so
_GUARDS = {node.When: "where", node.Unless: "unless"}  # the value only where the condition is (not) known


def _notation(expr: node.Expr) -> tuple[str, int]:
    """``expr`` in the docs' notation, and how tightly it binds."""

    def inner(child: node.Expr, parent: int) -> str:
        text, binds = _notation(child)
        return text if binds > parent or binds == _ATOM else f"({text})"

    if isinstance(expr, node.Gauge):
        if expr.family.exposer == "dcgm":  # per GPU: summed or averaged over the server's GPUs
            return f"{expr.how}({_family(expr.family)})", _ATOM
        return _family(expr.family), _ATOM
    if isinstance(expr, node.Count):
        return f"count({_family(expr.family)})", _ATOM
    if isinstance(expr, node.Param):
        return f"cost.{expr.name}", _ATOM
    if isinstance(expr, node.Scale):
        return f"{inner(expr.value, _TIMES)} × {expr.factor:g}", _TIMES
    if isinstance(expr, node.Rate):
        return f"rate({_family(expr.family, expr.part)})", _ATOM
    if isinstance(expr, node.Ref):
        return expr.signal, _ATOM
    if isinstance(expr, node.Ratio):
        top, bottom = expr.numerator, expr.denominator
        if isinstance(top, node.Rate) and top.part == "_sum" and bottom == node.Rate(top.family, "_count"):
            return f"mean({_family(top.family)})", _ATOM
        return f"{inner(top, _TIMES)} / {inner(bottom, _TIMES)}", _TIMES
    if isinstance(expr, node.Product):
        return f"{inner(expr.left, _TIMES)} × {inner(expr.right, _TIMES)}", _TIMES
    if isinstance(expr, node.Inverse):
        return f"1 / {inner(expr.value, _TIMES)}", _TIMES
    if isinstance(expr, node.Total):
        return " + ".join(inner(part, _PLUS) for part in expr.parts), _PLUS
    if isinstance(expr, node.Positive | node.Zero):
        return f"{inner(expr.value, _COMPARE)} {_COMPARISONS[type(expr)]}", _COMPARE
    if isinstance(expr, node.When | node.Unless):
        value, condition = inner(expr.value, _GUARD), inner(expr.condition, _GUARD)
        return f"{value} {_GUARDS[type(expr)]} {condition}", _GUARD
    assert isinstance(expr, node.First)
    # A guarded choice is parenthesised although it binds tighter: "a unless b or c" reads ambiguously.
    return " or ".join(inner(choice, _GUARD) for choice in expr.choices), _OR


def notation(expr: node.Expr) -> str:
    """One expression as the docs write it (legend above the signal table)."""
    return _notation(expr)[0]


def _cell(text: str) -> str:
    return text.replace("|", r"\|")  # a pipe would end the table cell


_PLAIN_WORDS = {
    "as computed": "as computed",
    "one": "1",
    "unknown": "unknown",
    "recomputed": "recomputed from the plain values",
}


def render_signals(signals: Sequence[Signal] = SIGNALS) -> str:
    """The signal table: name, unit, meaning, expression, plain-decoding rule, what unknown means; then each
    signal's chain in words, by SGLang version."""
    lines = [
        "| signal | unit | meaning | expression | plain decoding | unknown when |",
        "|---|---|---|---|---|---|",
    ]
    for s in signals:
        expr = f"`{_cell(notation(s.expr))}`" if s.expr is not None else "from the recipe (`/server_info`)"
        plain = _PLAIN_WORDS[s.plain]
        lines.append(f"| `{s.name}` | {s.unit} | {_cell(s.help)} | {expr} | {plain} | {_cell(s.unknown)} |")
    notes = [s for s in signals if s.fallbacks]
    if notes:
        lines.append("")
        for s in notes:
            lines.append(f"- `{s.name}`: " + "; ".join(s.fallbacks) + ".")
    return "\n".join(lines) + "\n"


def render_families(signals: Sequence[Signal] = SIGNALS) -> str:
    """Every SGLang family a signal reads: kind, first SGLang release, completion-counted, readers."""
    readers: dict[str, list[str]] = {}
    families: dict[str, node.Family] = {}
    for s in signals:
        for family in node.families_of(s.expr) if s.expr is not None else ():
            families.setdefault(family.name, family)
            if s.name not in readers.setdefault(family.name, []):
                readers[family.name].append(s.name)
    window = format_duration(COMPLETION_WINDOW_S)
    lines = ["| family | kind | since SGLang | rate window | read by |", "|---|---|---|---|---|"]
    for name, family in families.items():
        rate = f"≥ {window} (completion-counted)" if family.at_completion else ""
        read_by = ", ".join(f"`{r}`" for r in readers[name])
        lines.append(f"| `{_family(family)}` | {family.kind} | {family.since} | {rate} | {read_by} |")
    return "\n".join(lines) + "\n"


def render_recordings(
    signals: Sequence[Signal] = SIGNALS, rate_window_s: float = DEFAULT_RATE_WINDOW_S
) -> str:
    """The series ``export-recording-rules`` records, for the given rate window."""
    window = format_duration(rate_window_s)
    lines = ["| recorded series | signal | meaning |", "|---|---|---|"]
    for s in signals:
        if s.record:
            record = s.record.replace("{w}", window)
            lines.append(f"| `{record}` | `{s.name}` | {_cell(s.help)} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Section:
    """One generated table: the doc (relative to the repository) and the marker name around it."""

    doc: str
    marker: str
    render: Callable[[Sequence[Signal]], str]

    @property
    def start(self) -> str:
        return f"<!-- {self.marker}:start -->\n"

    @property
    def end(self) -> str:
        return f"<!-- {self.marker}:end -->"


SECTIONS: tuple[Section, ...] = (
    Section("docs/collectors.md", "signal-table", render_signals),
    Section("docs/collectors.md", "signal-families", render_families),
    Section("docs/prometheus.md", "signal-recordings", render_recordings),
)


def _span(text: str, section: Section) -> tuple[int, int]:
    start = text.find(section.start)
    end = text.find(section.end, start + 1)
    if start < 0 or end < 0:
        raise ValueError(f"{section.doc} lacks the markers {section.start.strip()} … {section.end}")
    return start + len(section.start), end


def stale_sections(root: Path = ROOT, signals: Sequence[Signal] = SIGNALS) -> list[str]:
    """The sections whose doc does not carry the rendering of ``signals``, as "doc: marker"."""
    stale = []
    for section in SECTIONS:
        text = (root / section.doc).read_text(encoding="utf-8")
        start, end = _span(text, section)
        if text[start:end] != section.render(signals):
            stale.append(f"{section.doc}: {section.marker}")
    return stale


def write_sections(root: Path = ROOT, signals: Sequence[Signal] = SIGNALS) -> list[str]:
    """Rewrite every stale section in place; the ones rewritten."""
    stale = stale_sections(root, signals)
    for section in SECTIONS:
        if f"{section.doc}: {section.marker}" not in stale:
            continue
        path = root / section.doc
        text = path.read_text(encoding="utf-8")
        start, end = _span(text, section)
        path.write_text(text[:start] + section.render(signals) + text[end:], encoding="utf-8")
    return stale


def main(argv: Sequence[str] = ()) -> int:
    if list(argv) == ["--check"]:
        stale = stale_sections()
        for name in stale:
            print(f"stale: {name} (run `python -m collectors.signals_doc`)", file=sys.stderr)
        return 1 if stale else 0
    if argv:
        print("usage: python -m collectors.signals_doc [--check]", file=sys.stderr)
        return 2
    for name in write_sections():
        print(f"rewrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
