"""The GPUs under a server: its node's DCGM exporter (``targets[].gpu_exporter_url``), read beside /metrics.

One GET of ``<gpu_exporter_url>/metrics`` per target per cycle, started with the /metrics scrape and through
the same HTTP edge (deadline, body cap, TLS; never the target's bearer token: the exporter is another
service). Only the catalogue's DCGM fields are read (``signals.gpu_families``), per GPU, and folded into the
values the derivation reads (``derive.gpu_key``): summed over the server's GPUs, averaged, and counted.

Which GPUs are the server's: every GPU the exporter shows, or those whose labels match
``targets[].gpu_labels`` (regexes, e.g. ``{gpu: "0|1"}``, or ``{pod: "k3-east-0"}`` under Kubernetes). When
/server_info says how many GPUs the server runs on (tp × pp × dp) and the exporter shows another number, the
figures would be another server's too (a shared node) or a part of this one's (a server spanning nodes): they
are left unknown, and the snapshot says why. A failing or garbage exporter never marks the target down: its
GPU signals are unknown, with the reason in the snapshot's error words.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from collectors.derive import GPU_READ_AT, gpu_key
from collectors.errors import BadExposition, ScrapeError
from collectors.http.targets import TargetClient
from collectors.signals import gpu_families
from config import Target

log = logging.getLogger(__name__)

GPU_METRICS_PATH = "/metrics"
GPU_ACCEPT = "text/plain;version=0.0.4,*/*;q=0.1"
_FIELDS: tuple[str, ...] = tuple(family.name for family in gpu_families())
_LABEL_CACHE: dict[str, re.Pattern[str]] = {}


def _label_pattern(label: str) -> re.Pattern[str]:
    """One label's value in a label set: ``gpu="3"`` (quoted, with escapes)."""
    found = _LABEL_CACHE.get(label)
    if found is None:
        found = _LABEL_CACHE[label] = re.compile(
            r"(?:^|,)\s*" + re.escape(label) + r'\s*=\s*"((?:[^"\\]|\\.)*)"'
        )
    return found


_UNESCAPE = re.compile(r"\\([\\\"n])")


def _label(labels: str, name: str) -> str | None:
    found = _label_pattern(name).search(labels)
    if found is None:
        return None
    value = found.group(1)
    return (
        _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value) if "\\" in value else value
    )


class ExporterClient(TargetClient):
    """The edge's client, speaking of the exporter: its setting and what a refusal means."""

    url_setting = "targets[].gpu_exporter_url"

    @staticmethod
    def status_hint(status: int, path: str, target: Target) -> str:
        del path, target
        if status in (401, 403):
            return "the exporter wants credentials, which specwatch does not send it: open its /metrics"
        return "check targets[].gpu_exporter_url is the node's dcgm-exporter (default port 9400)"


@dataclass(frozen=True, slots=True)
class GpuReading:
    """The server's GPUs in one exporter answer: ``values`` keyed as the derivation reads them."""

    values: dict[str, float]
    gpus: int  # the server's GPUs in the answer (after gpu_labels)
    shown: int  # every GPU the exporter shows


def _gpu_id(labels: str) -> str:
    """Which GPU a series is: dcgm-exporter's gpu index, else its UUID, else the whole label set."""
    return _label(labels, "gpu") or _label(labels, "UUID") or labels


def _lines(text: str, name: str) -> list[tuple[int, str]]:
    """(offset, line) of every sample line of ``name`` in ``text`` (which starts with a newline): the text
    format keeps a family's lines together, and the body's other ~20 fields are never split or looked at."""
    found = []
    needle = "\n" + name
    start = text.find(needle)
    while start != -1:
        after = start + len(needle)
        end = text.find("\n", after)
        end = len(text) if end == -1 else end
        if text[after : after + 1] in ("{", " ", "\t"):  # not a longer name (DCGM_FI_DEV_POWER_USAGE_INSTANT)
            found.append((start, text[start + 1 : end]))
        start = text.find(needle, end)
    return found


def parse_gpu_exposition(
    body: bytes, *, select: Mapping[str, re.Pattern[str]] | None = None, max_samples: int = 50_000
) -> GpuReading:
    """The DCGM fields the catalogue reads, per GPU, folded over the selected GPUs (``BadExposition`` in words
    for an answer that is not dcgm-exporter's Prometheus text).

    A field some selected GPU lacks, or reports as NaN, is unknown for the server (a part of its GPUs would
    understate it); a field no GPU reports is simply absent.
    """
    head = body[:200].lstrip()
    if head.startswith(b"<"):
        raise BadExposition("an HTML page, not Prometheus text")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadExposition("binary data, not Prometheus text") from None
    text = "\n" + text
    samples = 0  # of the fields read: the rest of the body is never split (only the byte cap bounds it)
    per_field: dict[str, dict[str, float]] = {name: {} for name in _FIELDS}
    shown: set[str] = set()
    chosen: set[str] = set()
    for name in _FIELDS:
        lines = _lines(text, name)
        samples += len(lines)
        if samples > max_samples:
            raise BadExposition(f"more than {max_samples} samples of the fields read (scrape.max_samples)")
        for offset, line in lines:
            close = line.rfind("}")
            labels, rest = (
                (line[len(name) + 1 : close], line[close + 1 :]) if close != -1 else ("", line[len(name) :])
            )
            if close == -1 and "{" in line:
                raise BadExposition(
                    f"line {text.count(chr(10), 0, offset) + 1} is not a sample line: {line[:80]!r}"
                )
            parts = rest.split()
            try:
                value = float(parts[0])
            except (IndexError, ValueError):
                number = text.count("\n", 0, offset) + 1
                raise BadExposition(f"line {number}: {rest.strip()[:40]!r} is not a number") from None
            gpu = _gpu_id(labels)
            shown.add(gpu)
            if select and not all(
                (found := _label(labels, label)) is not None and pattern.fullmatch(found)
                for label, pattern in select.items()
            ):
                continue
            chosen.add(gpu)
            per_field[name][gpu] = value
    if not any(per_field.values()) and not shown:
        raise BadExposition(
            f"no {' or '.join(_FIELDS[:2])} series: is this dcgm-exporter, with those fields in its counters?"
        )
    values: dict[str, float] = {}
    for name, by_gpu in per_field.items():
        if not by_gpu or set(by_gpu) != chosen or not all(math.isfinite(v) for v in by_gpu.values()):
            continue
        total = math.fsum(by_gpu.values())
        values[gpu_key(name)] = total
        values[gpu_key(name, "avg")] = total / len(by_gpu)
        values[gpu_key(name, "count")] = float(len(by_gpu))
    return GpuReading(values, len(chosen), len(shown))


def compile_selection(target: Target) -> dict[str, re.Pattern[str]]:
    return {label: re.compile(pattern) for label, pattern in target.gpu_labels.items()}


@dataclass(frozen=True, slots=True)
class GpuAnswer:
    """What the exporter said for one cycle: the values to derive from (empty: unknown) and why not."""

    reading: GpuReading | None
    problem: str | None = None


async def read_gpus(
    client: ExporterClient,
    exporter: Target,
    select: Mapping[str, re.Pattern[str]],
    *,
    deadline: float,
    max_samples: int,
    rate_clock: Callable[[], float] | None = None,
) -> GpuAnswer:
    """One exporter answer, never raising for the exporter's sake (``problem`` says what went wrong).
    ``rate_clock`` stamps when it arrived (``GPU_READ_AT``): its counters' rates divide by that window."""
    try:
        fetched = await client.fetch(exporter, GPU_METRICS_PATH, deadline=deadline, accept=GPU_ACCEPT)
    except ScrapeError as exc:
        return GpuAnswer(None, str(exc).removeprefix(f"{exporter.name}: "))
    read_at = rate_clock() if rate_clock is not None else None
    try:
        reading = parse_gpu_exposition(fetched.body, select=select, max_samples=max_samples)
    except BadExposition as exc:
        return GpuAnswer(None, f"{fetched.url} is not a DCGM exporter's answer: {exc}")
    except Exception as exc:  # a bug here costs the GPU figures one cycle, never the server's
        log.exception("reading %s failed unexpectedly", fetched.url)
        return GpuAnswer(None, f"internal error reading {fetched.url}: {type(exc).__name__}")
    if reading.gpus == 0:
        labels = ", ".join(f"{k}=~{v.pattern!r}" for k, v in select.items())
        return GpuAnswer(
            None, f"none of the {reading.shown} GPUs {fetched.url} shows matches gpu_labels ({labels})"
        )
    if read_at is not None:
        reading.values[GPU_READ_AT] = read_at
    return GpuAnswer(reading)


def check_count(answer: GpuAnswer, server_gpus: int | None, url: str, selected: bool) -> GpuAnswer:
    """The answer, or unknown when the exporter's GPUs are not the server's: /server_info says it runs on
    ``server_gpus`` and the exporter shows another number."""
    reading = answer.reading
    if reading is None or server_gpus is None or reading.gpus == server_gpus:
        return answer
    how = "match gpu_labels" if selected else "the exporter shows"
    advice = (
        'set targets[].gpu_labels to pick this server\'s GPUs (e.g. {gpu: "0|1"})'
        if reading.gpus > server_gpus
        else "the server spans more GPUs than this exporter's node holds"
    )
    return GpuAnswer(
        None,
        f"{reading.gpus} GPUs {how} at {url}, but the server runs on {server_gpus} (/server_info tp × pp × "
        f"dp): its figures would not be this server's; {advice}",
    )


__all__ = [
    "ExporterClient",
    "GpuAnswer",
    "GpuReading",
    "check_count",
    "compile_selection",
    "parse_gpu_exposition",
    "read_gpus",
]
