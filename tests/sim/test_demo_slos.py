"""The demo's SLOs burn for a mechanism reason, in the synthesised past as live: west's saturated and radix
servers queue past the TTFT threshold while east does not, clients abort a few requests (a slow availability
burn: a ticket, not a page), and the long-context sweep burns its TPOT SLO once its context is long."""

from __future__ import annotations

import time
from pathlib import Path

import app
from analysis.slo_report import slo_status
from collectors.slo import Scope, build_slos
from collectors.store.slo_counts import SloCountStore
from collectors.store.sqlite_store import SqliteStore
from config import SimSettings, load_config

DEFAULT = Path(__file__).resolve().parents[2] / "config" / "default.yaml"


def test_the_demo_history_carries_slo_counts_that_burn_where_the_mechanism_does(tmp_path: Path) -> None:
    config = load_config(str(DEFAULT))
    slos = {slo.name: slo for slo in build_slos(config)}
    path = str(tmp_path / "history.sqlite")
    end_ts = time.time()
    app.write_sim_history(path, SimSettings(scenario="demo", history_h=1), end_ts, slos=tuple(slos.values()))
    counts, history = SloCountStore(path, create=False), SqliteStore(path)
    try:
        west, east = Scope((("deployment", "west"),)), Scope((("deployment", "east"),))
        ttft = slos["ttft-4s"]
        burning = slo_status(counts, ttft, west, end_ts, history=history)
        healthy = slo_status(counts, ttft, east, end_ts, history=history)
        assert burning.period.total > 1000  # an hour of a fleet's requests, counted every 5 minutes
        assert burning.burning == ("page", "ticket")  # a fast burn meets the slow burn's condition too
        assert healthy.burn_rates["1h"] is not None
        assert healthy.burn_rates["1h"] < 1.0  # k3-east-rag's 8K prompts now and then: within budget
        assert healthy.burning == ()
        worst = [target for target, _ in burning.worst_targets]
        assert set(worst) == {"k3-west-saturated", "k3-west-radix"}  # the two that queue
        availability = slo_status(counts, slos["availability"], Scope(), end_ts)
        assert availability.burning == ("ticket",)  # 0.3 % aborted against a 0.1 % budget: slow
        sweep = slo_status(counts, slos["tpot-40ms-long-context"], Scope((("tier", "long-context"),)), end_ts)
        assert sweep.period.bad > 0
        assert sweep.burn_rates["1h"] is not None
        assert sweep.burn_rates["1h"] > 1.0
        assert [t for t, _ in sweep.worst_targets] == ["k3-east-longctx"]
    finally:
        counts.close()
        history.close()
