"""`xtag serve --workers N`: a worker that dies while a health-check ping is on its way is seen dead at once,
not after the ping's whole timeout (XTAG_WORKER_START_TIMEOUT_S, 300 s): a bad bundle under several workers
exits in seconds (service/supervisor.py)."""

from __future__ import annotations

import os
import time

import uvicorn
from uvicorn.supervisors.multiprocess import Process
from xtag.service.supervisor import close_worker_ends


class DiesOnPing(Process):
    """A worker that takes the supervisor's ping and exits without answering (as a worker whose bundle failed
    to load leaves with os._exit while a ping is under way)."""

    def target(self, sockets=None) -> None:  # runs in the spawned worker
        self.child_conn.recv()
        os._exit(3)


def test_a_worker_that_dies_during_a_ping_is_seen_dead_at_once():
    worker = DiesOnPing(uvicorn.Config("nowhere:app"), [])
    worker.start()
    try:
        close_worker_ends([worker])
        start = time.monotonic()
        assert worker.is_alive(timeout=30) is False
        assert time.monotonic() - start < 10  # not the ping's 30 s
    finally:
        worker.kill()
        worker.join()
    assert worker.exitcode == 3
