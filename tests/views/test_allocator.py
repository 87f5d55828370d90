"""The allocator setting the dashboard starts with: many threads' freed memory goes back to the system.

A process like the dashboard's (a thread per session, each allocating and freeing frames) holds on to freed
memory spread over per-thread arenas; what a user sees is its RSS. Measured in child processes, one tuned as
``start_runtime`` tunes the dashboard's, one as glibc leaves it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from views import allocator

ROOT = Path(__file__).resolve().parents[2]

# Sixteen threads at once, each allocating ~40 MB in 1 KB blocks (glibc's, not
# pymalloc's) and keeping one block in fifty: the rest is freed but pinned between survivors.
CHILD = """
import sys, threading
from views import allocator
tuned = sys.argv[1] == "tuned"
if tuned:
    assert allocator.limit_arenas()
kept = []
def work():
    blocks = [bytes(1024) for _ in range(40_000)]
    kept.append(blocks[::50])
threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if tuned:
    allocator.trim()
rss = next(line for line in open("/proc/self/status") if line.startswith("VmRSS"))
print(int(rss.split()[1]) // 1024)
"""


def _rss_mb(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    return int(done.stdout.strip())


@pytest.mark.skipif(not allocator.available(), reason="glibc's allocator only")
def test_many_threads_freed_memory_is_handed_back() -> None:
    plain, tuned = _rss_mb("plain"), _rss_mb("tuned")
    # 16 × 40 MB were allocated; with one block in fifty kept, ~13 MB is live.
    assert tuned < plain - 100, f"tuned {tuned} MB, glibc's default {plain} MB"
    assert tuned < 150
