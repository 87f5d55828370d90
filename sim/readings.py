"""What the collector reads from a /metrics body of a simulated server's values, without rendering the body.

History sampling derives signals the way the live collector does (``collectors.derive`` compiling the
catalogue in ``collectors.signals``) but cannot afford a body per sample. The collector's reader keeps, for
every family a signal reads, one canonical sample per name (``Family.samples``): the tp_rank 0 series,
counters and histograms summed over their other labels, a family's ``match`` labels selected, NaN left out.
``scraped_samples`` applies the same rules to the values ``sim.families`` would render, so the two agree
exactly (tests/sim/test_history.py scrapes a served body to check it). ``scraped_gpu_samples`` does the same
for the GPUs' DCGM exporter (``collectors.direct.gpu_scrape``'s fold: summed, averaged and counted over the
server's GPUs).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from collectors.derive import gpu_key
from collectors.signals import Family, all_families, gpu_families
from sim.families import FAMILY_BY_NAME, FamilyValues


@dataclass(frozen=True, slots=True)
class _Read:
    """One catalogue family as the sim holds it, and which of its series a scrape keeps."""

    name: str  # the sim's family name (no prefix, no ``_total``)
    samples: tuple[str, ...]  # canonical sample names: the value, or a histogram's _sum and _count
    labelled: bool  # its value maps label values to series (``sim.families``); else it is the one series
    key: tuple[str, ...] | None  # the one series its ``match`` selects; None: every series, summed
    histogram: bool


def _read(family: Family) -> _Read:
    name = family.name.removesuffix("_total") if family.kind == "counter" else family.name
    spec = FAMILY_BY_NAME.get(name)
    if spec is None:  # at import: a catalogue family the simulated server does not expose
        raise ValueError(f"the signal catalogue reads sglang:{family.name}, which sim/catalogue.py does not")
    own = [label for label in spec.labels if label != "pid"]  # series keys hold these, in this order
    wanted = dict(family.match)
    if wanted and set(wanted) != set(own):
        raise ValueError(f"sglang:{family.name}: a catalogue match must name each of {own}, not {wanted}")
    key = tuple(wanted[label] for label in own) if wanted else None
    return _Read(name, family.samples, bool(own), key, family.kind == "histogram")


_READS = tuple(_read(family) for family in all_families())
# Most families are one number read as it is: a loop of their own keeps the common case cheap.
_NUMBERS = tuple((r.name, r.samples[0]) for r in _READS if not r.labelled and not r.histogram)
_SERIES = tuple(r for r in _READS if r.labelled or r.histogram)


def scraped_samples(values: Mapping[str, FamilyValues]) -> dict[str, float]:
    """The kept samples (``Exposition.values``) a scrape of a body rendering ``values`` would yield."""
    out: dict[str, float] = {}
    for name, sample in _NUMBERS:
        number = values.get(name)
        if number is not None and number == number:  # NaN is left out, as the reader leaves it out
            out[sample] = float(cast(float, number))
    for read in _SERIES:
        value: Any = values.get(read.name)
        if value is None:
            continue
        series: Collection[Any]
        if not read.labelled:
            series = (value,)
        elif read.key is None:
            series = value.values()
        else:
            series = (value[read.key],) if read.key in value else ()
        if not series:
            continue  # no series: no sample (unknown), as a body without one
        if read.histogram:  # _count is the +Inf bucket, as prometheus_client renders it
            out[read.samples[0]] = sum(h.sum for h in series)
            out[read.samples[1]] = sum(h.cumulative[-1] for h in series)
        elif (total := sum(series)) == total:
            out[read.samples[0]] = float(total)
    return out


GPU_FIELDS = tuple(family.name for family in gpu_families())  # the exporter's fields the catalogue reads


def scraped_gpu_samples(fields: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """The values a scrape of a DCGM body printing ``fields`` (field → each GPU's value text, as
    ``sim.gpu.field_values`` gives them) would add to a server's samples: each field the catalogue reads,
    summed over the GPUs, averaged and counted; a field with a NaN on some GPU is left out."""
    out: dict[str, float] = {}
    for name in GPU_FIELDS:
        texts = fields.get(name)
        if not texts:
            continue
        per_gpu = [float(text) for text in texts]
        if not all(math.isfinite(value) for value in per_gpu):
            continue
        total = math.fsum(per_gpu)
        out[gpu_key(name)] = total
        out[gpu_key(name, "avg")] = total / len(per_gpu)
        out[gpu_key(name, "count")] = float(len(per_gpu))
    return out
