"""A throwaway PostgreSQL server on 127.0.0.1, for the feedback tests (fixtures below) and bench/feedback_writes.py.

Debian's postgresql package puts initdb and pg_ctl only under /usr/lib/postgresql/<version>/bin, and
initdb refuses to run as root: as root the cluster is made and run as `nobody` (runuser), in a
temporary folder that is removed on stop. Trust authentication, listening on loopback only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


class PostgresUnavailable(Exception):
    """Why no server could be started (the tests skip with it, the bench reports it)."""


def pg_tool(name: str) -> str | None:
    """On PATH, else in Debian's versioned folder (its postgresql package puts initdb only there)."""
    versioned = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return shutil.which(name) or (str(versioned[-1]) if versioned else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """`start()` makes a cluster and starts it, returning its URL; `stop()` stops it and removes its folder."""

    def __init__(self, port: int | None = None):
        self.port = port
        self.url: str | None = None
        self.databases = 0
        self.folder: Path | None = None
        self.as_user: list[str] = []
        self.pg_ctl: str | None = None

    def start(self) -> str:
        initdb, self.pg_ctl = pg_tool("initdb"), pg_tool("pg_ctl")
        if initdb is None or self.pg_ctl is None:
            raise PostgresUnavailable(
                "PostgreSQL's initdb/pg_ctl are not installed (Debian: apt-get install postgresql)"
            )
        self.folder = Path(tempfile.mkdtemp(prefix="xtag-pg-"))
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root without runuser: initdb refuses root")
            self.as_user = ["runuser", "-u", "nobody", "--"]
            shutil.chown(self.folder, "nobody")
        port = self.port or _free_port()
        data = self.folder / "data"
        try:
            subprocess.run(
                [*self.as_user, initdb, "-D", str(data), "-U", "postgres", "--auth=trust"],
                check=True,
                capture_output=True,
            )
            opts = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={self.folder}"
            subprocess.run(
                [
                    *self.as_user,
                    self.pg_ctl,
                    "-D",
                    str(data),
                    "-o",
                    opts,
                    "-l",
                    str(self.folder / "log"),
                    "-w",
                    "start",
                ],
                check=True,
                capture_output=True,
            )
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise PostgresUnavailable(
                f"could not start PostgreSQL: {exc.stderr.decode(errors='replace')[-300:]}"
            ) from exc
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        return self.url

    def new_database(self) -> str:
        """A fresh, empty database on the started server, as a URL (each test its own)."""
        import psycopg

        self.databases += 1
        name = f"xtag{self.databases}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        if self.folder is None:
            return
        data = self.folder / "data"
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [*self.as_user, self.pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True
            )
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None


@pytest.fixture(scope="module")
def postgres_server():
    """A throwaway PostgreSQL server on a free port, for a test module (as `nobody` under root)."""
    pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """An empty database of its own for each test."""
    return postgres_server.new_database()
