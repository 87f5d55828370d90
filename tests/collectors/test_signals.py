"""The signal catalogue is the one declaration: every rendering covers exactly its signals and families."""

from __future__ import annotations

import pytest

from collectors.derive import apply_plain_decoding, derive_signals
from collectors.direct.metrics_reader import SAMPLE_MATCH, SIGNAL_SAMPLES
from collectors.model import SIGNAL_NAMES, Signals
from collectors.prometheus import queries
from collectors.prometheus.queries import SignalQueries
from collectors.signals import BY_NAME, SIGNALS, Recording, all_families, recordings


def test_every_signal_is_declared_once_in_model_order() -> None:
    assert tuple(s.name for s in SIGNALS) == SIGNAL_NAMES
    assert len(BY_NAME) == len(SIGNALS)
    for signal in SIGNALS:
        assert signal.unit, signal.name
        assert signal.help, signal.name
        assert signal.unknown, signal.name


def test_the_direct_parser_reads_exactly_the_catalogue_families() -> None:
    wanted = {sample for family in all_families() for sample in family.samples}
    assert set(SIGNAL_SAMPLES) == wanted
    assert SAMPLE_MATCH == {"sglang:realtime_tokens_total": (("mode", "decode"),)}
    for family in all_families():
        kind = "gauge" if family.kind == "gauge" else "cumulative"
        assert all(SIGNAL_SAMPLES[sample] == kind for sample in family.samples), family.name


def test_every_promql_signal_reads_only_catalogue_families() -> None:
    names = {family.name for family in all_families()}
    rendered = SignalQueries("", 60, params=(("gpu_hour_usd", 2.0),)).signals()
    assert set(rendered) == set(SIGNAL_NAMES) - {"max_running"}
    # Without a price the cost signal is rendered nowhere (unknown), the rest as before.
    assert set(SignalQueries("", 60).signals()) == set(rendered) - {"usd_per_million_tokens"}
    for signal, expr in rendered.items():
        for family in BY_NAME[signal].families:
            assert family.name in expr, (signal, family.name)
        read = {name for name in names if f'sglang[:_]{name}"' in expr or f"sglang:{name}{{" in expr}
        allowed = {f.name for f in BY_NAME[signal].families} | _referenced(signal)
        if any(name.startswith("DCGM_") for name in allowed):
            allowed.add("num_running_reqs")  # the node join: one series per server, labelled with its node
        assert read <= allowed, (signal, read)


def _referenced(signal: str) -> set[str]:
    """Families of the signals ``signal`` refers to (inlined in its PromQL)."""
    from collectors.signal_expr import refs_of

    expr = BY_NAME[signal].expr
    out: set[str] = set()
    for ref in refs_of(expr) if expr is not None else ():
        out |= {f.name for f in BY_NAME[ref].families} | _referenced(ref)
    return out


def test_the_recordings_contract_for_the_exported_rules() -> None:
    recorded = recordings(60)
    assert queries.recordings is recordings  # re-exported where the rules code imports it
    assert queries.Recording is Recording
    assert [r.signal for r in recorded] == [s for s in SIGNAL_NAMES if s != "max_running"]
    assert len({r.record for r in recorded}) == len(recorded)
    by_signal = {r.signal: r for r in recorded}
    assert by_signal["kv_usage"].record == "instance_job:sglang_kv_usage:ratio"
    assert by_signal["tpot_s"].record == "instance_job:sglang_tpot_seconds:mean1m"  # windows carry the window
    assert recordings(300)[3].record.endswith("mean5m")
    assert all(r.help == BY_NAME[r.signal].help for r in recorded)


def test_plain_decoding_is_one_rule_for_both_sources() -> None:
    measured = Signals(accept_length=None, spec_accept_rate=0.4, tpot_s=0.02, step_latency_s=None).as_dict()
    plain = apply_plain_decoding(measured)
    assert plain["accept_length"] == 1.0
    assert plain["spec_accept_rate"] is None
    assert plain["step_latency_s"] == pytest.approx(0.02)  # one token per step: the step is the TPOT
    assert plain["tpot_s"] == 0.02


def test_the_compiled_derivation_handles_a_catalogue_without_windows() -> None:
    # Every signal evaluates (to unknown) with no samples at all: no KeyError, no 0.
    signals = derive_signals({}, 0.0, None).signals
    assert set(signals.as_dict().values()) == {None}
