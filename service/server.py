"""serve(): run the app under uvicorn (httptools + uvloop when installed); SIGHUP reloads, SIGTERM drains.

SIGTERM (or SIGINT) closes the listening socket and idle connections, lets requests in flight finish
for up to XTAG_GRACEFUL_SHUTDOWN_S (then cancels them), and exits 0; with several workers the
supervisor passes the signal on and each worker drains the same way.

One worker: the app object runs in this process and reloads itself on SIGHUP (load beside, swap
atomically). Several workers: uvicorn's supervisor runs `app_from_env` in each (settings passed as
one JSON variable, config/settings.py's hand_to_workers), each loading before it accepts connections; SIGHUP to this process rolls the
workers one by one, and a worker whose bundle fails to load is discarded while the old ones keep
serving. /metrics then aggregates all workers (PROMETHEUS_MULTIPROC_DIR).

A bundle that cannot load at startup ends the process with the reason (XtagError, which the CLI turns
into a non-zero exit): one worker stops its server when the background load fails; several workers load
before they start, and uvicorn's supervisor stops when one of them fails to. A failed *reload* later on
keeps the old model.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import threading
from pathlib import Path

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from xtag.config.settings import Settings, hand_to_workers
from xtag.models.bundle.snapshot import remove_tree
from xtag.models.errors import XtagError
from xtag.service.observability.logs import log_config
from xtag.service.supervisor import Supervisor

GUARD = "xtag.service.http.protocol"
log = logging.getLogger("xtag.service")


def _fastest(module: str, fallback: str, name: str) -> str:
    return name if importlib.util.find_spec(module) else fallback


def uvicorn_options(settings: Settings) -> dict:
    options = {
        "host": settings.server.host,
        "port": settings.server.port,
        "log_level": settings.server.log_level,
        "log_config": log_config(settings.server.log_format, settings.server.log_level),
        "access_log": False,  # XTAG_ACCESS_LOG is the app's own (service/observability/prometheus.py)
        # uvicorn's protocols with a deadline and a size bound on request heads (service/http/protocol.py)
        "http": _fastest("httptools", f"{GUARD}:H11Guard", f"{GUARD}:HttpToolsGuard"),
        "h11_max_incomplete_event_size": settings.limits.max_header_bytes,  # h11's default (16 KiB) would cut first
        "loop": _fastest("uvloop", "asyncio", "uvloop"),
        "timeout_keep_alive": 30,
        "server_header": False,
        "proxy_headers": False,
        # SIGTERM: stop accepting, let in-flight requests finish (at most this long), then exit 0
        "timeout_graceful_shutdown": settings.server.graceful_shutdown_s,
    }
    # how long a restarted worker may take to load its bundle before the old one is kept (uvicorn >= 0.51)
    options["timeout_worker_healthcheck"] = settings.server.worker_start_timeout_s
    return options


def _exit_zero(signum: int, frame) -> None:
    raise SystemExit(0)


def _exit_zero_on_sigterm() -> None:
    """uvicorn drains on SIGTERM and then raises the signal again under the handler it found: by default
    the process then dies of SIGTERM (status 143), which orchestrators report as an error after a clean
    shutdown. With this handler in place it exits 0 instead (also before uvicorn has started: nothing to drain)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_zero)


def serve(
    bundle: str | Path | None = None,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    **overrides,
) -> None:
    """Serve `bundle` (or XTAG_BUNDLE) and the other models configured (config/model_set.py); explicit arguments
    win over XTAG_* variables and .env."""
    given = {"bundle": bundle, "host": host, "port": port, "workers": workers, **overrides}
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    if not settings.model_set.models:
        raise XtagError("no bundle to serve: give BUNDLE, or set XTAG_BUNDLE, XTAG_MODELS or XTAG_MODELS_FILE")
    if (why := settings.model_set.unservable()) is not None:
        raise XtagError(why)
    try:
        _serve(settings)
    finally:  # the private copies of its bundles (models/bundle/snapshot.py): its workers share them until here
        remove_tree(settings.models.snapshot_dir / str(os.getpid()))


def _serve(settings: Settings) -> None:
    if settings.server.workers == 1:
        _serve_one(settings)
        return
    # Workers must hold their model before they count as started, so that a rolling restart on SIGHUP
    # keeps the old workers when the new bundle does not load.
    server = settings.server.model_copy(update={"load_in_background": False})
    admin = settings.admin.model_copy(update={"sighup_reload": True})
    settings = settings.model_copy(update={"server": server, "admin": admin})
    own_dir = hand_to_workers(settings, supervisor_pid=os.getpid())
    _exit_zero_on_sigterm()
    try:
        _serve_workers(settings)
    finally:
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)


def urls(settings: Settings) -> str:
    """Where to open the dashboard and the API docs: an address that listens everywhere is shown as this
    machine's loopback one, which a browser here can open."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(settings.server.host, settings.server.host)
    base = f"http://{f'[{host}]' if ':' in host else host}:{settings.server.port}"
    return f"dashboard {base}/   API docs {base}/docs"


def _serve_one(settings: Settings) -> None:
    """One process: the app loads in the background (/health answers at once) and stops the server if that fails."""
    from xtag.service.app import create_app

    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, **uvicorn_options(settings)))
    failed: list[str] = []

    def stop(reason: str) -> None:
        failed.append(reason)
        server.should_exit = True

    app.state.on_startup_failure.append(stop)
    app.state.on_ready.append(lambda: log.info("ready: %s", urls(settings), extra={"event": "ready"}))
    _exit_zero_on_sigterm()
    try:
        server.run()
    except SystemExit as exc:  # uvicorn's exit when the lifespan failed (load_in_background=False) or bind failed
        if exc.code != STARTUP_FAILURE:
            raise
        slot = app.state.registry.default_slot
        why = slot and (slot.local_error or slot.last_error)  # the path as given (service/state/model_slot.py)
        failed.append(why or "the server did not start (see the log above)")
    if failed:
        raise XtagError(f"not serving: {failed[0]}")


def _serve_workers(settings: Settings) -> None:
    """uvicorn.run's multi-worker path, keeping the supervisor to learn whether a worker failed to start."""
    config = uvicorn.Config(
        "xtag.service.app:app_from_env", factory=True, workers=settings.server.workers, **uvicorn_options(settings)
    )
    supervisor = Supervisor(config, sockets=[config.bind_socket()])
    log.info("once the workers have loaded: %s", urls(settings))  # each loads before it accepts a connection
    try:
        supervisor.run()
    except KeyboardInterrupt:
        pass
    if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
        raise XtagError("not serving: a worker could not load the bundle (its reason is logged above)")
