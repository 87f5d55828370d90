"""One evaluator per store: an exclusive ``flock`` on ``<store.path>.evaluator.lock``.

Two daemons on one store would both scrape, both evaluate and both notify: every sample, transition and page
twice. The lock is held for the life of the process and freed by the kernel however it ends (SIGKILL too), so
there is no stale lock to clean up.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from collectors.errors import CollectorError


class EvaluatorLockedError(CollectorError):
    """Another process holds the evaluator role for this store."""


# Lock files this process holds, with how many EvaluatorLocks share each: the dashboard starts a new runtime
# (an edited config) before it stops the old one, and both are this process — one evaluator, not two.
_HELD: dict[str, tuple[int, int]] = {}  # realpath -> (fd, holders)
_HELD_GUARD = threading.Lock()


class EvaluatorLock:
    """``acquire()`` takes the role or raises ``EvaluatorLockedError`` naming the holder; ``release()``.

    The role belongs to a process: a second lock on the same store in the same process shares it.
    """

    def __init__(self, store_path: str) -> None:
        self.path = f"{store_path}.evaluator.lock"
        self._key = os.path.realpath(self.path)
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the role if it is free; False (nothing changed) if another process holds it."""
        with _HELD_GUARD:
            if self._fd is not None:
                return True
            held = _HELD.get(self._key)
            if held is not None:
                self._fd = held[0]
                _HELD[self._key] = (held[0], held[1] + 1)
                return True
            if not self._lock_file():
                return False
            assert self._fd is not None
            _HELD[self._key] = (self._fd, 1)
            return True

    def _lock_file(self) -> bool:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def acquire(self) -> None:
        try:
            taken = self.try_acquire()
        except OSError as exc:
            raise CollectorError(
                f"cannot create the evaluator lock {self.path}: {exc.strerror or exc}"
            ) from exc
        if not taken:
            raise EvaluatorLockedError(
                f"another specwatch evaluator ({self.holder()}) already runs on this store; this one does "
                "not start, so nothing is scraped, evaluated or notified twice. Stop the other one, give "
                "this config its own store.path, or start this one with --standby to take over when the "
                "other stops"
            )

    def holder(self) -> str:
        try:
            pid = Path(self.path).read_text().strip()
        except OSError:
            pid = ""
        return f"pid {pid}, lock {self.path}" if pid.isdigit() else f"lock {self.path}"

    def release(self) -> None:
        with _HELD_GUARD:
            if self._fd is None:
                return
            fd, holders = _HELD.pop(self._key, (self._fd, 1))
            self._fd = None
            if holders > 1:
                _HELD[self._key] = (fd, holders - 1)
                return
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
