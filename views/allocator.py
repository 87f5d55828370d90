"""glibc's allocator, set for a process that serves many sessions from many threads.

Every Streamlit session reruns its script on a thread of its own, and glibc gives threads arenas of their own
(up to 8 per core): thirty viewers left ~90 MB of freed memory spread over arenas that are never handed back
(`python -m bench viewers`: RSS at 30 sessions 643 → 551 MB with two arenas). Two arenas, as
``MALLOC_ARENA_MAX=2`` would set them, but from inside the process, so every way of starting the dashboard
gets it; and ``malloc_trim`` once in a while hands free pages back. Elsewhere than glibc, both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2
TRIM_EVERY_S = 30.0


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def available() -> bool:
    """Whether this process runs on glibc's allocator (the only one these settings speak to)."""
    return _libc() is not None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas from now on (threads started later share them); False off glibc."""
    libc = _libc()
    return libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1


def trim() -> bool:
    """Hand free heap pages back to the system; True when some were."""
    libc = _libc()
    return libc is not None and libc.malloc_trim(0) == 1


def trim_periodically(stop: threading.Event, every_s: float = TRIM_EVERY_S) -> threading.Thread | None:
    """A daemon thread trimming every ``every_s`` until ``stop`` is set (None off glibc)."""
    if _libc() is None:
        return None

    def run() -> None:
        while not stop.wait(every_s):
            trim()

    thread = threading.Thread(target=run, name="specwatch-malloc-trim", daemon=True)
    thread.start()
    return thread
