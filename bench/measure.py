"""How the benchmarks measure: the best of a few timed rounds, and stopping a measured child process."""

from __future__ import annotations

import gc
import math
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any


def best_s(
    fn: Callable[[], object],
    rounds: int = 3,
    *,
    clock: Callable[[], float] = time.perf_counter,
    collect_first: bool = False,
) -> float:
    """The fastest of ``rounds`` calls of ``fn``, in seconds of ``clock``: the round least disturbed by the
    box's other work. ``collect_first``: collect garbage before each call (a collection left over from
    building the inputs is not the code's cost)."""
    best = math.inf
    for _ in range(rounds):
        if collect_first:
            gc.collect()
        started = clock()
        fn()
        best = min(best, clock() - started)
    return best


def stop(process: subprocess.Popen[Any], timeout_s: float = 30.0) -> None:
    """SIGTERM (an orderly shutdown), then SIGKILL if it has not exited within ``timeout_s``."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
