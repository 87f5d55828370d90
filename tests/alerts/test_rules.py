"""Each rule on constructed windows: when it breaches, holds, clears or has no data, and what it says."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.model import Condition, Evaluation
from alerts.rules import build_rules
from alerts.rules.acceptance_decay import AcceptanceDecayWithContext, fit_decay
from alerts.window import TargetHistory
from collectors.model import Recipe, TargetSnapshot
from collectors.model import loss_shares as loss_split
from tests.alerts.conftest import recipe, snap

T0 = 1_800_000_000.0
RULES = {rule.name: rule for rule in build_rules()}


def history(
    snapshots: Iterable[TargetSnapshot], horizon_s: float = 7200.0, baseline_s: float = 1800.0
) -> TargetHistory:
    h = TargetHistory("gpu-1", horizon_s, baseline_s)
    for s in snapshots:
        h.add(s)
    return h


def verdict(name: str, h: TargetHistory, recipes: dict[str, Recipe] | None = None) -> Evaluation:
    latest = h.latest
    assert latest is not None
    (result,) = RULES[name].evaluate(h, latest.ts, recipes or {})
    return result


# -- AcceptanceDecayWithContext
# -------------------------------------------------------------------------------------
def seed_accept(context: float) -> float:
    """The seed's mechanism: 2.514 at 1K of context → 1.440 at 64K, linear in log(context)."""
    return 2.514 - (2.514 - 1.440) * math.log(context / 1024) / math.log(64)


def seed_step_s(context: float) -> float:
    """22.8 ms → 79.6 ms over the same range (3.50×), a power law in context."""
    return 0.0228 * (context / 1024) ** (math.log(79.6 / 22.8) / math.log(64))


def decaying(n: int = 120, noise: float = 0.0, seed: int = 1) -> list[TargetSnapshot]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        context = 1024 * 64 ** (i / (n - 1))
        accept = seed_accept(context) * (1 + rng.uniform(-noise, noise))
        out.append(
            snap(
                "gpu-1",
                T0 + 5 * i,
                accept_length=accept,
                avg_context_tokens=context,
                running=8,
                step_latency_s=seed_step_s(context),
            )
        )
    return out


def test_decay_with_context_breaches_and_explains_both_ends() -> None:
    result = verdict("AcceptanceDecayWithContext", history(decaying(noise=0.05)))
    assert result.condition is Condition.BREACH
    assert result.value is not None
    assert result.value > 0.30
    details = dict(result.details)
    assert float(details["accept_length_low"]) > 2.2
    assert float(details["accept_length_high"]) < 1.7
    assert float(details["context_low_tokens"]) < 2500
    assert float(details["context_high_tokens"]) > 25_000
    assert "step cost" in result.description
    assert "draft" in result.description


def test_decay_loss_split_is_log_factor_over_log_total() -> None:
    result = verdict("AcceptanceDecayWithContext", history(decaying()))
    details = dict(result.details)
    low, high = float(details["context_low_tokens"]), float(details["context_high_tokens"])
    step_ratio = seed_step_s(high) / seed_step_s(low)
    accept_ratio = float(details["accept_length_low"]) / float(details["accept_length_high"])
    expected = math.log(step_ratio) / math.log(step_ratio * accept_ratio)
    assert float(details["step_cost_share"]) == pytest.approx(expected, abs=0.005)
    assert float(details["draft_share"]) == pytest.approx(1 - expected, abs=0.005)


def test_loss_split_of_the_seeds_factors() -> None:
    step_share, draft_share = loss_split(3.50, 1.75)  # type: ignore[misc]
    assert step_share == pytest.approx(math.log(3.50) / math.log(3.50 * 1.75))
    assert step_share + draft_share == pytest.approx(1.0)
    assert loss_split(1.0, 1.0) is None  # no loss, nothing to split


def batch_noise(contexts: list[float], jitters: list[float], batches: list[int]) -> list[TargetSnapshot]:
    return [
        snap("gpu-1", T0 + 5 * i, accept_length=2.6 * (1 + j), avg_context_tokens=c, running=b)
        for i, (c, j, b) in enumerate(zip(contexts, jitters, batches, strict=True))
    ]


def test_batch_noise_with_flat_context_does_not_fire() -> None:
    rng = random.Random(7)
    n = 120
    # The seed's concurrency sweep: accept length jitters 2.473–2.732 (10.5%) while batch goes 1 → 48.
    batches = [1 + (i * 47) // (n - 1) for i in range(n)]
    jitters = [rng.uniform(-0.05, 0.05) - 0.05 * i / n for i in range(n)]  # even a 5% drift along the batch
    contexts = [8192 * rng.uniform(0.95, 1.05) for _ in range(n)]
    result = verdict("AcceptanceDecayWithContext", history(batch_noise(contexts, jitters, batches)))
    assert result.condition is Condition.CLEAR


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 0.95), st.floats(-0.5, 0.5), st.integers(1, 48)), min_size=12, max_size=120
    ),
    st.floats(512, 100_000),
)
def test_flat_context_never_fires_whatever_the_jitter(
    rows: list[tuple[float, float, int]], base: float
) -> None:
    # Context within less than a doubling (min_context_ratio is 2); accept length anywhere in ±50%.

    contexts = [base * (1 + spread) for spread, _, _ in rows]
    h = history(batch_noise(contexts, [j for _, j, _ in rows], [b for _, _, b in rows]))
    assert verdict("AcceptanceDecayWithContext", h).condition is Condition.CLEAR


def test_decline_inside_the_noise_band_does_not_fire() -> None:
    out = []
    for i in range(120):
        context = 1024 * 64 ** (i / 119)
        out.append(
            snap(
                "gpu-1", T0 + 5 * i, accept_length=2.6 - 0.25 * i / 119, avg_context_tokens=context, running=4
            )
        )
    result = verdict("AcceptanceDecayWithContext", history(out))  # a clean but only ~8% fall
    assert result.value is not None
    assert 0.05 < result.value < 0.10
    assert result.condition is Condition.HOLD  # keeps a firing alert firing, never starts one


def test_a_large_but_insignificant_fall_cannot_start_an_alert() -> None:
    rng = random.Random(3)
    for _ in range(200):  # find a scattered sample whose fitted fall is large yet not significant
        out = [
            snap(
                "gpu-1",
                T0 + 5 * i,
                accept_length=rng.uniform(1.0, 3.0) - 0.02 * i,
                avg_context_tokens=1024 * 64 ** (i / 11),
                running=4,
            )
            for i in range(12)
        ]
        decay = fit_decay(out)
        assert decay is not None
        if decay.decline > 0.10 and decay.fit.p_negative > 0.01:
            break
    else:
        pytest.fail("no insignificant sample found")
    # Not significant: it cannot start an alert (HOLD only keeps a firing one firing while the fall lasts).
    assert verdict("AcceptanceDecayWithContext", history(out)).condition is Condition.HOLD


def test_idle_server_is_ok_and_a_short_window_is_no_data() -> None:
    idle = [
        *decaying()[:-1],
        snap("gpu-1", T0 + 5 * 120, running=0, accept_length=2.0, avg_context_tokens=9000),
    ]
    assert verdict("AcceptanceDecayWithContext", history(idle)).condition is Condition.CLEAR
    assert verdict("AcceptanceDecayWithContext", history(decaying(n=120)[-6:])).condition is Condition.NO_DATA
    no_spec = [snap("gpu-1", T0 + 5 * i, running=8, avg_context_tokens=4096) for i in range(40)]
    assert verdict("AcceptanceDecayWithContext", history(no_spec)).condition is Condition.NO_DATA


def test_decay_rule_window_only_sees_its_window() -> None:
    rule = AcceptanceDecayWithContext(RULES["AcceptanceDecayWithContext"].settings)
    old_decay = decaying(n=120)
    flat_samples = int(rule.settings.window_s // 5) + 2
    flat = [
        snap("gpu-1", T0 + 5 * 120 + 5 * i, accept_length=1.5, avg_context_tokens=65536, running=8)
        for i in range(flat_samples)
    ]
    h = history(old_decay + flat)
    assert rule.evaluate(h, flat[10].ts, {})[0].condition is Condition.BREACH  # the decay is still in view

    assert rule.evaluate(h, flat[-1].ts, {})[0].condition is Condition.CLEAR  # the decay left the window


def test_decay_rule_cache_follows_the_history_it_is_given() -> None:
    rule = AcceptanceDecayWithContext(RULES["AcceptanceDecayWithContext"].settings)
    snaps = decaying(noise=0.05)
    growing = TargetHistory("gpu-1", 7200)
    incremental = []
    for s in snaps:  # as the engine does: one new snapshot per cycle, the cache converting only it
        growing.add(s)
        incremental.append(rule.evaluate(growing, s.ts, {})[0])
    fresh = AcceptanceDecayWithContext(rule.settings).evaluate(history(snaps), snaps[-1].ts, {})[0]
    assert incremental[-1] == fresh
    assert incremental[-1].condition is Condition.BREACH
    # Same target name and timestamps, different data (another engine, a replay): not the cached rows.
    flat = [snap("gpu-1", s.ts, accept_length=2.5, avg_context_tokens=8192, running=8) for s in snaps]
    assert rule.evaluate(history(flat), snaps[-1].ts, {})[0].condition is Condition.CLEAR


# -- pools, queue, down
# ----------------------------------------------------------------------------------------------
def steady(n: int = 12, **signals: float) -> TargetHistory:
    return history(snap("gpu-1", T0 + 5 * i, **signals) for i in range(n))


def test_state_pool_saturation_with_queue_breaches_and_puts_kv_beside_it() -> None:
    result = verdict(
        "StatePoolSaturation", steady(state_pool_usage=0.98, queued=12, kv_usage=0.29, running=48)
    )
    assert result.condition is Condition.BREACH
    assert "98%" in result.summary
    assert "KV cache at 29%" in result.summary
    assert "raising --max-running-requests trades token budget for slots" in result.description


@pytest.mark.parametrize(
    ("pool", "queued", "expected"),
    [
        (0.98, 0.0, Condition.HOLD),  # full but nobody waits: not a new alert, but not a recovery either
        (0.92, 5.0, Condition.HOLD),  # between recovery (0.90) and firing (0.95) thresholds
        (0.85, 5.0, Condition.CLEAR),
        (0.95, 1.0, Condition.BREACH),
    ],
)
def test_state_pool_thresholds(pool: float, queued: float, expected: Condition) -> None:
    assert verdict("StatePoolSaturation", steady(state_pool_usage=pool, queued=queued)).condition is expected


def test_rules_without_their_signal_report_no_data() -> None:
    plain = steady(kv_usage=0.5, queued=1)  # a non-hybrid model: no state pool
    assert verdict("StatePoolSaturation", plain).condition is Condition.NO_DATA
    assert verdict("KVPoolSaturation", steady(state_pool_usage=0.99)).condition is Condition.NO_DATA


@pytest.mark.parametrize(
    ("kv", "expected"), [(0.97, Condition.BREACH), (0.92, Condition.HOLD), (0.29, Condition.CLEAR)]
)
def test_kv_pool_thresholds(kv: float, expected: Condition) -> None:
    assert verdict("KVPoolSaturation", steady(kv_usage=kv, state_pool_usage=0.98)).condition is expected


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ({"queued": 40.0}, Condition.BREACH),
        ({"queued": 2.0, "ttft_s": 45.0}, Condition.BREACH),
        ({"queued": 20.0, "ttft_s": 2.0}, Condition.HOLD),
        ({"queued": 5.0, "ttft_s": 2.0}, Condition.CLEAR),
    ],
)
def test_queue_backlog_thresholds(signals: dict[str, float], expected: Condition) -> None:
    assert verdict("QueueBacklog", steady(**signals)).condition is expected


def test_target_down_counts_seconds_since_the_last_good_scrape() -> None:
    snaps = [snap("gpu-1", T0 + 5 * i, running=1) for i in range(4)]
    snaps += [snap("gpu-1", T0 + 20 + 5 * i, up=False) for i in range(5)]
    result = verdict("TargetDown", history(snaps))
    assert result.condition is Condition.BREACH
    assert result.value == pytest.approx(20.0)
    assert "connection refused" in result.description
    assert verdict("TargetDown", steady(running=3)).condition is Condition.CLEAR


# -- recipes
# ---------------------------------------------------------------------------------------------------------
OLD, NEW = recipe(speculative_dspark_block_size=3), recipe(speculative_dspark_block_size=5)
RECIPES = {OLD.recipe_id: OLD, NEW.recipe_id: NEW}


def recipe_change(new_accept: float, new_tok_s: float, new_running: float = 48) -> TargetHistory:
    before = [
        snap(
            "gpu-1",
            T0 + 5 * i,
            recipe_id=OLD.recipe_id,
            accept_length=2.55,
            output_tok_s=1061,
            running=48,
            avg_context_tokens=8704,
        )
        for i in range(360)
    ]
    after = [
        snap(
            "gpu-1",
            T0 + 1800 + 5 * i,
            recipe_id=NEW.recipe_id,
            accept_length=new_accept,
            output_tok_s=new_tok_s,
            running=new_running,
            avg_context_tokens=8704,
        )
        for i in range(120)
    ]
    return history(before + after)


def test_regression_after_a_recipe_change_names_the_flag_that_changed() -> None:
    result = verdict("AcceptLengthRegression", recipe_change(2.20, 870), RECIPES)
    assert result.condition is Condition.BREACH
    assert result.value == pytest.approx(1 - 870 / 1061)
    assert "speculative_dspark_block_size 3 → 5" in result.description
    assert dict(result.details)["previous_recipe_id"] == OLD.recipe_id


def test_regression_ignores_throughput_at_a_different_load_and_noise_sized_changes() -> None:
    assert verdict("AcceptLengthRegression", recipe_change(2.55, 300, new_running=10), RECIPES).condition is (
        Condition.CLEAR
    )
    assert verdict("AcceptLengthRegression", recipe_change(2.45, 1030), RECIPES).condition is Condition.CLEAR


def test_trading_accept_length_for_a_cheaper_step_is_no_regression() -> None:
    # The seed's winning change: block size 3 gives up 15% of accept length for 1.68× the throughput.
    assert verdict("AcceptLengthRegression", recipe_change(2.17, 1061 * 1.68), RECIPES).condition is (
        Condition.CLEAR
    )


def test_accept_length_decides_alone_when_the_load_moved() -> None:
    result = verdict("AcceptLengthRegression", recipe_change(2.17, 300, new_running=10), RECIPES)
    assert result.condition is Condition.BREACH
    assert result.value == pytest.approx(1 - 2.17 / 2.55)
    assert "accept length 2.55 → 2.17 (-15%)" in result.description


def test_regression_has_nothing_to_say_without_a_recipe_change() -> None:

    h = history(snap("gpu-1", T0 + 5 * i, accept_length=2.5, running=8) for i in range(100))
    assert RULES["AcceptLengthRegression"].evaluate(h, T0 + 500, {}) == []


def test_radix_cache_waste_needs_the_cache_on_a_low_hit_rate_and_state_pressure() -> None:
    def waste(radix: Recipe, *, known: bool = True) -> Evaluation:
        """A minute of low hit rate under state pressure on ``radix`` (``known``: the rule sees it)."""
        h = history(
            snap(
                "gpu-1",
                T0 + 5 * i,
                recipe_id=radix.recipe_id,
                cache_hit_rate=0.03,
                state_pool_usage=0.92,
                running=40,
            )
            for i in range(60)
        )
        return verdict("RadixCacheWaste", h, {radix.recipe_id: radix} if known else {})

    radix_on = recipe(disable_radix_cache=False)
    result = waste(radix_on)
    assert result.condition is Condition.BREACH
    assert "--disable-radix-cache" in result.description
    assert waste(recipe(disable_radix_cache=True)).condition is Condition.CLEAR
    assert waste(radix_on, known=False).condition is Condition.NO_DATA  # recipe unknown
