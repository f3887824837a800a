"""Durable feedback (documents with their correct label names) in SQLite or PostgreSQL.

One table, one row per document: an autoincrement `seq` orders the export, and a nullable unique
`client_id` makes a retried write idempotent (the first write of an id wins; a repeat is counted as a
duplicate, never stored twice, within one transaction too). SQLite runs in WAL mode so `xtag feedback
export` can read while the service writes; PostgreSQL (XTAG_FEEDBACK_DB=postgresql://...) lets replicas
share one store. Nothing here knows about HTTP: the service calls `add` off the event loop, the CLI
calls `rows`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from xtag.models.errors import XtagError

DEFAULT_SQLITE = "xtag-feedback.sqlite3"  # relative to the working directory, beside the service's .env
POSTGRES_SCHEMES = ("postgres://", "postgresql://")


@dataclass(frozen=True)
class Feedback:
    text: str
    labels: list[str]
    client_id: str | None = None
    source: str = "xtag"  # which endpoint took it: "xtag" (/v1/feedback) or "annif" (/learn)


@dataclass(frozen=True)
class Written:
    stored: int
    duplicates: int


class FeedbackStore:
    """A connection made on first use and kept (re-made after an error); one caller thread at a time."""

    def __init__(self, target: str, timeout_s: float = 5.0):
        self.target = target
        self.timeout_s = timeout_s
        self.postgres = target.startswith(POSTGRES_SCHEMES)
        self._conn = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """The store named without credentials, for logs and answers."""
        if self.postgres:
            return "PostgreSQL (XTAG_FEEDBACK_DB)"
        return f"SQLite {Path(self.target).name}"

    def driver_errors(self) -> tuple[type[Exception], ...]:
        """The database driver's error classes (for callers that report them as a user's problem)."""
        if self.postgres:
            try:
                import psycopg
            except ImportError:
                return ()
            return (psycopg.Error,)
        return (sqlite3.Error,)

    def _connect(self):
        if self.postgres:
            try:
                import psycopg
            except ImportError as exc:
                raise XtagError("XTAG_FEEDBACK_DB is a PostgreSQL URL: pip install 'xtag[postgres]'") from exc
            ms = int(self.timeout_s * 1000)
            conn = psycopg.connect(
                self.target, connect_timeout=max(1, int(self.timeout_s)), options=f"-c statement_timeout={ms}"
            )
            with conn.transaction():
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS feedback (seq BIGSERIAL PRIMARY KEY, client_id TEXT UNIQUE, "
                    "received REAL NOT NULL, source TEXT NOT NULL, text TEXT NOT NULL, labels TEXT NOT NULL)"
                )
            return conn
        path = Path(self.target)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=self.timeout_s, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # durable once the write answered
        conn.execute(
            "CREATE TABLE IF NOT EXISTS feedback (seq INTEGER PRIMARY KEY AUTOINCREMENT, client_id TEXT UNIQUE, "
            "received REAL NOT NULL, source TEXT NOT NULL, text TEXT NOT NULL, labels TEXT NOT NULL)"
        )
        return conn

    def _connection(self):
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection may fail to close too; it is dropped either way
                pass

    def add(self, groups: list[list[Feedback]]) -> list[Written]:
        """Write every group's items in one transaction (all or none) and count each group's own: an id already
        stored, by an earlier transaction or earlier in this one (another group's included), is a duplicate.

        A group is one request's documents: the service commits the requests that queued together in one
        transaction (group commit, routes/feedback.py), one sync to disk for all of them."""
        mark = "%s" if self.postgres else "?"
        sql = (
            f"INSERT INTO feedback (client_id, received, source, text, labels) VALUES ({mark}, {mark}, {mark}, "
            f"{mark}, {mark}) ON CONFLICT (client_id) DO NOTHING"
        )
        now = time.time()
        rows = [
            [(f.client_id, now, f.source, f.text, json.dumps(f.labels, ensure_ascii=False)) for f in items]
            for items in groups
        ]
        with self._lock:
            try:
                conn = self._connection()
                if self.postgres:
                    with conn.transaction():
                        stored = [sum(conn.execute(sql, row).rowcount for row in group) for group in rows]
                else:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        stored = [sum(conn.execute(sql, row).rowcount for row in group) for group in rows]
                        conn.execute("COMMIT")
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
            except Exception:
                self._drop()
                raise
        return [Written(n, len(group) - n) for n, group in zip(stored, rows)]

    def rows(self) -> Iterator[dict]:
        """Every stored document in arrival order, as a corpus row (id, text, labels)."""
        with self._lock:
            conn = self._connection()
            cur = conn.execute("SELECT seq, client_id, text, labels FROM feedback ORDER BY seq")
            fetched = cur.fetchall()
        for seq, client_id, text, labels in fetched:
            yield {
                "id": client_id if client_id is not None else f"feedback-{seq}",
                "text": text,
                "labels": json.loads(labels),
            }

    def labels_by_id(self, ids: list[str], chunk: int = 500) -> dict[str, list[str]]:
        """The stored label names of the documents with these client ids (shadow scoring's live P@k)."""
        mark = "%s" if self.postgres else "?"
        found: dict[str, list[str]] = {}
        with self._lock:
            conn = self._connection()
            for at in range(0, len(ids), chunk):
                part = ids[at : at + chunk]
                sql = f"SELECT client_id, labels FROM feedback WHERE client_id IN ({', '.join([mark] * len(part))})"
                found.update((i, json.loads(labels)) for i, labels in conn.execute(sql, part).fetchall())
        return found

    def close(self) -> None:
        with self._lock:
            self._drop()


def export_jsonl(store: FeedbackStore, out: Path) -> int:
    """The store as a corpus file (one JSON row a line, `xtag train`/`xtag update` read it); returns the rows.

    Written to a temporary file and renamed, so a failed export never leaves half a corpus under `out`."""
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    n = 0
    with tmp.open("w", encoding="utf-8") as f:
        for row in store.rows():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(out)
    return n
