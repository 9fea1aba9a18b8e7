"""A tool-result cache in SQLite, keyed by normalized arguments, with a TTL.

One file can be shared by many processes (rollout workers, a tool server): SQLite's WAL
journal lets readers and one writer work at once, and a busy timeout makes writers wait for
each other instead of failing.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError


def cache_key(tool: str, arguments: Any) -> str:
    """SHA-256 of the tool name and its (already normalized) arguments as canonical JSON."""
    blob = json.dumps([tool, arguments], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResultCache:
    """Successful provider results by key, valid for ``ttl_s`` seconds.

    Args:
        path: the SQLite file (created with its folder).
        ttl_s: seconds a result stays valid; expired rows are ignored and overwritten.

    Raises:
        ConfigError: the file cannot be opened or is not a cache of this layout.
    """

    def __init__(self, path: str | Path, ttl_s: float = 7 * 86400) -> None:
        self.path = Path(path)
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, tool TEXT NOT NULL, "
                "value TEXT NOT NULL, created REAL NOT NULL)"
            )
            columns = [row[1] for row in self._db.execute("PRAGMA table_info(results)")]
        except (sqlite3.Error, OSError) as e:
            raise ConfigError(f"tool cache {self.path}: cannot be opened as a SQLite cache ({e})") from None
        if columns != ["key", "tool", "value", "created"]:
            self._db.close()
            raise ConfigError(
                f"tool cache {self.path}: its 'results' table has columns {columns}, not a websailor "
                "tool cache; give another cache_path (WEBSAILOR_WEB_CACHE)"
            )

    def get(self, key: str, ttl_s: float | None = None) -> Any | None:
        """The cached value, or ``None`` when absent or older than ``ttl_s`` (default: the
        cache's TTL; a tool's policy passes its own)."""
        with self._lock:
            row = self._db.execute("SELECT value, created FROM results WHERE key = ?", (key,)).fetchone()
        if row is None or time.time() - row[1] > (self.ttl_s if ttl_s is None else ttl_s):
            return None
        return json.loads(row[0])

    def put(self, key: str, tool: str, value: Any) -> None:
        """Store a JSON-serializable ``value`` (replacing an older one)."""
        blob = json.dumps(value, ensure_ascii=False)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO results (key, tool, value, created) VALUES (?, ?, ?, ?)",
                (key, tool, blob, time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
