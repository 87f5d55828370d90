"""The Recipes page: servers grouped by recipe, the Pareto of recipes (tok/s per request against tok/s per
GPU) with offline benchmark runs beside production, the flag diff between two recipes, and their comparison
at matched concurrency and context — with noise bands, "within noise" verdicts and the ratio split into the
accept-length numerator and the step-latency denominator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pandas as pd
import streamlit as st

from analysis import confidence, sample_bins
from analysis.fraction import (
    MIN_SAMPLES,
    NOISE_FRACTION,
    FractionRatio,
    FractionSummary,
    describe_ratio,
    summarize,
)
from analysis.words import times
from collectors.model import RECIPE_FLAGS, FlagValue
from collectors.store.offline_runs import OfflineRun
from views import analysis_charts, blocks, data, energy, formatting, recipe_pareto
from views import probes as probe_views
from views.page_context import PageContext


def render(ctx: PageContext) -> None:
    st.title("Recipes", anchor=False)
    st.caption(
        "Compare recipes only where the workload matches: same concurrency bin, same context bin. A knob "
        "usually wins one half of the fraction at the other's expense — read both halves."
    )
    with blocks.store_errors():
        probe_views.recipes_block(ctx)  # same prompt length for every recipe: the fairest comparison
    with blocks.store_errors():
        _, usable = blocks.analysis_history(ctx)
        if usable.empty:
            blocks.explain_no_samples(ctx, "recipe samples")
            return
        flags = data.recipes(ctx.reads)
        st.subheader("Servers by recipe", anchor=False)
        st.dataframe(
            recipe_overview(usable, flags),
            hide_index=True,
            placeholder=formatting.DASH,
            width="stretch",
            key="recipe_overview",
            column_config={
                "running (median)": st.column_config.NumberColumn(format="%.0f"),
                "context (median)": st.column_config.NumberColumn(format="compact"),
            },
        )
        runs = _offline_runs(ctx)
        recipe_pareto.pareto_block(usable, runs or ())
        if runs is not None:
            recipe_pareto.offline_block(usable, runs)
        energy.recipes_block(usable)
        ranked = list(usable.groupby("recipe").size().sort_values(ascending=False).index)
        if len(ranked) < 2:
            st.info(
                f"Only one recipe (`{ranked[0]}`) ran in the last {ctx.range_label}: nothing to compare.",
                icon=":material/info:",
            )
            return
        _compare(usable, flags, ranked)


def _offline_runs(ctx: PageContext) -> tuple[OfflineRun, ...] | None:
    """The imported offline runs; None (after one sentence) when their table cannot be read: the live
    figures do not depend on them."""
    with blocks.store_errors():
        return data.offline_runs(ctx.reads)
    return None


def recipe_overview(usable: pd.DataFrame, flags: Mapping[str, Mapping[str, FlagValue]]) -> pd.DataFrame:
    """One row per recipe: servers, samples, the workload it saw, and the flags that vary between recipes.

    No fraction means here on purpose: recipes that ran different workloads are compared below, binned.
    """
    rows = []
    for recipe, group in usable.groupby("recipe"):
        servers = sorted(group["target"].unique())
        rows.append(
            {
                "recipe": recipe,
                "servers": len(servers),
                "server names": ", ".join(servers[:6]) + (" …" if len(servers) > 6 else ""),
                "samples": len(group),
                "running (median)": float(group["running"].median()),
                "context (median)": float(group["avg_context_tokens"].median()),
                **{name: _show(flags.get(str(recipe), {}).get(name)) for name in varying_flags(flags)},
            }
        )
    return pd.DataFrame(rows).sort_values("servers", ascending=False)


def varying_flags(flags: Mapping[str, Mapping[str, FlagValue]]) -> list[str]:
    """Flags whose value differs between at least two known recipes (the rest is shared context)."""
    return [name for name in RECIPE_FLAGS if len({_show(f.get(name)) for f in flags.values()}) > 1]


def flag_diff(a: Mapping[str, FlagValue], b: Mapping[str, FlagValue]) -> pd.DataFrame:
    """The flags that differ between two recipes, in RECIPE_FLAGS order: flag, A, B."""
    rows = [(name, _show(a.get(name)), _show(b.get(name))) for name in RECIPE_FLAGS]
    return pd.DataFrame([r for r in rows if r[1] != r[2]], columns=["flag", "A", "B"])


def _show(value: FlagValue) -> str:
    return "—" if value is None else str(value)


def matched_cells(usable: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """(concurrency, context_bin) cells where both recipes have ≥ MIN_SAMPLES samples, best-matched first."""
    both = usable[usable["recipe"].isin([a, b]) & (usable["step_latency_s"] > 0)]
    counts = (
        both.dropna(subset=["concurrency", "context_bin"])
        .groupby(["concurrency", "context_bin", "recipe"])
        .size()
        .unstack("recipe", fill_value=0)
    )
    if a not in counts or b not in counts:
        return pd.DataFrame(columns=["concurrency", "context_bin", "a_samples", "b_samples"])
    cells = counts[[a, b]].rename(columns={a: "a_samples", b: "b_samples"}).reset_index()
    cells = cells[(cells["a_samples"] >= MIN_SAMPLES) & (cells["b_samples"] >= MIN_SAMPLES)]
    cells = cells.assign(_score=cells[["a_samples", "b_samples"]].min(axis=1))
    return cells.sort_values("_score", ascending=False).drop(columns="_score").reset_index(drop=True)


def oriented_ratio(a: FractionSummary, b: FractionSummary) -> FractionRatio:
    """The ratio with the faster recipe first, so the headline factor reads ≥ 1× (1.68×, not 0.60×)."""
    return FractionRatio(a, b) if a.tok_s_per_request >= b.tok_s_per_request else FractionRatio(b, a)


def concurrency_curve(rows: pd.DataFrame, recipes: list[str], noise: float) -> pd.DataFrame:
    """Per recipe and concurrency bin: measured tok/s per request with its ±noise band."""
    out = []
    for (recipe, concurrency), group in rows[rows["recipe"].isin(recipes)].groupby(["recipe", "concurrency"]):
        summary = summarize(group, str(recipe))
        if summary is None:
            continue
        value = summary.tok_s_per_request
        out.append(
            {
                "recipe": recipe,
                "concurrency": concurrency,
                "tok_s_per_request": value,
                "low": value * (1 - noise),
                "high": value * (1 + noise),
                "samples": summary.samples,
            }
        )
    return pd.DataFrame(out, columns=["recipe", "concurrency", "tok_s_per_request", "low", "high", "samples"])


def _compare(usable: pd.DataFrame, flags: Mapping[str, Mapping[str, FlagValue]], ranked: list[str]) -> None:
    st.subheader("Compare two recipes", anchor=False)
    left, middle, right = st.columns([2, 2, 1])
    a = str(left.selectbox("A (baseline)", ranked, index=0, key="recipe_a"))
    b = str(middle.selectbox("B (candidate)", ranked, index=1, key="recipe_b"))
    noise_pct = right.number_input(
        "Noise ±%", min_value=1, max_value=50, value=round(NOISE_FRACTION * 100), step=1, key="recipe_noise"
    )
    noise = float(noise_pct) / 100.0
    if a == b:
        st.info("Pick two different recipes.", icon=":material/info:")
        return
    diff = flag_diff(flags.get(a, {}), flags.get(b, {}))
    st.markdown("**Flag diff**" + ("" if not diff.empty else ": none recorded (same flags, different ids?)"))
    if not diff.empty:
        st.dataframe(
            diff.rename(columns={"A": a, "B": b}),
            hide_index=True,
            width="stretch",
            placeholder=formatting.DASH,
            key="recipe_diff",
        )
    cells = matched_cells(usable, a, b)
    if cells.empty:
        st.warning(
            "No concurrency × context bin has enough samples of both recipes: they never ran the same "
            "workload in this range, so a comparison would confound recipe and workload.",
            icon=":material/compare_arrows:",
        )
        return
    labels = [
        f"running {c.concurrency} · context {c.context_bin} ({c.a_samples} / {c.b_samples} samples)"
        for c in cells.itertuples()
    ]
    pick = st.selectbox("Matched bin", range(len(cells)), format_func=lambda i: labels[i], key="recipe_cell")
    cell = cells.iloc[int(pick or 0)]
    rows = usable[
        (usable["concurrency"] == cell["concurrency"]) & (usable["context_bin"] == cell["context_bin"])
    ]
    sa = summarize(rows[rows["recipe"] == a], a)
    sb = summarize(rows[rows["recipe"] == b], b)
    if sa is None or sb is None:
        st.info("Too few samples in this bin.", icon=":material/info:")
        return
    ratio = oriented_ratio(sa, sb)
    faster = "A" if ratio.a.label == a else "B"
    first, second = ratio.a.label, ratio.b.label
    interval = confidence.ratio_interval(rows[rows["recipe"] == first], rows[rows["recipe"] == second])
    if interval is None:  # too few windows for an interval: the noise floor alone decides
        verdict = "within noise" if ratio.within_noise(noise) else f"{faster} faster"
    else:
        call = interval.call(noise)
        verdict = f"{faster} {call}" if call in ("faster", "slower") else call
    tiles = st.columns(4)
    tiles[0].metric(
        "Throughput", times(ratio.measured), help="measured tok/s per request, faster ÷ slower", border=True
    )
    tiles[1].metric(
        "Accept length", times(ratio.accept_factor), help="the numerator, faster ÷ slower", border=True
    )
    tiles[2].metric(
        "Step latency",
        times(ratio.step_factor),
        help="the denominator, slower ÷ faster (> 1: the faster recipe's step is cheaper)",
        border=True,
    )
    tiles[3].metric(
        "Verdict",
        verdict,
        help=f"{confidence.LEVEL:.0%} bootstrap interval of per-window means; noise floor ±{noise:.0%}",
        border=True,
    )
    if interval is None:
        st.caption(
            f"Fewer than {confidence.MIN_WINDOWS} five-minute windows a side: judged by the ±{noise:.0%} "
            f"noise floor alone ({sa.samples} / {sb.samples} samples)."
        )
    else:
        st.markdown(interval.describe(first, second, noise))
    st.markdown(describe_ratio(ratio, noise))
    _bars(sa, sb, noise)
    curve = concurrency_curve(usable[usable["context_bin"] == cell["context_bin"]], [a, b], noise)
    if curve["concurrency"].nunique() > 1:
        st.markdown(
            f"**Per-request throughput across concurrency, context {cell['context_bin']}** (band: ±noise)"
        )
        order = sample_bins.concurrency_bin_order(list(curve["concurrency"]))
        st.altair_chart(
            analysis_charts.recipe_curve(curve, "tok_s_per_request", "tok/s per request", order),
            width="stretch",
        )


def _bars(sa: FractionSummary, sb: FractionSummary, noise: float) -> None:
    specs: list[tuple[str, str, str, Callable[[FractionSummary], float]]] = [
        ("accept_length", "accept length (tokens / step)", ".3f", lambda s: s.accept_length),
        ("step_ms", "step latency (ms)", ".1f", lambda s: s.step_latency_s * 1000),
        ("tok_s", "tok/s per request", ".2f", lambda s: s.tok_s_per_request),
    ]
    columns = st.columns(3)
    for column, (key, title, fmt, get) in zip(columns, specs, strict=True):
        values = [get(sa), get(sb)]
        frame = pd.DataFrame(
            {
                "recipe": [sa.label, sb.label],
                key: values,
                "low": [v * (1 - noise) for v in values],
                "high": [v * (1 + noise) for v in values],
                "samples": [sa.samples, sb.samples],
            }
        )
        with column:
            st.altair_chart(analysis_charts.recipe_bars(frame, key, title, fmt), width="stretch")
