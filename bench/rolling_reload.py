"""Failed requests per rolling reload: `xtag serve --workers 2` under keep-alive clients while SIGHUP rolls the workers.

Issue 38, item 3: 3-8 of ~10-18K requests failed per SIGHUP, because the retiring worker closed its idle
keep-alive connections at once while a client was already sending its next request on one. This starts
`xtag serve BUNDLE --workers 2` (this checkout's code, or --server-code's) on 127.0.0.1, drives it with
--clients closed-loop keep-alive clients (service_load.client: POST /v1/predict, one text, k=10; a
`Connection: close` answer makes the client reconnect, as real clients do), and sends SIGHUP --reloads
times, each once the previous roll is over (every worker replaced) plus --pause seconds. With --think-ms
each client pauses after each answer, so that connections are often idle when a worker drains. A failure
is a connection error or a status other than 2xx; each is counted against the roll it happened in.

    .venv/bin/python -m bench.rolling_reload --bundle bundles/debtags-xl --reloads 10

Target: 0 failed requests in every roll. Prints JSON (requests and failures per reload); exits 1 on a miss.
Bounded: the whole run stops after --timeout seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.helpers import load as service_load

ROOT = Path(__file__).resolve().parents[1]


class TimedTally(service_load.Tally):
    """service_load's tally, with when each failure (connection error or non-2xx answer) happened."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_at: list[float] = []
        tally = self

        class Statuses(list):
            def append(self, status: int) -> None:
                super().append(status)
                if not 200 <= status < 300:
                    tally.failed_at.append(time.perf_counter())

        self.status = Statuses()

    def error(self, what: str) -> None:
        self.failed_at.append(time.perf_counter())
        super().error(what)


def workers(supervisor: int) -> set[int]:
    """Pids of the supervisor's uvicorn workers (spawned children; not multiprocessing's resource tracker)."""
    out = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == supervisor and b"spawn_main" in (proc / "cmdline").read_bytes():
                out.add(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


async def roll(proc: subprocess.Popen, count: int, pause: float, deadline: float, windows: list[dict]) -> None:
    """SIGHUP `count` times, `pause` s apart; a roll is over when no worker from before it is left and as
    many new ones run (uvicorn starts each replacement and waits until it serves before retiring the old one)."""
    await asyncio.sleep(pause)
    for _ in range(count):
        before = workers(proc.pid)
        start = time.perf_counter()
        proc.send_signal(signal.SIGHUP)
        now = before
        while time.perf_counter() < deadline and (now & before or len(now) < len(before)):
            await asyncio.sleep(0.05)
            now = workers(proc.pid)
        windows.append({"start": start, "end": time.perf_counter(), "replaced": len(before - now)})
        if now & before:
            return  # out of time
        await asyncio.sleep(pause)


async def drive(port: int, proc: subprocess.Popen, bodies: list[bytes], args) -> dict:
    """The clients run from the start until the last roll is over (and its pause after it)."""
    tally, windows = TimedTally(), []
    deadline = time.perf_counter() + args.timeout
    tasks = [
        asyncio.ensure_future(
            service_load.client(port, bodies, c * 7919, deadline, tally, True, "", args.think_ms / 1e3)
        )
        for c in range(args.clients)
    ]
    await roll(proc, args.reloads, args.pause, deadline, windows)
    end = time.perf_counter()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"tally": tally, "windows": windows, "end": end}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--reloads", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--think-ms", type=float, default=0.0, help="each client pauses up to this long (uniform) after each answer"
    )
    ap.add_argument("--pause", type=float, default=2.0, help="seconds of steady load before and after each roll")
    ap.add_argument("--timeout", type=float, default=300.0, help="the whole run stops after this many seconds")
    ap.add_argument("--port", type=int, default=18300)
    ap.add_argument("--server-code", type=Path, default=ROOT, help="folder whose `xtag` package the server runs")
    ap.add_argument("--env", action="append", default=[], metavar="XTAG_NAME=VALUE", help="a server setting")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    bodies = [json.dumps({"text": t, "k": 10}).encode() for t in service_load.FALLBACK_TEXTS]
    service_load.raise_fd_limit()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
    env.update({"XTAG_LOG_LEVEL": "warning", "PYTHONPATH": str(args.server_code)})
    env.update(dict(item.split("=", 1) for item in args.env))
    command = [sys.executable, "-m", "xtag", "serve", str(args.bundle.resolve()), "--host", "127.0.0.1"]
    command += ["--port", str(args.port), "--workers", str(args.workers)]
    proc = subprocess.Popen(command, cwd=args.server_code, env=env)
    try:
        wait_serving(proc, args.port)
        run = asyncio.run(drive(args.port, proc, bodies, args))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    tally, windows = run["tally"], run["windows"]
    per_reload = []
    for n, w in enumerate(windows):
        nxt = windows[n + 1]["start"] if n + 1 < len(windows) else run["end"]
        # a failure belongs to the roll in progress, or to the last one before it (its drain may outlast the roll)
        failed = sum(w["start"] <= t < nxt for t in tally.failed_at)
        per_reload.append({"seconds": round(w["end"] - w["start"], 2), "failed": failed, "replaced": w["replaced"]})
    before_first = sum(t < windows[0]["start"] for t in tally.failed_at) if windows else len(tally.failed_at)
    statuses = {str(s): tally.status.count(s) for s in sorted(set(tally.status))}
    non_2xx = sum(v for s, v in statuses.items() if not s.startswith("2"))
    out = {
        "bundle": str(args.bundle),
        "server_code": str(args.server_code),
        "server_env": args.env,
        "clients": args.clients,
        "think_ms": args.think_ms,
        "workers": args.workers,
        "reloads": len(windows),
        "requests": len(tally.status) + tally.connection_errors,
        "statuses": statuses,
        "connection_errors": tally.connection_errors,
        "error_samples": tally.error_samples,
        "failed_before_first_reload": before_first,
        "failed_per_reload": [r["failed"] for r in per_reload],
        "per_reload": per_reload,
    }
    out["ok"] = len(windows) == args.reloads and tally.connection_errors == 0 and non_2xx == 0
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if out["ok"] else 1


def wait_serving(proc: subprocess.Popen, port: int, timeout: float = 300.0) -> None:
    """Until /ready answers 200 (one worker ready; then a short wait so that the others are too)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if asyncio.run(service_load._once(port, "GET", "/ready"))[0] == 200:
                time.sleep(1.0)
                return
        except (OSError, asyncio.IncompleteReadError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"server not ready in {timeout} s")


if __name__ == "__main__":
    sys.exit(main())
