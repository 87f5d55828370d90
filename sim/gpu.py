"""The GPUs under a simulated server as NVIDIA's dcgm-exporter shows them: power, energy, utilization, memory.

One series per GPU of the server (``tp_size × dp_size``), in dcgm-exporter's text format and label names
(``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``) with its default counters'
names, types and help texts (``etc/default-counters.csv``): ``DCGM_FI_DEV_POWER_USAGE`` (W),
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since the driver loaded, a counter), ``DCGM_FI_DEV_GPU_UTIL``
(%), ``DCGM_FI_DEV_FB_USED`` / ``_FB_FREE`` (MiB) ...

Power follows the engine: idle GPUs draw ``IDLE_FRACTION`` of their TDP, prefill runs at TDP, and decode sits
between, higher the fuller the batch (``utilization`` = running / max running: one stream already clocks the
GPU up, a full batch runs at the power cap). The energy counter is the exact integral of that power over the
engine's windows — ``rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) / 1000`` equals the mean of
``DCGM_FI_DEV_POWER_USAGE`` over the same time — and survives restarts of the SGLang process (the GPUs stay
powered while it boots). The GPU is the seed's (an MI355X: 288 GB, 1400 W); specwatch reads the DCGM format.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sim import mechanism as mech
from sim.server_engine import ServerEngine

GPU_MODEL = "AMD Instinct MI355X"
TDP_W = 1400.0
IDLE_FRACTION = 0.2  # of TDP, drawn with nothing to run (clocks down, HBM refreshing)
DECODE_FLOOR = 0.5  # share of the idle→TDP span one decoding stream already draws; a full batch draws all
FB_TOTAL_MIB = round(mech.GPU_MEMORY_GB * 1024)
FB_BOOT_MIB = 512  # a GPU context and nothing else: the process is loading (or gone)
GRAPH_MIB = 3 * 1024  # CUDA graphs and the allocator's working set beyond the static pools
DRIVER_UPTIME_S = 3 * 86400.0  # the energy counter starts when the driver loaded, days before the sim
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (field, type, help) as dcgm-exporter's default-counters.csv declares them, in its order.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
)
_ENERGY_KEYS = ("decode_seconds", "decode_load_seconds", "prefill_seconds", "scheduler_idle_seconds")


def gpu_count(args: Mapping[str, Any]) -> int:
    """GPUs one server runs on: ``tp_size × dp_size``, as /server_info reports them."""
    return max(1, int(args.get("tp_size") or 1)) * max(1, int(args.get("dp_size") or 1))


def idle_power_w() -> float:
    return IDLE_FRACTION * TDP_W


def _joules(counts: Mapping[str, float]) -> float:
    """One GPU's energy over engine time whose counters are ``counts`` (linear in them: see the docstring)."""
    idle, span = idle_power_w(), TDP_W - idle_power_w()
    decode, load = counts.get("decode_seconds", 0.0), counts.get("decode_load_seconds", 0.0)
    prefill, waiting = counts.get("prefill_seconds", 0.0), counts.get("scheduler_idle_seconds", 0.0)
    busy = prefill + DECODE_FLOOR * decode + (1 - DECODE_FLOOR) * load
    return idle * (decode + prefill + waiting) + span * busy


@dataclass(frozen=True, slots=True)
class Reading:
    """One GPU-average reading of a server at one time."""

    power_w: float  # mean over the decode-log window being run (DCGM averages over its sample period)
    energy_j: float  # since the driver loaded
    busy_share: float  # of the window's time with a kernel running
    load: float  # running / max running during the window


def engine_reading(engine: ServerEngine, t: float) -> Reading:
    """Energy of one GPU from the engine's start to simulated time ``t`` and the power of the window that
    contains ``t`` (the engine simulates that window ahead; its power is constant within it)."""
    published = engine.published
    done_j = _joules(published.counts)
    if t < published.at_s:  # before the engine's first window (the process is still booting)
        return Reading(idle_power_w(), 0.0, 0.0, 0.0)
    end = engine.next_refresh_s()
    pending = {key: engine.streaming(1.0, key) for key in _ENERGY_KEYS}
    duration = max(end - published.at_s, 1e-9)
    power = _joules(pending) / duration
    busy = pending["decode_seconds"] + pending["prefill_seconds"]
    load = pending["decode_load_seconds"] / pending["decode_seconds"] if pending["decode_seconds"] else 0.0
    return Reading(power, done_j + power * min(t - published.at_s, duration), busy / duration, load)


class GpuMeter:
    """The GPUs of one server across its processes: energy carried over restarts, idle while booting."""

    def __init__(self, start_s: float) -> None:
        self._carried_j = idle_power_w() * DRIVER_UPTIME_S
        self._boot_from_s = self._boot_until_s = start_s

    def restarted(self, old: ServerEngine, at_s: float, booting_until_s: float) -> None:
        """The process restarted at ``at_s`` (its old engine ran until then); the new one runs from
        ``booting_until_s``: the GPUs idle in between."""
        self._carried_j += self._boot_j(at_s) + engine_reading(old, at_s).energy_j
        self._boot_from_s, self._boot_until_s = at_s, booting_until_s

    def _boot_j(self, t: float) -> float:
        return idle_power_w() * min(max(t - self._boot_from_s, 0.0), self._boot_until_s - self._boot_from_s)

    def reading(self, engine: ServerEngine, t: float) -> Reading:
        live = engine_reading(engine, t)
        return Reading(
            live.power_w, self._carried_j + self._boot_j(t) + live.energy_j, live.busy_share, live.load
        )


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What dcgm-exporter labels each GPU with."""

    hostname: str
    count: int
    seed: str

    def labels(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.seed}:{index}".encode()).hexdigest()
        uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        bus = 0x1B + 0x20 * index  # one root complex per GPU, as on an 8-GPU board
        return (
            f'gpu="{index}",UUID="{uuid}",pci_bus_id="00000000:{bus:02X}:00.0",device="nvidia{index}",'
            f'modelName="{GPU_MODEL}",Hostname="{_escape(self.hostname)}"'
        )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def field_values(
    count: int, reading: Reading, mem_fraction_static: float | None, only: Collection[str] | None = None
) -> dict[str, list[str]]:
    """Each field's value per GPU (index order) as the body prints it (the fields in ``only``, else all).
    ``mem_fraction_static`` is what SGLang reserved at boot; None while no process holds the GPUs (booting:
    a bare context). The history sampler reads the same texts (``sim.readings.scraped_gpu_samples``), so its
    figures equal a scrape's."""
    spread = _SPREAD[count] if count < len(_SPREAD) else _spread(count)
    busy, load = reading.busy_share, reading.load
    out: dict[str, list[str]] = {}
    for field in only if only is not None else _FIELD_NAMES:
        if field == "DCGM_FI_DEV_GPU_TEMP":
            out[field] = [str(round(34 + 46 * reading.power_w * s / TDP_W)) for s in spread]
        elif field == "DCGM_FI_DEV_POWER_USAGE":
            out[field] = [f"{reading.power_w * s:f}" for s in spread]  # dcgm-exporter prints doubles with %f
        elif field == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            out[field] = [str(int(reading.energy_j * s * 1000)) for s in spread]
        elif field == "DCGM_FI_DEV_GPU_UTIL":
            out[field] = [str(round(100 * busy))] * count
        elif field == "DCGM_FI_DEV_MEM_COPY_UTIL":  # decode streams weights and KV: bandwidth-bound
            out[field] = [str(round(busy * (35 + 50 * load)))] * count
        elif field in ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED"):
            if mem_fraction_static is None:
                used_mib = FB_BOOT_MIB
            else:
                used_mib = round(FB_TOTAL_MIB * mem_fraction_static) + GRAPH_MIB
            free = field == "DCGM_FI_DEV_FB_FREE"
            out[field] = [str(FB_TOTAL_MIB - used_mib if free else used_mib)] * count
    return out


def _spread(count: int) -> list[float]:
    """Each GPU's share of the server's mean power and energy: GPU to GPU, ±2.4 %."""
    return [1.0 + 0.012 * (((i * 7 + 3) % 5) - 2) for i in range(count)]


_FIELD_NAMES = tuple(field for field, _, _ in FIELDS)
_SPREAD = [_spread(count) for count in range(17)]


def render(identity: GpuIdentity, reading: Reading, mem_fraction_static: float | None) -> bytes:
    """The /metrics body (``field_values`` in dcgm-exporter's text format, one series per GPU)."""
    values = field_values(identity.count, reading, mem_fraction_static)
    lines: list[str] = []
    for field, kind, text in FIELDS:
        lines += [f"# HELP {field} {text}", f"# TYPE {field} {kind}"]
        lines += [f"{field}{{{identity.labels(i)}}} {value}" for i, value in enumerate(values[field])]
    return ("\n".join(lines) + "\n").encode()


def reply_body(body: bytes, accept_encoding: str) -> tuple[bytes, dict[str, str]]:
    """The body and headers dcgm-exporter's Go HTTP handler sends (gzip when the client accepts it)."""
    headers = {"Content-Type": CONTENT_TYPE}
    if "gzip" in accept_encoding:
        headers["Content-Encoding"] = "gzip"
        return gzip.compress(body, compresslevel=1), headers
    return body, headers
