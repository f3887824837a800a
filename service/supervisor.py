"""uvicorn's multi-worker supervisor, with its health-check pipes closed on the supervisor's side.

uvicorn pings each worker over a pipe whose worker end the supervisor also keeps open. A worker that dies
after a ping reached it but before it answered (a worker leaving at once because its bundle failed to load,
service/app.py) then never closes that pipe, and the ping waits the whole `timeout_worker_healthcheck`,
which `xtag serve` sets to the SIGHUP restart's load budget (XTAG_WORKER_START_TIMEOUT_S, 300 s): seen as a
corrupt bundle under `--workers 2` that exited after 5 minutes instead of 2 seconds, once in about eight
starts on a loaded machine. Once a worker is spawned, its end is its own (a spawned child receives its
descriptors when it starts), so the supervisor closes its copy: a dead worker's pipe then reads as closed
and the ping returns at once.
"""

from __future__ import annotations

from uvicorn.supervisors import Multiprocess


def close_worker_ends(processes) -> None:
    """Close the supervisor's copy of each started worker's end of its health-check pipe."""
    for process in processes:
        if process.process.pid is not None and not process.child_conn.closed:
            process.child_conn.close()


class Supervisor(Multiprocess):
    def keep_subprocess_alive(self) -> None:
        close_worker_ends(self.processes)  # before uvicorn pings them
        super().keep_subprocess_alive()
