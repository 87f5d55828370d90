"""What hostile sizes cost: a million series under the byte cap, big targets files, 2,000 alerts at once.

Every number is a ratio against a baseline of the same run:
- refusing a 1,000,000-series body at ``scrape.max_samples`` vs parsing it in full (what the collector did),
  in time and in peak memory;
- loading a 20,000-target targets_file vs a 2,000-target one (linear: ≈ 10×; the old duplicate-name check was
  quadratic);
- building the notifications of 2,000 alerts firing at once, split under 256 KiB, vs of 200.
"""

from __future__ import annotations

import json
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from alerts.model import AlertState, AlertTransition
from alerts.payloads import outbox_items
from bench.measure import best_s
from collectors.direct.metrics_reader import parse_exposition
from collectors.errors import BadExposition
from config import load_targets_file

SGLANG_LINE = 'sglang:num_running_reqs{model_name="kimi-k3",tp_rank="0"} 4\n'


def _peak_mb(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def _wide_body(series: int) -> bytes:
    return (SGLANG_LINE + "".join(f'x{{i="{i:x}"}} 1\n' for i in range(series))).encode()


def _refused(body: bytes) -> None:
    try:
        parse_exposition(body, max_samples=50_000)
    except BadExposition:
        return
    raise AssertionError("the cap did not refuse the body")


def _targets_file(folder: Path, count: int) -> Path:
    path = folder / f"targets-{count}.json"
    path.write_text(
        json.dumps(
            [{"name": f"gpu-{i}", "url": f"http://10.0.{i // 250}.{i % 250}:30000"} for i in range(count)]
        )
    )
    return path


def _changes(count: int) -> list[tuple[AlertTransition, float]]:
    out = []
    for i in range(count):
        labels = {
            "alertname": "TargetDown",
            "target": f"gpu-{i:05d}",
            "deployment": "east",
            "severity": "critical",
        }
        out.append(
            (
                AlertTransition(
                    ts=1.8e9,
                    rule="TargetDown",
                    target=labels["target"],
                    fingerprint=labels["target"],
                    from_state=AlertState.PENDING,
                    to_state=AlertState.FIRING,
                    value=1.0,
                    labels=tuple(sorted(labels.items())),
                    annotations=(("summary", f"{labels['target']} has not answered for 30 s"),),
                ),
                1.8e9,
            )
        )
    return out


def _notifications(changes: list[tuple[AlertTransition, float]]) -> int:
    return len(
        outbox_items(
            changes,
            webhook_urls=["http://pager/hook"],
            alertmanager_receiver=None,
            external_url="http://localhost:8501",
            alertmanager_ends_at=1.8e9 + 240,
        )
    )


def main() -> dict[str, object]:
    wide = _wide_body(1_000_000)
    full_parse_s = best_s(lambda: parse_exposition(wide), 2, collect_first=True)
    refuse_s = best_s(lambda: _refused(wide), 3, collect_first=True)
    full_parse_mb = _peak_mb(lambda: parse_exposition(wide))
    refuse_mb = _peak_mb(lambda: _refused(wide))
    with tempfile.TemporaryDirectory() as folder:
        small, big = _targets_file(Path(folder), 2_000), _targets_file(Path(folder), 20_000)
        small_s = best_s(lambda: load_targets_file(small), 5, collect_first=True)
        big_s = best_s(lambda: load_targets_file(big), 5, collect_first=True)
    few, many = _changes(200), _changes(2_000)
    few_s = best_s(lambda: _notifications(few), 3, collect_first=True)
    many_s = best_s(lambda: _notifications(many), 3, collect_first=True)
    return {
        "wide_body_mb": round(len(wide) / 1e6, 1),
        "wide_full_parse_s": round(full_parse_s, 3),
        "wide_refused_s": round(refuse_s, 3),
        "refused_vs_full_parse": round(refuse_s / full_parse_s, 3),
        "wide_full_parse_peak_mb": round(full_parse_mb, 1),
        "wide_refused_peak_mb": round(refuse_mb, 1),
        "refused_vs_full_parse_memory": round(refuse_mb / full_parse_mb, 3),
        "targets_file_2k_s": round(small_s, 3),
        "targets_file_20k_s": round(big_s, 3),
        "targets_file_20k_vs_2k": round(big_s / small_s, 1),
        "notifications_for_2000_alerts": _notifications(many),
        "notify_build_2000_s": round(many_s, 3),
        "notify_build_2000_vs_200": round(many_s / few_s, 1),
    }
