"""The seed's measurements (Kimi-K3 + DSpark on SGLang, one MI355X node), one named constant per number.

``sim.mechanism`` derives every model constant from these; nothing else in the simulator invents a number that
the seed measured. Context lengths of the concurrency-1 sweeps are *input* lengths at OSL 1024.
"""

from __future__ import annotations

# -- §08 "Speculation degrades with context, not with batch" (block size 3, random-token prompts, OSL 1024) --
SWEEP_OSL_TOKENS = 1024
# Accept length at concurrency 1 by input length.
ACCEPT_LENGTH_BY_ISL: tuple[tuple[int, float], ...] = (
    (1024, 2.514),
    (16384, 1.892),
    (32768, 1.741),
    (65536, 1.440),
)
# Step latency (accept length × TPOT) at concurrency 1: 22.8 ms at 1K → 79.6 ms at 64K.
STEP_LATENCY_S_BY_ISL: tuple[tuple[int, float], ...] = ((1024, 0.0228), (65536, 0.0796))
# Concurrency 48, ISL/OSL 1024: "the step costs 101.9 ms".
STEP_LATENCY_S_AT_48 = 0.1019
BATCH_SWEEP_ACCEPT_RANGE = (2.473, 2.732)  # accept length across concurrency 1–48: jitter, no trend
# §12 "Random tokens make accept length noisy": bsz=1 figures carry 8–10% run-to-run variance.
ACCEPT_NOISE_REL_BATCH1 = 0.09
# Median TTFT across the OSL sweep (ISL 1024): 176–180 ms. Prefill rate peaks at 12,874 tok/s (ISL 8K–16K) and
# decays to 7,953 tok/s at 64K.
TTFT_S_AT_1K = 0.178
PREFILL_PEAK_TOK_S = 12874.0
PREFILL_TOK_S_AT_64K = 7953.0

# -- §06 "The one big knob": concurrency 48, ISL 8192 / OSL 1024 ---------------------------------------------
WINDOW_SEARCH_ISL = 8192
WINDOW_SEARCH_CONCURRENCY = 48
# DSpark block size γ → (accept length, step latency s). γ = 7 is the untuned default.
WINDOW_SEARCH: dict[int, tuple[float, float]] = {3: (2.552, 0.2553), 5: (2.893, 0.5055), 7: (2.999, 0.5127)}
DEFAULT_DSPARK_BLOCK_SIZE = 7

# -- §04/§09 "The two lanes hit different walls" -------------------------------------------------------------
SPEC_MAX_RUNNING = 48  # "Max running requests is reset to 48 for speculative decoding"
STATE_USAGE_AT_CAP = 0.98  # at 48 running the state pool is 98% full ...
KV_USAGE_AT_CAP = 0.29  # ... while the KV cache sits at 29% (default window, ISL 8192 / OSL 1024)
SHIPPED_MEM_FRACTION = 0.92  # the shipped recipe: MEM_FRAC=0.92, RADIX=0, CUDA_GRAPH_MAX_BS=256, block size 3
NON_SPEC_MEM_FRACTION = 0.93  # the non-speculative lane's memory winner

# -- §05 "The radix cache costs more than it saves — unless prefixes actually repeat" ------------------------
NON_SPEC_RUNNABLE = 570  # runnable batch with the radix cache off ...
RADIX_RUNNABLE = 114  # ... and on (several state buffers per request instead of one)
RADIX_RANDOM_THROUGHPUT = (875.08, 748.61)  # out tok/s, radix off → on, random-prefix traffic
# Not stated by the seed: 570 running requests only fit the lane's KV pool at short contexts, so its benchmark
# is taken to be ISL/OSL 1024 with every runnable slot busy.
NON_SPEC_BENCH_ISL = 1024
RADIX_SHARED_HIT_RATE = 0.682  # 32 groups × 8 prompts behind a 4K system prompt (the sim cycles groups)
RADIX_SHARED_THROUGHPUT = (8275.57, 12560.81)  # total tok/s, radix off → on
SHARED_PREFIX_PROMPTS, SHARED_PREFIX_TOKENS = 8, 4096

BOOT_S = 194.0  # one configuration costs about 194 s to boot (1.5 TB of weights)
