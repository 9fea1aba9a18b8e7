"""A judge's usable replies in SQLite, so that the same question asked again costs no call:
what RACE's scoring and derivation (:mod:`websailor.eval.race`) and FACT's verdicts
(:mod:`websailor.eval.fact_judge`) keep between runs."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from websailor.log import get_logger

logger = get_logger(__name__)


class ReplyCache:
    """Replies by key (:meth:`key`: the SHA-256 of the judge model's name and the prompt, or any
    key the caller derives) in the SQLite table ``table``. A file that cannot be opened, read or
    written is warned about (naming ``what``) and the caller goes on without it; safe to share
    between threads."""

    def __init__(self, path: str | Path, table: str = "race_replies", what: str = "RACE reply") -> None:
        if not table.isidentifier():
            raise ValueError(f"not a table name: {table!r}")
        self.path = Path(path)
        self.table, self.what = table, what
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, reply TEXT NOT NULL)")
            self._db.commit()
        except (OSError, sqlite3.Error) as e:
            logger.warning("the %s cache %s cannot be used (%s); going on without it", what, self.path, e)
            self._db = None

    @staticmethod
    def key(model: str, prompt: str) -> str:
        return hashlib.sha256(json.dumps([model, prompt], ensure_ascii=False).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        if self._db is None:
            return None
        try:
            with self._lock:
                row = self._db.execute(f"SELECT reply FROM {self.table} WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None
        except sqlite3.Error as e:
            logger.warning("%s cache read failed (%s); asking the judge", self.what, e)
            return None

    def put(self, key: str, reply: str) -> None:
        if self._db is None:
            return
        try:
            with self._lock:
                self._db.execute(f"INSERT OR REPLACE INTO {self.table} VALUES (?, ?)", (key, reply))
                self._db.commit()
        except sqlite3.Error as e:  # the reply itself is still used
            logger.warning("%s cache write failed (%s)", self.what, e)

    def close(self) -> None:
        if self._db is not None:
            with self._lock:
                self._db.close()
                self._db = None
