"""The line-by-line exposition reader as it stood at commit 28d2e8c (before the family-block reader): the
oracle the property tests hold ``collectors.direct.metrics_reader.parse_exposition`` to. Frozen: do not "fix" it;
it is what the fast reader must agree with on every body the old reader accepted.
"""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from collectors.errors import BadExposition
from collectors.signals import all_families

# `duplicates` pairs this file with collectors/direct/metrics_reader.py: deliberately, a test oracle is a
# frozen copy, so the fast reader is checked against the old one and never against itself.
Kind = Literal["gauge", "cumulative"]
Dialect = Literal["text", "openmetrics"]

# The samples derive.py reads, by canonical (colon) name, from the signal catalogue. "gauge": one live series
# (tp_rank 0, priority ""); "cumulative": a counter or a histogram's _sum/_count, summed over the labels left
# once ranks are filtered out (priority, is_streaming, cache_source).
SIGNAL_SAMPLES: Mapping[str, Kind] = {
    sample: "gauge" if family.kind == "gauge" else "cumulative"
    for family in all_families()
    for sample in family.samples
}
# Extra label matchers a kept sample must carry (realtime_tokens_total{mode="decode"}).
SAMPLE_MATCH: Mapping[str, tuple[tuple[str, str], ...]] = {
    sample: family.match for family in all_families() for sample in family.samples if family.match
}

_PREFIXES = ("sglang:", "sglang_")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PAIR = r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*'
_LABEL = re.compile(_PAIR)
# A whole label block, validated in one C-level match: {a="x",b="y"} with an optional trailing comma.
_LABEL_BLOCK = re.compile(
    r"\{(?:" + _PAIR.replace("(", "(?:").replace("(?:?:", "(?:") + r"(?:,|(?=\})))*[ \t]*\}"
)
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r"\\[\\\"n]")
_MAX_NOTES = 10  # a body full of duplicates would otherwise make a note per line
_EXPOSITION_TYPES = ("text/plain", "application/openmetrics-text", "application/octet-stream")


@dataclass(frozen=True, slots=True)
class Exposition:
    """The kept samples of one /metrics body; a name absent from ``values`` is unknown (not exposed, NaN)."""

    values: Mapping[str, float]
    dialect: Dialect
    sample_lines: int  # every sample line in the body, kept or not (the benchmark's unit)
    notes: tuple[str, ...] = ()  # non-fatal oddities in words: duplicate series, NaN/Inf in a family we use

    def get(self, name: str) -> float | None:
        return self.values.get(name)


_Entry = tuple[str, Kind, tuple[tuple[str, str], ...]]


def _lookup(wanted: Mapping[str, Kind]) -> dict[str, _Entry]:
    """Both spellings of every wanted sample name → (canonical name, kind, extra matchers)."""
    table: dict[str, _Entry] = {}
    for name, kind in wanted.items():
        if not name.startswith(_PREFIXES):
            raise ValueError(f"wanted sample {name!r} does not start with 'sglang:'")
        suffix = name[len("sglang:") :]
        canonical = "sglang:" + suffix
        entry = (canonical, kind, SAMPLE_MATCH.get(canonical, ()))
        table["sglang:" + suffix] = entry
        table["sglang_" + suffix] = entry
    return table


_SIGNAL_LOOKUP = _lookup(SIGNAL_SAMPLES)


def _quote(line: str, limit: int = 80) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "…")


def _decode(body: str | bytes) -> str:
    if isinstance(body, str):
        text = body
    else:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            byte = body[exc.start]
            raise BadExposition(
                f"binary data, not Prometheus text (byte 0x{byte:02x} at offset {exc.start} is not UTF-8)"
            ) from None
    if "\x00" in text:
        raise BadExposition(f"binary data, not Prometheus text (NUL byte at offset {text.index(chr(0))})")
    return text


def _reject_other_formats(text: str, content_type: str | None) -> None:
    head = text[:512].lstrip()
    if not head:
        raise BadExposition("empty body: the server answered 200 with no metrics")
    media_type = (content_type or "").split(";")[0].strip().lower()
    start = head[:60].splitlines()[0]
    if head.startswith("<"):
        raise BadExposition(f"an HTML/XML page, not Prometheus text (starts {_quote(start, 60)})")
    if head.startswith(("{", "[")):
        raise BadExposition(f"JSON, not Prometheus text (starts {_quote(start, 60)})")
    if media_type and not media_type.startswith(_EXPOSITION_TYPES):
        raise BadExposition(
            f"Content-Type {media_type!r}, not Prometheus text or OpenMetrics; check the URL points at the "
            "SGLang server itself, not a proxy or another service"
        )


def _parse_labels(line: str, pos: int, line_no: int) -> tuple[dict[str, str], int]:
    """Labels of the block starting at ``line[pos] == "{"``; returns them and the index just after ``}``."""
    block = _LABEL_BLOCK.match(line, pos)
    if block is None:
        raise BadExposition(f"line {line_no}: malformed labels: {_quote(line)}")
    labels: dict[str, str] = {}
    for name, value in _LABEL.findall(line, pos + 1, block.end() - 1):
        labels[name] = _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], value) if "\\" in value else value
    return labels, block.end()


def _parse_value(token: str, line: str, line_no: int) -> float:
    try:
        return float(token)
    except ValueError:
        raise BadExposition(f"line {line_no}: value {token!r} is not a number: {_quote(line)}") from None


_SAMPLE_LINE = re.compile(r"^[^#\n]", re.MULTILINE)


def count_samples(text: str, limit: int) -> int:
    """Sample lines (neither blank nor a comment) in a body, counted before anything is split or parsed:
    at most ``limit`` means within the limit (an upper bound); over it, the exact count."""
    # Lines, comments and blanks included: an upper bound, at C speed (counting "\n#" too cost ~80 µs a body,
    # a sixth of a parse, to tighten a bound ~50× under the limit).
    rough = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if rough <= limit:
        return rough
    return len(_SAMPLE_LINE.findall(text))  # one-character matches: cached strings, no per-match objects


# A kept line's label block → its labels and its series key (labels without pid, sorted). Across cycles and
# servers the same few dozen blocks recur, so each is read once: ~4.6 µs a line otherwise (two regexes over
# ~6 labels), a third of a whole-body parse. Bounded; cleared when full.
_LabelsRead = tuple[dict[str, str], tuple[tuple[str, str], ...]]
_LABEL_CACHE: dict[str, _LabelsRead] = {}
LABEL_CACHE_MAX = 100_000


def _read_labels(line: str, pos: int, line_no: int) -> tuple[_LabelsRead, int]:
    """``_parse_labels`` through the cache (the block is the text up to the line's last "}")."""
    close = line.rfind("}") + 1
    block = line[pos:close]
    cached = _LABEL_CACHE.get(block)
    if cached is not None:
        return cached, close
    labels, end = _parse_labels(line, pos, line_no)
    read = (labels, tuple(sorted((k, v) for k, v in labels.items() if k != "pid")))
    if end == close:  # a "}" after the block (in a timestamp?) would make the key wrong: not cached
        if len(_LABEL_CACHE) >= LABEL_CACHE_MAX:
            _LABEL_CACHE.clear()
        _LABEL_CACHE[block] = read
    return read, end


def parse_exposition(
    body: str | bytes,
    *,
    content_type: str | None = None,
    wanted: Mapping[str, Kind] | None = None,
    max_samples: int | None = None,
) -> Exposition:
    """Read the samples in ``wanted`` (default: what the signals need) from a /metrics body.

    Raises ``BadExposition`` (a message in words, no target name: the caller adds it) for anything that is
    not Prometheus text or OpenMetrics: empty, HTML, JSON, binary, malformed lines, a truncated body, no
    sglang metrics, more than ``max_samples`` samples (checked before the lines are split: a million series
    under the byte cap would otherwise cost seconds and hundreds of MB each).
    """
    lookup = _SIGNAL_LOOKUP if wanted is None else _lookup(wanted)
    text = _decode(body)
    _reject_other_formats(text, content_type)
    if max_samples is not None:
        samples = count_samples(text, max_samples)
        if samples > max_samples:
            raise BadExposition(
                f"{samples} samples, over scrape.max_samples ({max_samples}); the server exposes too many "
                "series (per-request labels?), raise the cap only if that is expected"
            )
    lines = text.split("\n")
    openmetrics = "openmetrics" in (content_type or "").lower()
    if lines[-1] and lines[-1].rstrip() != "# EOF":
        # Every line ends with a newline: a body that stops mid-line was cut off (closed connection, proxy).
        if openmetrics:
            raise BadExposition("truncated OpenMetrics body: no '# EOF' line at the end")
        raise BadExposition(
            f"truncated body: the last line does not end with a newline ({_quote(lines[-1])})"
        )

    values: dict[str, float] = {}
    poisoned: set[str] = set()  # canonical names unusable this scrape (NaN/Inf/negative counter)
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
    notes: list[str] = []
    unlisted = 0

    def note(text: str) -> None:
        nonlocal unlisted
        if len(notes) < _MAX_NOTES:
            notes.append(text)
        else:
            unlisted += 1

    sample_lines = 0
    sglang_lines = 0
    eof_line: int | None = None
    # Names repeat line after line (histogram buckets), so each distinct name is validated and looked up once:
    # a (canonical, kind) entry for kept samples, True for other sglang samples, False for foreign ones.
    names: dict[str, _Entry | bool] = {}

    for index, line in enumerate(lines):
        if not line:
            continue
        if line[0] == "#":
            if line.rstrip() == "# EOF":
                eof_line = index
                break
            continue
        end = line.find("{")
        if end < 0:
            end = min((p for p in (line.find(" "), line.find("\t")) if p >= 0), default=-1)
        name = line[:end]
        status = names.get(name)
        if status is None:
            if end <= 0 or _NAME.fullmatch(name) is None:
                raise BadExposition(f"line {index + 1} is not a Prometheus sample: {_quote(line)}")
            status = lookup.get(name) or name.startswith(_PREFIXES)
            names[name] = status
        sample_lines += 1
        if status is False:
            continue
        sglang_lines += 1
        if status is True:
            continue
        entry = status

        # A kept line: the real parse.
        labels: dict[str, str] = {}
        series: tuple[tuple[str, str], ...] = ()
        pos = end
        if line[pos] == "{":
            (labels, series), pos = _read_labels(line, pos, index + 1)
        tokens = line[pos:].split()
        if not tokens:
            raise BadExposition(f"line {index + 1}: no value: {_quote(line)}")
        value = _parse_value(tokens[0], line, index + 1)

        # Live values come from tp_rank 0 only (other ranks carry constants and zeros: never sum ranks). Under
        # priority scheduling a scheduler gauge's total is the priority="" series (the others break it down),
        # while the tokenizer's counters and histograms exist only per priority: those are summed.
        canonical, kind, match = entry
        if labels.get("tp_rank", "0") != "0" or (kind == "gauge" and labels.get("priority", "")):
            continue
        if match and any(labels.get(label) != value for label, value in match):
            continue
        raw_labels = line[end:pos]
        # ``series`` leaves out pid: multiprocess "all" gauges add one; it never identifies another series.
        key = (canonical, series)
        previous_raw = seen.get(key)
        if previous_raw is not None:
            if previous_raw == raw_labels:
                note(f"duplicate series {name}{raw_labels} on line {index + 1} (kept the first)")
            continue
        seen[key] = raw_labels

        if canonical in poisoned:
            continue
        if not math.isfinite(value) or (kind == "cumulative" and value < 0):
            poisoned.add(canonical)
            values.pop(canonical, None)
            note(f"{name} is {tokens[0]} on line {index + 1}; treated as unknown")
            continue
        if kind == "gauge":
            values.setdefault(canonical, value)
        else:
            values[canonical] = values.get(canonical, 0.0) + value

    if eof_line is not None:
        openmetrics = True
        trailing = [n + 1 for n in range(eof_line + 1, len(lines)) if lines[n].strip()]
        if trailing:
            raise BadExposition(f"line {trailing[0]}: content after '# EOF'")
    elif openmetrics:
        raise BadExposition("truncated OpenMetrics body: no '# EOF' line at the end")
    if sglang_lines == 0:
        raise BadExposition(
            "no sglang metrics in the body; is this an SGLang server started with --enable-metrics?"
        )
    if unlisted:
        notes.append(f"and {unlisted} more like these")
    return Exposition(
        values=values,
        dialect="openmetrics" if openmetrics else "text",
        sample_lines=sample_lines,
        notes=tuple(notes),
    )
