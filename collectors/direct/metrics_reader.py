"""Fast reader of SGLang's /metrics (Prometheus text 0.0.4 and OpenMetrics), for the samples the signals need.

Cheap string checks pick the few kept lines out of the body; only those get a real parse (labels, escapes,
value). SGLang's traps are handled here, once, as the signal catalogue (``collectors.signals``) declares them:
both ``sglang:`` and ``sglang_`` spellings, ``tp_rank="0"`` only, ``priority=""`` for gauges, ``pid`` ignored,
counters summed over their remaining labels (``priority``, ``is_streaming``, ``cache_source``) after the
catalogue's matchers (``mode="decode"``), histograms read as ``_sum``/``_count`` only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ahocorasick_rs import BytesAhoCorasick, Implementation, MatchKind

from collectors.errors import BadExposition
from collectors.signals import all_families
from collectors.slo import SampleKind, format_le

# "bucket": one cumulative histogram bucket per wanted ``le`` (an SLO's threshold), kept under
# ``collectors.slo.bucket_sample``'s key and summed like a counter.
Kind = SampleKind
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
    notes: tuple[str, ...] = ()  # non-fatal oddities in words: duplicate series, NaN/Inf in a family we use
    # Counts the body's sample lines on demand: the reader visits only kept lines, and only the benchmark
    # and the tests ask how many there were.
    count_lines: Callable[[], int] = field(default=lambda: 0, repr=False, compare=False)

    @property
    def sample_lines(self) -> int:
        """Every sample line in the body, kept or not (the benchmark's unit)."""
        return self.count_lines()

    def get(self, name: str) -> float | None:
        return self.values.get(name)


_Entry = tuple[str, Kind, tuple[tuple[str, str], ...]]


def _lookup(wanted: Mapping[str, Kind]) -> dict[str, _Entry]:
    """Both spellings of every wanted sample name → (canonical name, kind, extra matchers).

    A bucket is wanted as ``sglang:<name>_bucket{le=<le>}``: its entry's matchers list the wanted ``le``
    values (several thresholds of one histogram share the entry)."""
    table: dict[str, _Entry] = {}
    for name, kind in wanted.items():
        if not name.startswith(_PREFIXES):
            raise ValueError(f"wanted sample {name!r} does not start with 'sglang:'")
        le: tuple[tuple[str, str], ...] = ()
        if kind == "bucket":
            name, _, rest = name.partition("{le=")
            le = (("le", rest.rstrip("}")),)
        suffix = name[len("sglang:") :]
        canonical = "sglang:" + suffix
        old = table.get(canonical)
        match = (old[2] if old is not None else ()) + le if kind == "bucket" else ()
        entry = (canonical, kind, match or SAMPLE_MATCH.get(canonical, ()))
        table["sglang:" + suffix] = entry
        table["sglang_" + suffix] = entry
    return table


_SIGNAL_LOOKUP = _lookup(SIGNAL_SAMPLES)


def _quote(line: str, limit: int = 80) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "…")


def _clip(text: str, limit: int = 120) -> str:
    """The server's words in a note, at most ``limit`` characters: a note becomes the target's error, stored
    with every row (a 64 KiB label value quoted whole was 64 KiB a row, issue 23)."""
    return text if len(text) <= limit else text[:limit] + "…"


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


def _parse_labels(line: str, pos: int, line_no: Callable[[], int]) -> tuple[dict[str, str], int]:
    """Labels of the block starting at ``line[pos] == "{"``; returns them and the index just after ``}``."""
    block = _LABEL_BLOCK.match(line, pos)
    if block is None:
        raise BadExposition(f"line {line_no()}: malformed labels: {_quote(line)}")
    labels: dict[str, str] = {}
    for name, value in _LABEL.findall(line, pos + 1, block.end() - 1):
        labels[name] = _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], value) if "\\" in value else value
    return labels, block.end()


_SAMPLE_LINE = re.compile(r"^[^#\n]", re.MULTILINE)


def count_samples(text: str, limit: int) -> int:
    """Sample lines (neither blank nor a comment) in a body, counted before anything is split or parsed:
    at most ``limit`` means within the limit (an upper bound); over it, the exact count."""
    # A counted line is at least one character and its newline: half the length bounds them for free (the
    # golden body is 97 KB, the default limit 50,000). Then lines, comments and blanks included: an upper
    # bound at C speed (~30 µs a body; counting "\n#" too cost ~80 µs, to tighten a bound ~50× under the
    # limit).
    rough = (len(text) + 1) // 2
    if rough <= limit:
        return rough
    rough = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if rough <= limit:
        return rough
    return len(_SAMPLE_LINE.findall(text))  # one-character matches: cached strings, no per-match objects


# A kept line's name and label block → its series key (canonical name and labels without pid, sorted; None
# when the line is not one the signals read: another tp_rank, a priority breakdown, another mode), where its
# value starts, and the raw block. Across cycles and servers the same few dozen heads recur, so each is read
# once: the label regexes and the filters cost ~5 µs a line, more than the rest of a kept line's read. Kept
# per plan, bounded, cleared when full.
_SeriesRead = tuple[tuple[str, tuple[tuple[str, str], ...]] | None, int, str]
LABEL_CACHE_MAX = 100_000
# Heads longer than this are read every time, not cached: SGLang's are ~150 characters, and a cache bounded
# in entries alone held 100,000 heads of 64 KiB label values (three copies each: ~19 GB) before it was
# cleared (issue 23). Bounded in characters too: at most LABEL_CACHE_MAX × 3 × this.
LABEL_CACHE_HEAD_MAX = 1024


class _Reader:
    """The state of one parse: kept values, poisoned names, series seen, notes, line counts.

    ``line`` reads any line the old way (validated, looked up, then ``sample``); ``sample`` is the real parse
    of a line whose name is a kept sample. A line is known by ``at`` (its number, or where it starts in the
    body): numbers are only needed for errors and notes, so ``line_no(at)`` counts them only then.
    """

    __slots__ = (
        "line_no",
        "lookup",
        "names",
        "notes",
        "poisoned",
        "sample_lines",
        "seen",
        "series",
        "sglang_lines",
        "unlisted",
        "values",
    )

    def __init__(self, plan: _Plan, line_no: Callable[[int], int]) -> None:
        self.lookup = plan.lookup
        self.series = plan.series
        self.line_no = line_no
        self.values: dict[str, float] = {}
        self.poisoned: set[str] = set()  # canonical names unusable this scrape (NaN/Inf/negative counter)
        self.seen: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self.notes: list[str] = []
        self.unlisted = 0
        self.sample_lines = 0
        self.sglang_lines = 0
        # Names repeat line after line (histogram buckets), so each distinct name is validated and looked up
        # once: a (canonical, kind) entry for kept samples, True for other sglang samples, False for others.
        self.names: dict[str, _Entry | bool] = {}

    def note(self, text: str) -> None:
        if len(self.notes) < _MAX_NOTES:
            self.notes.append(text)
        else:
            self.unlisted += 1

    def line(self, line: str, at: int) -> None:
        """Any line but a comment: its name validated and looked up, the kept ones read."""
        if not line:
            return
        end = line.find("{")
        if end < 0:
            end = min((p for p in (line.find(" "), line.find("\t")) if p >= 0), default=-1)
        name = line[:end]
        status = self.names.get(name)
        if status is None:
            if end <= 0 or _NAME.fullmatch(name) is None:
                raise BadExposition(f"line {self.line_no(at)} is not a Prometheus sample: {_quote(line)}")
            status = self.lookup.get(name) or name.startswith(_PREFIXES)
            self.names[name] = status
        self.sample_lines += 1
        if status is False:
            return
        self.sglang_lines += 1
        if status is True:
            return
        self.sample(line, name, end, status, at)

    def sample(self, line: str, name: str, end: int, entry: _Entry, at: int) -> None:
        """The real parse of a kept line (``name`` is its name, ``end`` where the name ends)."""
        close = line.rfind("}") + 1 if line[end] == "{" else end
        read = self.series.get(line[:close])
        if read is None:
            read = self._series(line, end, close, entry, at)
        key, pos, raw_labels = read
        tokens = line[pos:].split()
        if not tokens:
            raise BadExposition(f"line {self.line_no(at)}: no value: {_quote(line)}")
        try:
            value = float(tokens[0])
        except ValueError:
            raise BadExposition(
                f"line {self.line_no(at)}: value {_clip(tokens[0], 40)!r} is not a number: {_quote(line)}"
            ) from None
        if key is None:
            return
        canonical = key[0]
        previous_raw = self.seen.get(key)
        if previous_raw is not None:
            if previous_raw == raw_labels:
                self.note(
                    f"duplicate series {name}{_clip(raw_labels)} on line {self.line_no(at)} (kept the first)"
                )
            return
        self.seen[key] = raw_labels

        if canonical in self.poisoned:
            return
        if not math.isfinite(value) or (entry[1] != "gauge" and value < 0):
            self.poisoned.add(canonical)
            self.values.pop(canonical, None)
            self.note(f"{name} is {_clip(tokens[0], 40)} on line {self.line_no(at)}; treated as unknown")
        elif entry[1] == "gauge":
            self.values.setdefault(canonical, value)
        else:
            self.values[canonical] = self.values.get(canonical, 0.0) + value

    def _series(self, line: str, end: int, close: int, entry: _Entry, at: int) -> _SeriesRead:
        """A kept line's series key, value position and raw labels (cached if the block ends at ``close``)."""
        labels: dict[str, str] = {}
        pos = end
        if line[end] == "{":
            labels, pos = _parse_labels(line, end, lambda: self.line_no(at))
        # Live values come from tp_rank 0 only (other ranks carry constants and zeros: never sum ranks). Under
        # priority scheduling a scheduler gauge's total is the priority="" series (the others break it down),
        # while the tokenizer's counters and histograms exist only per priority: those are summed.
        canonical, kind, match = entry
        key: tuple[str, tuple[tuple[str, str], ...]] | None = None
        if kind == "bucket":
            le = _bucket_le(labels.get("le"))
            if le is not None and ("le", le) in match and labels.get("tp_rank", "0") == "0":
                pairs = tuple(sorted((k, v) for k, v in labels.items() if k not in ("pid", "le")))
                key = (f"{canonical}{{le={le}}}", pairs)
        elif not (
            labels.get("tp_rank", "0") != "0"
            or (kind == "gauge" and labels.get("priority", ""))
            or (match and any(labels.get(label) != wanted for label, wanted in match))
        ):
            # The key leaves out pid: multiprocess "all" gauges add one; it never identifies another series.
            key = (canonical, tuple(sorted((k, v) for k, v in labels.items() if k != "pid")))
        read = (key, pos, line[end:pos])
        # A "}" after the block (in a timestamp?) would make the head wrong: not cached; nor an outsized one.
        if pos == close and close <= LABEL_CACHE_HEAD_MAX:
            if len(self.series) >= LABEL_CACHE_MAX:
                self.series.clear()
            self.series[line[:close]] = read
        return read


def _le_marks(le: str) -> tuple[bytes, ...]:
    """``le="…"`` as exporters spell one boundary: Go/prometheus_client ("1.0", "0.04"), plain ("1"),
    exponent ("1e+00", "1.000000e+00")."""
    value = float(le)
    mantissa, _, exponent = f"{value:e}".partition("e")
    short = f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"
    spellings = {le, repr(value), f"{value:g}", f"{value:e}", short}
    if value.is_integer():
        spellings.add(f"{value:.1f}")
    return tuple(f'le="{spelling}"'.encode() for spelling in sorted(spellings))


def _bucket_le(raw: str | None) -> str | None:
    """A bucket's ``le`` in ``collectors.slo.format_le``'s spelling; None when it is no number."""
    try:
        return format_le(float(raw)) if raw is not None else None
    except ValueError:
        return None


# First byte of a line: a sample's name starts with a letter, "_" or ":"; a comment with "#"; "\n" is a
# blank line. Anything else is not Prometheus text (the line-by-line read says which line and why).
_LINE_START = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:#\n")


class _Plan:
    """What to look for: the kept names (both spellings), one automaton finding all their lines in one pass,
    and the cache of kept lines' heads."""

    def __init__(self, lookup: Mapping[str, _Entry]) -> None:
        self.lookup = lookup
        # Bucket lines are not looked for by name (below).
        self.names = tuple(name for name, entry in lookup.items() if entry[1] != "bucket")
        # Leftmost-longest: a kept name that is a prefix of another kept name yields to it on its lines.
        # Lines that start with neither a name, a comment nor a blank are found in the same pass (one pattern
        # per such first byte): the automaton stays at ~27 µs for the golden body, where numpy checking every
        # line's start cost ~30 µs more.
        self.automaton = BytesAhoCorasick(
            [b"\n" + name.encode() for name in self.names]
            + [b"\n# EOF"]
            + [b"\n" + bytes([byte]) for byte in range(256) if byte not in _LINE_START],
            matchkind=MatchKind.LeftmostLongest,
            implementation=Implementation.DFA,
        )
        self.eof = len(self.names)  # the index of "\n# EOF"; higher ones are bad line starts
        self.series: dict[str, _SeriesRead] = {}
        # A histogram has a bucket line per boundary and series (156 in the golden body) and an SLO wants
        # one boundary. Exporters write a series' buckets right before its _count line (prometheus_client,
        # also multiprocess), so the wanted le is looked for with bytes.rfind between a series' _count line
        # and the previous one's, in the spellings exporters write ("1.0", "1", "1e+00"): no other bucket
        # line is visited. One bucket per _count line or the whole stretch is searched (``_read_buckets``).
        self.bucket_of: dict[int, tuple[str, tuple[bytes, ...]]] = {}  # a _count's index → its bucket
        for name, entry in lookup.items():
            count = name.removesuffix("_bucket") + "_count"
            if entry[1] == "bucket" and count in lookup:
                marks = tuple(mark for _, le in entry[2] for mark in _le_marks(le))
                self.bucket_of[self.names.index(count)] = (name, marks)


_SIGNAL_PLAN = _Plan(_SIGNAL_LOOKUP)
SamplePlan = _Plan  # what a reader of many bodies builds once: ``sample_plan(wanted)``


def sample_plan(extra: Mapping[str, Kind] | None = None) -> SamplePlan:
    """The signals' samples plus ``extra`` (an SLO's buckets and counters), compiled once for many bodies."""
    if not extra:
        return _SIGNAL_PLAN
    return _Plan(_lookup({**SIGNAL_SAMPLES, **extra}))


_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")
_DELIMITERS = frozenset(b"{ \t")
_SAMPLE_LINE_BYTES = re.compile(rb"^[^#\n]", re.MULTILINE)


def _is_eof(data: bytes, at: int) -> bool:
    """Whether the line at ``at`` is "# EOF" (trailing whitespace allowed, as a str's ``rstrip``)."""
    stop = data.find(b"\n", at)
    return data[at : len(data) if stop < 0 else stop].decode().rstrip() == "# EOF"


def _read_fast(reader: _Reader, plan: _Plan, data: bytes) -> int | bool | None:
    """Read only the kept lines of ``data`` (the body without its final newline), found by one pass of the
    automaton, which also finds any line starting like no sample, comment or blank. Returns where an
    "# EOF" line starts (None without one), or False when the line-by-line read must decide: a line that
    starts badly, a kept name followed by neither labels nor a value, no kept line at all (is there any
    sglang sample?), or a ``BadExposition`` (the first problem in body order)."""
    eof: int | None = None
    kept: list[tuple[int, int, int]] = []
    if data[:1] not in _FIRST_OK:
        return False
    if data.startswith(b"# EOF") and _is_eof(data, 0):
        eof = 0
    else:
        for index, start, end in plan.automaton.find_matches_as_indexes(data):
            if index < plan.eof:
                kept.append((index, start + 1, end))
            elif index > plan.eof:
                return False  # a line starting badly
            elif _is_eof(data, start + 1):
                eof = start + 1
                break
    if eof is not None and data[eof:].partition(b"\n")[2].strip():
        # Content after "# EOF" is an error; only the line-by-line read knows whether another came first.
        return False
    if not kept and not data.startswith(_PREFIXES_BYTES):
        return False
    names = plan.names
    lookup = plan.lookup
    if data and not data.startswith(b"#"):  # line 1 has no newline before it: read it as a line
        stop = data.find(b"\n")
        reader.line(data[: len(data) if stop < 0 else stop].decode(), 0)
    counts: dict[int, list[int]] = {}  # a wanted histogram's _count lines (where each starts)
    for index, at, end in kept:
        delimiter = data[end] if end < len(data) else -1
        if delimiter not in _DELIMITERS:
            if delimiter in _NAME_BYTES:
                continue  # a longer name: another family's sample
            return False  # a kept name with neither labels nor a value after it
        stop = data.find(b"\n", end)
        name = names[index]
        reader.sample(data[at : len(data) if stop < 0 else stop].decode(), name, len(name), lookup[name], at)
        if index in plan.bucket_of:
            counts.setdefault(index, []).append(at)
    for index, starts in counts.items():
        _read_buckets(reader, plan, data, *plan.bucket_of[index], starts)
    return eof


def _read_buckets(
    reader: _Reader, plan: _Plan, data: bytes, name: str, marks: tuple[bytes, ...], counts: list[int]
) -> None:
    """The wanted bucket line of each series, looked for just before the series' _count line (``counts``:
    where each starts); if that does not find exactly one per series (an exporter ordering lines
    otherwise), every bucket line of the family is searched instead."""
    entry = plan.lookup[name]
    head = name.encode() + b"{"
    read: set[int] = set()

    def take(found: int, low: int, high: int) -> bool:
        at = data.rfind(b"\n", low, found) + 1 or low
        if at in read or not data.startswith(head, at):
            return False
        stop = data.find(b"\n", found, high)
        read.add(at)
        reader.sample(data[at : high if stop < 0 else stop].decode(), name, len(name), entry, at)
        return True

    low = 0
    for start in counts:
        for mark in marks:
            found = data.rfind(mark, low, start)
            if found >= 0 and take(found, low, start):
                break
        low = start
    if len(read) == len(counts):
        return
    first, last = data.find(b"\n" + head), data.rfind(b"\n" + head)
    if first < 0:
        return
    end = data.find(b"\n", last + 1)
    end = len(data) if end < 0 else end
    for mark in marks:
        found = data.find(mark, first, end)
        while found >= 0:
            take(found, first + 1, end)
            stop = data.find(b"\n", found, end)
            found = data.find(mark, stop, end) if stop >= 0 else -1


_FIRST_OK = frozenset(bytes([byte]) for byte in _LINE_START) | {b""}
_PREFIXES_BYTES = (b"sglang:", b"sglang_")


def _read_lines(reader: _Reader, lines: list[str]) -> int | None:
    """Read the body's lines one by one; returns the index of its "# EOF" line, or None."""
    for index, line in enumerate(lines):
        if line[:1] == "#":
            if line.rstrip() == "# EOF":
                return index
            continue
        reader.line(line, index + 1)
    return None


def parse_exposition(
    body: str | bytes,
    *,
    content_type: str | None = None,
    wanted: Mapping[str, Kind] | None = None,
    max_samples: int | None = None,
    plan: SamplePlan | None = None,
) -> Exposition:
    """Read the samples in ``wanted`` (default: what the signals need) from a /metrics body.

    Raises ``BadExposition`` (a message in words, no target name: the caller adds it) for anything that is
    not Prometheus text or OpenMetrics: empty, HTML, JSON, binary, a line that starts like no sample, comment
    or blank, a malformed kept line, a truncated body, no sglang metrics, more than ``max_samples`` samples
    (checked before anything is split: a million series under the byte cap would otherwise cost seconds and
    hundreds of MB each).

    One pass of an Aho-Corasick automaton (``ahocorasick_rs``, a DFA in Rust) finds the kept samples' lines
    in both spellings, an "# EOF" line, and any line that starts like no sample, comment or blank; only the
    kept lines are read in Python (~0.1 ms for the golden body instead of ~0.3 ms visiting its 749 lines).
    Other lines' names are checked by their first character only. A body the fast read cannot vouch for is
    read line by line, as before, so its error names the first bad line.
    """
    if plan is None:
        plan = _SIGNAL_PLAN if wanted is None else _Plan(_lookup(wanted))
    text = _decode(body)
    _reject_other_formats(text, content_type)
    if max_samples is not None:
        samples = count_samples(text, max_samples)
        if samples > max_samples:
            raise BadExposition(
                f"{samples} samples, over scrape.max_samples ({max_samples}); the server exposes too many "
                "series (per-request labels?), raise the cap only if that is expected"
            )
    openmetrics = "openmetrics" in (content_type or "").lower()
    last = text[text.rfind("\n") + 1 :]
    if last and last.rstrip() != "# EOF":
        # Every line ends with a newline: a body that stops mid-line was cut off (closed connection, proxy).
        if openmetrics:
            raise BadExposition("truncated OpenMetrics body: no '# EOF' line at the end")
        raise BadExposition(f"truncated body: the last line does not end with a newline ({_quote(last)})")

    data = body if isinstance(body, bytes) else body.encode()
    data = data[:-1] if data.endswith(b"\n") else data
    reader = _Reader(plan, lambda at: data.count(b"\n", 0, at) + 1)
    try:
        fast = _read_fast(reader, plan, data)
    except BadExposition:
        fast = False
    eof_line: int | None  # 1-based
    tail = ""  # what follows the "# EOF" line
    if fast is not False:
        eof = fast
        sglang = True

        def count_lines() -> int:
            return len(_SAMPLE_LINE_BYTES.findall(data, 0, len(data) if eof is None else eof))

        if eof is not None:
            eof_line = data.count(b"\n", 0, eof) + 1
            tail = data[eof:].partition(b"\n")[2].decode()
        else:
            eof_line = None
    else:
        reader = _Reader(plan, lambda line_no: line_no)
        lines = (text[:-1] if text.endswith("\n") else text).split("\n")
        index = _read_lines(reader, lines)
        sglang = reader.sglang_lines > 0
        eof_line = None if index is None else index + 1
        tail = "" if index is None else "\n".join(lines[index + 1 :])
        counted = reader.sample_lines

        def count_lines() -> int:
            return counted

    if eof_line is not None:
        openmetrics = True
        if tail.strip():
            first = next(n for n, line in enumerate(tail.split("\n")) if line.strip())
            raise BadExposition(f"line {eof_line + 1 + first}: content after '# EOF'")
    elif openmetrics:
        raise BadExposition("truncated OpenMetrics body: no '# EOF' line at the end")
    if not sglang:
        raise BadExposition(
            "no sglang metrics in the body; is this an SGLang server started with --enable-metrics?"
        )
    notes = reader.notes
    if reader.unlisted:
        notes.append(f"and {reader.unlisted} more like these")
    return Exposition(
        values=reader.values,
        dialect="openmetrics" if openmetrics else "text",
        notes=tuple(notes),
        count_lines=count_lines,
    )
