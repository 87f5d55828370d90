"""``/metrics?name[]=…`` the way prometheus_client serves it.

prometheus_client answers ``name[]`` with ``registry.restricted_registry(names)``. SGLang 0.5.23 mounts
/metrics over a fresh ``CollectorRegistry`` holding one ``MultiProcessCollector``, a collector without names:
a restricted registry never collects it (unless built with ``support_collectors_without_names=True``), so
the answer is an empty 200 body — the simulator's default, since its registry is built the same way. A server
whose registry does resolve names (``honoured``) keeps in every family the samples listed (a histogram's
``_sum`` without its ``_bucket`` lines) and drops families left empty, HELP and TYPE included; ``restrict``
gives those bytes from the rendered body (tests compare both with prometheus_client's own render).
"""

from __future__ import annotations

from urllib.parse import parse_qs

Names = frozenset[str]


def requested_names(query: str) -> Names | None:
    """The ``name[]`` values of a query string; None when there are none (serve everything)."""
    values = parse_qs(query, keep_blank_values=True).get("name[]")
    return frozenset(values) if values else None


def restrict(body: bytes, names: Names) -> bytes:
    """The body with only the named samples, and the HELP/TYPE/UNIT lines of families that keep one."""
    # OpenMetrics output spells sglang:x as sglang_x (prometheus_client ≥ 0.23); the filter uses the names.
    names = names | {name.replace(":", "_") for name in names}
    out: list[str] = []
    header: list[str] = []  # the current family's HELP/TYPE/UNIT lines, until one of its samples is kept
    for line in body.decode("utf-8").splitlines(keepends=True):
        if line.startswith("# EOF"):
            out.append(line)
        elif line.startswith("# HELP "):
            header = [line]
        elif line.startswith("#"):
            header.append(line)
        elif _sample_name(line) in names:
            out += header
            header = []
            out.append(line)
    return "".join(out).encode("utf-8")


def _sample_name(line: str) -> str:
    brace, space = line.find("{"), line.find(" ")
    ends = [i for i in (brace, space) if i >= 0]
    return line[: min(ends)] if ends else line.rstrip("\n")
