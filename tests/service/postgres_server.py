"""A throwaway PostgreSQL server on 127.0.0.1, for the feedback tests and bench/feedback_writes.py.

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
        return f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def stop(self) -> None:
        if self.folder is None:
            return
        data = self.folder / "data"
        if (data / "postmaster.pid").exists():
            subprocess.run([*self.as_user, self.pg_ctl, "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
