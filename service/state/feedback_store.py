"""Durable feedback (documents with their correct label names) in SQLite or PostgreSQL.

One table, one row per document: an autoincrement `seq` orders the export, and a nullable client id, unique
with its type (`id_type`: "string" or "integer", since "123" and 123 are two ids), makes a retried write
idempotent (the first write of an id wins; a repeat is counted as a duplicate, never stored twice, within one
transaction too). A store written before ids had a type is migrated when first opened: its ids that cannot be
an integer's text become "string", the others stay untyped (NULL: either might have sent them), and an
untyped id counts as a duplicate of both of its kinds, as it did when it was written. SQLite runs in WAL mode so `xtag feedback
export` can read while the service writes; PostgreSQL (XTAG_FEEDBACK_DB=postgresql://...) lets replicas
share one store. Nothing here knows about HTTP: the service calls `add` off the event loop, the CLI
calls `rows`.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from xtag.models.errors import XtagError

DEFAULT_SQLITE = "xtag-feedback.sqlite3"  # relative to the working directory, beside the service's .env
POSTGRES_SCHEMES = ("postgres://", "postgresql://")
COLUMNS = "client_id TEXT, id_type TEXT, received REAL NOT NULL, source TEXT NOT NULL, text TEXT NOT NULL, labels TEXT NOT NULL, UNIQUE (client_id, id_type)"
INTEGER_TEXT = r"^-?(0|[1-9][0-9]*)$"  # what str() gives for an integer id (PostgreSQL's regex, Python's too)
UNTYPED = "client_id IS NOT NULL AND id_type IS NULL"  # ids stored before they had a type


@dataclass(frozen=True)
class Feedback:
    text: str
    labels: list[str]
    client_id: str | None = None
    source: str = "xtag"  # which endpoint took it: "xtag" (/v1/feedback) or "annif" (/learn)
    integer_id: bool = False  # the client id was sent as a JSON integer (123), not as a string ("123")

    @property
    def id_type(self) -> str | None:
        return None if self.client_id is None else "integer" if self.integer_id else "string"


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
        self._untyped = False  # the store holds ids written before they had a type
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
                conn.execute(f"CREATE TABLE IF NOT EXISTS feedback (seq BIGSERIAL PRIMARY KEY, {COLUMNS})")
                if not _typed_postgres(conn):
                    conn.execute("LOCK TABLE feedback IN SHARE ROW EXCLUSIVE MODE")  # one replica migrates it
                    if not _typed_postgres(conn):
                        _migrate_postgres(conn)
                self._untyped = conn.execute(f"SELECT 1 FROM feedback WHERE {UNTYPED} LIMIT 1").fetchone() is not None
            return conn
        path = Path(self.target)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=self.timeout_s, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # durable once the write answered
        conn.execute(f"CREATE TABLE IF NOT EXISTS feedback (seq INTEGER PRIMARY KEY AUTOINCREMENT, {COLUMNS})")
        if "id_type" not in [row[1] for row in conn.execute("PRAGMA table_info(feedback)")]:
            _migrate_sqlite(conn)
        self._untyped = conn.execute(f"SELECT 1 FROM feedback WHERE {UNTYPED} LIMIT 1").fetchone() is not None
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
            f"INSERT INTO feedback (client_id, id_type, received, source, text, labels) VALUES ({mark}, {mark}, "
            f"{mark}, {mark}, {mark}, {mark}) ON CONFLICT (client_id, id_type) DO NOTHING"
        )
        untyped = f"SELECT 1 FROM feedback WHERE client_id = {mark} AND id_type IS NULL"
        now = time.time()
        rows = [
            [(f.client_id, f.id_type, now, f.source, f.text, json.dumps(f.labels, ensure_ascii=False)) for f in items]
            for items in groups
        ]

        def insert(conn, row) -> int:
            if self._untyped and row[0] is not None and conn.execute(untyped, row[:1]).fetchone() is not None:
                return 0  # written before ids had a type: a duplicate of either kind
            return conn.execute(sql, row).rowcount

        with self._lock:
            try:
                conn = self._connection()
                if self.postgres:
                    with conn.transaction():
                        stored = [sum(insert(conn, row) for row in group) for group in rows]
                else:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        stored = [sum(insert(conn, row) for row in group) for group in rows]
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
        """The stored label names of the documents with these client ids (shadow scoring's live P@k), by the id's
        text, as a batch echoes it: where "123" and 123 are both stored, one of them answers."""
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


def _typed_postgres(conn) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'feedback' AND column_name = 'id_type'"
        ).fetchone()
        is not None
    )


def _migrate_postgres(conn) -> None:
    """A table from before ids had a type given id_type, and its unique key (client_id) made (client_id, id_type)."""
    conn.execute("ALTER TABLE feedback ADD COLUMN id_type TEXT")
    conn.execute("ALTER TABLE feedback DROP CONSTRAINT IF EXISTS feedback_client_id_key")
    conn.execute(f"UPDATE feedback SET id_type = 'string' WHERE {UNTYPED} AND client_id !~ %s", [INTEGER_TEXT])
    conn.execute("ALTER TABLE feedback ADD CONSTRAINT feedback_client_id_id_type_key UNIQUE (client_id, id_type)")


def _migrate_sqlite(conn: sqlite3.Connection) -> None:
    """A table from before ids had a type (client_id UNIQUE alone) rebuilt with id_type, in one transaction: SQLite
    cannot drop a column's UNIQUE in place. Rows keep their seq, so the export's order is unchanged."""
    conn.create_function("xtag_integer_text", 1, lambda text: re.fullmatch(INTEGER_TEXT, text) is not None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if "id_type" not in [row[1] for row in conn.execute("PRAGMA table_info(feedback)")]:  # another process did
            conn.execute("ALTER TABLE feedback RENAME TO feedback_untyped")
            conn.execute(f"CREATE TABLE feedback (seq INTEGER PRIMARY KEY AUTOINCREMENT, {COLUMNS})")
            conn.execute(
                "INSERT INTO feedback (seq, client_id, id_type, received, source, text, labels) SELECT seq, client_id, "
                "CASE WHEN client_id IS NULL OR xtag_integer_text(client_id) THEN NULL ELSE 'string' END, received, "
                "source, text, labels FROM feedback_untyped ORDER BY seq"
            )
            conn.execute("DROP TABLE feedback_untyped")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


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
