"""Is the store file torn, and moving a torn one aside (never deleting it).

A power loss or a full disk mid-checkpoint can leave the SQLite file or its WAL damaged: SQLite then answers
"database disk image is malformed" (SQLITE_CORRUPT) or "file is not a database" (SQLITE_NOTADB) on open or on
some later read or write. ``check_store`` runs ``PRAGMA quick_check`` within a time budget (a large store is
not held up at start: an unfinished check counts as fine); ``quarantine`` renames the file and its ``-wal`` /
``-shm`` to ``<name>.corrupt-<UTC time>`` (the sidecars keep their suffixes, so ``sqlite3`` opens the moved
file with its own WAL), after which a new store is created at the path.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

from collectors.errors import StoreError
from collectors.store.connections import mark_moved

log = logging.getLogger(__name__)

# quick_check read a 173 MB store in 0.26 s from the page cache on the shared 2 cores (≈ 650 MB/s; a cold disk
# is slower): 15 s covers several GB. Past it the store is used unchecked.
STORE_CHECK_TIMEOUT_S = 15.0
SIDECARS = ("-wal", "-shm")
_PROGRESS_STEPS = 1_000  # SQLite VM steps between deadline checks (a few microseconds)
_PROBLEM_LINES = 3  # quick_check lines quoted in the problem (it can list thousands)


def is_corruption(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is SQLite saying the file is damaged."""
    while exc is not None:
        if isinstance(exc, sqlite3.DatabaseError):
            name = str(getattr(exc, "sqlite_errorname", ""))
            if name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB":
                return True
            text = str(exc)
            if "malformed" in text or "not a database" in text:
                return True
        exc = exc.__cause__
    return False


def _in_memory(path: str) -> bool:
    return path == ":memory:" or path.startswith("file:")


def read_only_uri(path: str, *, immutable: bool = False) -> str:
    """A URI opening ``path`` without ever writing it (``immutable``: its WAL ignored, nothing locked)."""
    return f"file:{quote(str(Path(path).absolute()))}?{'immutable=1' if immutable else 'mode=ro'}"


def check_store(
    path: str, *, timeout_s: float = STORE_CHECK_TIMEOUT_S, unfinished: str | None = None
) -> str | None:
    """What is wrong with the store at ``path`` in words, or None (sound, or not there yet). A check that
    does not finish within ``timeout_s`` returns ``unfinished`` (None: counts as sound). Only damage counts:
    a locked or unreadable file is for the store's own open to report."""
    if _in_memory(path):
        return None
    db, wal = Path(path), Path(f"{path}-wal")
    if not db.exists():
        # A new store at the path would replay this WAL into itself (it has the same name): move it first.
        if wal.exists() and wal.stat().st_size > 0:
            return f"{wal} is there without its database (a WAL left behind)"
        return None
    if timeout_s <= 0:
        return _unchecked(
            path, timeout_s, unfinished
        )  # no budget at all (a test's stand-in for a huge store)
    try:
        connection = sqlite3.connect(read_only_uri(path), uri=True, timeout=min(timeout_s, 5.0))
    except sqlite3.Error:
        return None
    # interrupt() from a timer: SQLite's b-tree walk (most of quick_check) is one VM step, so a progress
    # handler would only be asked after it; the handler still catches a budget spent before the walk began.
    deadline = time.monotonic() + timeout_s
    timer = threading.Timer(timeout_s, connection.interrupt)
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
    try:
        timer.start()
        rows = connection.execute(f"PRAGMA quick_check({_PROBLEM_LINES})").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            return str(exc)
        return _unchecked(path, timeout_s, unfinished) if "interrupted" in str(exc) else None
    finally:
        timer.cancel()
        if timer.is_alive():
            timer.join()  # never interrupt() a closed connection
        connection.close()
    found = [" ".join(str(row[0]).split()) for row in rows]  # its lines hold newlines: one log line
    if found != ["ok"]:
        return "quick_check: " + "; ".join(found)
    return _foreign_wal(path)


def _unchecked(path: str, timeout_s: float, unfinished: str | None) -> str | None:
    if unfinished is None:
        log.warning(
            "history store %s: quick_check did not finish within %g s; using the store unchecked",
            path,
            timeout_s,
        )
    return unfinished


def _foreign_wal(path: str) -> str | None:
    """SQLite replays any WAL beside the file as its own: one from another database (a restore that mixed
    two hosts' files) reads as that database, and passes quick_check. The store id stamped in the header
    (``stamp_store_id``) tells them apart: the file's own header (as last checkpointed) against the header
    SQLite reads through the WAL."""
    # Both reads go through SQLite: an immutable connection reads the file's own header, ignoring the WAL.
    # Never a plain open() of the database file: closing any descriptor of it drops every POSIX lock this
    # process holds on it (SQLite's connections' too), and another process closing its last connection then
    # checkpoints and deletes the WAL and the shared memory from under them — disk I/O errors, then a
    # malformed file (seen: the dashboard's history filler beside this check). SQLite's own connections
    # keep such a descriptor open until the locks are gone.
    try:
        on_disk = _user_version(read_only_uri(path, immutable=True))
        seen = _user_version(read_only_uri(path))
    except sqlite3.Error:
        return None
    if on_disk == 0 or seen == on_disk:
        return None  # not stamped yet (or stamped only in its WAL so far), or the WAL is its own
    return (
        f"its WAL {path}-wal belongs to another database (store id {seen} in the WAL, {on_disk} in the file)"
    )


def _user_version(uri: str) -> int:
    connection = sqlite3.connect(uri, uri=True, timeout=1.0)
    try:
        return int(connection.execute("PRAGMA user_version").fetchone()[0])
    finally:
        connection.close()


def stamp_store_id(path: str) -> None:
    """Give the store a random id in its header (``PRAGMA user_version``, unused otherwise) unless it has
    one: what ``check_store`` compares to find a WAL from another database. Creates the file if missing."""
    if _in_memory(path):
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        connection = sqlite3.connect(path, timeout=5.0)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            if int(connection.execute("PRAGMA user_version").fetchone()[0]) == 0:
                connection.execute(f"PRAGMA user_version = {secrets.randbelow(2**31 - 1) + 1}")
                connection.commit()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open history store {path}: {exc}") from exc


def store_folder_problem(path: str) -> str | None:
    """Why a store cannot be created, written or moved aside in ``path``'s folder (read-only), or None."""
    if _in_memory(path):
        return None
    folder = Path(path).absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the store opens with mkdir -p: the nearest existing folder decides
    try:
        read_only_fs = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError as exc:
        return f"the store's folder {folder} cannot be checked: {exc.strerror or exc}"
    if not read_only_fs and os.access(folder, os.W_OK | os.X_OK):
        return None
    why = "its file system is mounted read-only" if read_only_fs else "no write permission"
    return (
        f"the store's folder {folder} is read-only ({why}): the history store {path} cannot be created, "
        "written or moved aside there; make the folder writable or point store.path at a writable folder"
    )


def quarantine(path: str, now: float) -> str:
    """Rename the store and its ``-wal``/``-shm`` to ``<path>.corrupt-<UTC time>`` (a counter added if that
    name is taken); returns the new name. Raises ``StoreError`` if the folder refuses the rename.

    The sidecars go first: a new store created at ``path`` must never find the old WAL beside it (SQLite
    would replay it into the new file). Connections this process still holds to the old file reopen at the
    path on their next use (``connections.mark_moved``).
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    moved, n = f"{path}.corrupt-{stamp}", 1
    while any(os.path.lexists(moved + suffix) for suffix in ("", *SIDECARS)):
        moved, n = f"{path}.corrupt-{stamp}-{n}", n + 1
    try:
        stat = os.stat(path) if os.path.exists(path) else None
        for suffix in (*SIDECARS, ""):
            if os.path.lexists(path + suffix):
                os.rename(path + suffix, moved + suffix)
        _sync_folder(Path(path).absolute().parent)
    except OSError as exc:
        raise StoreError(
            f"history store {path} is corrupt and cannot be moved aside to {moved}: {exc.strerror or exc}"
        ) from exc
    if stat is not None:  # after the rename: a connection closed before it could checkpoint into the file
        mark_moved(stat.st_dev, stat.st_ino)
    return moved


def _sync_folder(folder: Path) -> None:
    """Make the renames durable: a power loss right after must not bring the torn file back at the path."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
