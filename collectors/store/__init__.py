"""History storage: snapshots, events and recipes in SQLite (WAL; another process may read)."""
