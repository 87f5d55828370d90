"""The Recipes page's two pictures of the seed: the Pareto of recipes (tok/s per request against tok/s per
GPU, per recipe and concurrency, at one context) and offline benchmark runs beside production.

Kept apart from the page so it calls one function each; the numbers and sentences come from
``analysis.pareto`` and ``analysis.offline_live``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from analysis import pareto
from analysis.fraction import MIN_SAMPLES, NOISE_FRACTION
from analysis.offline_live import OfflineVsLive, compare_runs, offline_lanes, offline_points
from analysis.sample_bins import concurrency_bin_order
from collectors.store.offline_runs import OfflineRun
from views import analysis_charts, formatting

POINT_COLUMNS = {
    "recipe": st.column_config.TextColumn("recipe", pinned=True),
    "concurrency": st.column_config.TextColumn("running (bin)"),
    "user_tok_s": st.column_config.NumberColumn(
        "tok/s per request", format="%.1f", help="mean per_request_tok_s (1 / TPOT): the user's lane"
    ),
    "gpu_tok_s": st.column_config.NumberColumn(
        "tok/s per GPU", format="%.0f", help="Σ output tok/s ÷ Σ GPUs: the fleet's lane"
    ),
    "running": st.column_config.NumberColumn("mean running", format="%.1f"),
    "samples": st.column_config.NumberColumn("samples", format="%d"),
    "frontier": st.column_config.CheckboxColumn("on the frontier"),
    "dominated_by": st.column_config.TextColumn(
        "dominated by",
        help=f"another recipe's point: better in one lane beyond ±{NOISE_FRACTION:.0%}, not worse in the "
        "other",
    ),
}

OFFLINE_COLUMNS = {
    "recipe": st.column_config.TextColumn("recipe", pinned=True),
    "concurrency": st.column_config.NumberColumn(
        "concurrency", format="%d", help="the run's max concurrency"
    ),
    "context_bin": st.column_config.TextColumn("context", help="mean prompt + half the mean output"),
    "offline_tok_s": st.column_config.NumberColumn("offline tok/s", format="%.0f", help="output_throughput"),
    "offline_per_request": st.column_config.NumberColumn(
        "offline tok/s per request", format="%.1f", help="1000 ÷ mean TPOT (ms)"
    ),
    "live_per_request": st.column_config.NumberColumn(
        "production tok/s per request", format="%.1f", help="mean per_request_tok_s at the same bins"
    ),
    "change": st.column_config.NumberColumn("change", format="percent", help="production ÷ offline − 1"),
    "offline_accept": st.column_config.NumberColumn("offline accept", format="%.3f"),
    "live_accept": st.column_config.NumberColumn("production accept", format="%.3f"),
    "offline_step_ms": st.column_config.NumberColumn("offline step (ms)", format="%.1f"),
    "live_step_ms": st.column_config.NumberColumn("production step (ms)", format="%.1f"),
    "live_running": st.column_config.NumberColumn("production running", format="%.1f"),
    "samples": st.column_config.NumberColumn("samples", format="%d"),
}


def pareto_block(usable: pd.DataFrame, runs: Sequence[OfflineRun]) -> None:
    """The frontier of recipes at one context bin (the one most samples share, or the reader's pick), the
    dominated points greyed, offline runs as hollow rings, and the crossovers in words."""
    st.subheader("The Pareto of recipes", anchor=False)
    bins = pareto.context_bins(usable)
    if not bins:
        st.info(
            "No recipe has a concurrency bin with enough samples that carry both lanes: tok/s per request "
            "(1 / TPOT) and tok/s per GPU (the GPU count comes from /server_info's tp_size, or the GPU "
            "exporter).",
            icon=":material/info:",
        )
        return
    sizes = {label: _samples_at(usable, label) for label in bins}
    context = str(
        st.selectbox(
            "Context",
            bins,
            index=0,
            format_func=lambda label: f"{label} tokens ({sizes[label]:,} samples)",
            key="pareto_context",
            help="Compared at one context bin: accept length falls as context grows",
        )
    )
    points = pareto.pareto_points(usable, context)
    marked = pareto.mark_frontier(points)
    offline = offline_points(runs)
    drawn = offline[offline["context_bin"] == context]
    st.caption(
        f"Per recipe and running-request bin, at **{context}** context "
        f"({'the bin most samples share' if context == bins[0] else 'picked'}): tok/s one request sees "
        "(1 / TPOT, the user's lane) against output tok/s per GPU (the fleet's lane). More running requests "
        "trade the first for the second; the dashed line is the frontier. Grey: another recipe is better "
        f"there in one lane by more than the ±{NOISE_FRACTION:.0%} run-to-run floor and not worse in the "
        "other. "
        "Rings: offline benchmark runs at this context (not part of the frontier). Bins with "
        f"≥ {MIN_SAMPLES} samples."
    )
    order = concurrency_bin_order([*marked["concurrency"], *drawn["concurrency"]])
    st.altair_chart(analysis_charts.pareto_chart(marked, drawn, order), width="stretch")
    sentences = [pareto.frontier_sentence(marked), *pareto.crossover_sentences(points)]
    dominated = pareto.dominated_recipes(marked)
    if dominated:
        names = ", ".join(f"**{name}**" for name in dominated)
        sentences.append(f"Dominated at every concurrency it ran: {names}.")
    offline_sentences = pareto.crossover_sentences(offline_lanes(drawn))
    if offline_sentences:
        sentences.append("Offline runs alone:" + "".join(f"\n  - {line}" for line in offline_sentences))
    st.markdown("\n".join(f"- {sentence}" for sentence in sentences if sentence))
    hidden = len(offline) - len(drawn)
    if hidden:
        st.caption(f"{hidden} offline run(s) at other contexts (or context unknown) are not drawn.")
    st.dataframe(
        marked,
        column_config=POINT_COLUMNS,
        column_order=list(POINT_COLUMNS),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        key="pareto_points",
    )


def _samples_at(usable: pd.DataFrame, context: str) -> int:
    return int((usable["context_bin"] == context).sum())


def offline_block(usable: pd.DataFrame, runs: Sequence[OfflineRun]) -> None:
    """Each offline run beside production's figures of the same recipe at the same concurrency and context,
    the per-request change split into accept length and step latency."""
    st.subheader("Offline runs beside production", anchor=False)
    if not runs:
        st.caption(
            "No offline runs imported. `specwatch import bench FILE… --config F` stores sglang.bench_serving "
            "result files; each run then shows here beside production at its concurrency."
        )
        return
    compared = compare_runs(runs, usable)
    st.caption(
        "Per request, where the fraction is exact (tok/s = accept length ÷ step latency; offline step = "
        "accept length × TPOT): production ÷ offline = accept-length ratio ÷ step-latency ratio. Production "
        "is the recipe's samples at the run's running-request bin and context bin in this range; "
        f"'within noise' inside ±{NOISE_FRACTION:.0%}."
    )
    matched = [c for c in compared if c.live is not None]
    unmatched = [c for c in compared if c.live is None]
    if matched:
        st.markdown("\n".join(f"- **{_recipe(c.run)}**: {c.describe()}" for c in matched))
    else:
        st.info(
            "No offline run has production samples of its recipe at its concurrency and context in this "
            "range.",
            icon=":material/compare_arrows:",
        )
    if unmatched:
        with st.expander(f"{len(unmatched)} run(s) without production figures to compare, and why"):
            st.markdown("\n".join(f"- **{_recipe(c.run)}**: {c.describe()}" for c in unmatched))
    st.dataframe(
        offline_table(compared),
        column_config=OFFLINE_COLUMNS,
        column_order=list(OFFLINE_COLUMNS),
        hide_index=True,
        placeholder=formatting.DASH,
        width="stretch",
        key="offline_runs",
    )


def _recipe(run: OfflineRun) -> str:
    return run.recipe_id or "recipe unknown"


def offline_table(compared: Sequence[OfflineVsLive]) -> pd.DataFrame:
    """The numbers behind the sentences, one row per run (unknown: NaN, shown as a dash)."""
    rows = []
    for c in compared:
        live = c.live
        step = c.step_latency_s
        rows.append(
            {
                "recipe": _recipe(c.run),
                "concurrency": c.concurrency,
                "context_bin": c.context_bin,
                "offline_tok_s": c.run.output_tok_s,
                "offline_per_request": c.run.per_request_tok_s,
                "live_per_request": live.per_request_tok_s if live else None,
                "change": c.change,
                "offline_accept": c.accept_length,
                "live_accept": live.accept_length if live else None,
                "offline_step_ms": step * 1000.0 if step is not None else None,
                "live_step_ms": live.step_latency_s * 1000.0 if live else None,
                "live_running": live.running if live else None,
                "samples": live.samples if live else 0,
            }
        )
    return pd.DataFrame(rows, columns=list(OFFLINE_COLUMNS)).astype({"change": "float64"})
