"""Service under load on loopback: steady clients, clients during reloads, and a flood past XTAG_MAX_QUEUE.

Starts the server (xtag.service.server.serve, one worker, default settings but XTAG_MAX_QUEUE when given)
in a subprocess and drives it from this process, the load generator, with closed-loop keep-alive
clients: each sends POST /v1/predict (one text, k=10), waits for the answer, and sends the next.

  (a) steady: --clients clients for --seconds → errors, p50, p99 (targets: 0 errors, p99 ≤ 5 × p50)
  (b) reloads: the same with --reloads POST /v1/admin/reload (no body: re-read the configured bundle; needs
      --admin-key, since the admin plane is off without one) spread over the run → failed requests (target 0) and each reload's status and duration
  (c) flood: --flood-clients clients → every answer 2xx, or 503/429 with Retry-After (target); p99 of
      the admitted requests; how fast refusals come back; the server's RSS (start, peak, end)
  (d) storm: the same clients, but a refused client retries at once instead of waiting its Retry-After
      (a retry storm): useful (2xx) throughput, admitted p50/p99, refusal latency, RSS
  (e) slow: --slow-bodies connections send a head and 1 byte of a 100-byte body, --slow-heads send half
      a head, then both send nothing (and reconnect when cut off); beside them one client sends a
      prediction every 0.25 s → its statuses and worst latency (target: 200 within the server's body or
      head deadline + 1 s), how the slow connections ended and after how long, the server's RSS

The clients are a minimal HTTP/1.1 client on raw asyncio streams (as in service_latency.py), not httpx
or aiohttp: 1,000 of them in one process cost the loop little, so on a small machine the figures say
more about the server than about the client. A refused client waits the Retry-After it was given
before its next request, as a well-behaved client does, except in the storm phase.
--server-code DIR serves another checkout's code (a folder holding an `xtag` package, e.g. the tree of
an older commit with models/, training/, evaluation/, service/ linked under xtag/), for before/after
figures on the same machine state; --env sets XTAG_* variables of the server.
The machine's load average and this process's CPU time are printed beside the figures: on a shared
machine the client and the server compete for the CPUs.

    .venv/bin/python -m bench.service_load --bundle bench/out/xlinear_vs_pecos/xtag_bundle \\
        --texts ../shared/data/debtags/test.jsonl.gz --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench.helpers.load import FALLBACK_TEXTS, Conn, Tally, client, ms, raise_fd_limit, rss_mib, start_server
from bench.helpers.results import save_result
from bench.helpers.server import free_port

ROOT = Path(__file__).resolve().parents[1]


async def reloader(port: int, count: int, seconds: float, start: float, auth: str) -> list[dict]:
    """`count` reloads of the configured bundle (no body: re-read the configured path), spread over the run."""
    out = []
    for n in range(count):
        await asyncio.sleep(max(start + seconds * (n + 1) / (count + 1) - time.perf_counter(), 0))
        t = time.perf_counter()
        try:
            conn = await Conn.open(port)
            try:
                # an empty JSON body: the service refuses a POST without a JSON Content-Type (CSRF)
                status, _, data = await conn.request("POST", "/v1/admin/reload", b"", auth)
            finally:
                conn.close()
            out.append({"status": status, "seconds": round(time.perf_counter() - t, 3), "detail": data[:200].decode()})
        except (OSError, asyncio.IncompleteReadError) as exc:
            out.append({"status": None, "seconds": round(time.perf_counter() - t, 3), "detail": str(exc)})
    return out


async def rss_sampler(pid: int, until: float, samples: list[float]) -> None:
    while time.perf_counter() < until:
        samples.append(rss_mib(pid))
        await asyncio.sleep(0.25)


async def phase(
    port: int, pid: int, bodies: list[bytes], clients: int, seconds: float, args, reloads: int = 0, backoff: bool = True
) -> dict:
    tally, rss = Tally(), [rss_mib(pid)]
    auth = f"X-API-Key: {args.api_key}\r\n" if args.api_key else ""
    admin = f"X-Admin-Key: {args.admin_key}\r\n" if args.admin_key else ""
    cpu, wall = time.process_time(), time.perf_counter()
    stop_at = wall + seconds
    jobs = [client(port, bodies, c * 7919, stop_at, tally, backoff, auth) for c in range(clients)]
    extra = [rss_sampler(pid, stop_at, rss)]
    if reloads:
        extra.append(reloader(port, reloads, seconds, wall, admin))
    done = await asyncio.gather(*jobs, *extra)
    wall = time.perf_counter() - wall
    rss.append(rss_mib(pid))
    status = np.array(tally.status, dtype=int)
    lat = np.array(tally.seconds)
    ok, refused = lat[(status >= 200) & (status < 300)], lat[np.isin(status, (429, 503))]
    other = status[~((status >= 200) & (status < 300)) & ~np.isin(status, (429, 503))]
    out = {
        "clients": clients,
        "seconds": round(wall, 2),
        "requests": int(len(status)),
        "admitted_2xx": int(len(ok)),
        "admitted_per_s": round(len(ok) / wall, 1),
        "refused_503_429": int(len(refused)),
        "refused_without_retry_after": tally.refusals_without_retry_after,
        "other_status": {str(s): int((other == s).sum()) for s in np.unique(other)},
        "connection_errors": tally.connection_errors,
        "error_samples": tally.error_samples,
        "errors": int(len(other)) + tally.connection_errors,
        "admitted_ms": {"p50": ms(ok, 50), "p90": ms(ok, 90), "p99": ms(ok, 99), "max": ms(ok, 100)},
        "refused_ms": {"p50": ms(refused, 50), "p99": ms(refused, 99)},
        "server_rss_mib": {"start": round(rss[0], 1), "peak": round(max(rss), 1), "end": round(rss[-1], 1)},
        "client_cpu_s": round(time.process_time() - cpu, 2),
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    if reloads:
        out["reloads"] = done[-1]
    return out


async def slow_connection(port: int, opening: bytes, stop_at: float, ends: list[tuple[int, float]]) -> None:
    """Sends `opening` and nothing more; records how each connection ended (its status, 0 for a close
    without an answer, -1 for still open at the end) and after how many seconds; reconnects until `stop_at`."""
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        try:
            writer.write(opening)
            async with asyncio.timeout(max(stop_at - time.perf_counter(), 0.01)):
                line = await reader.readline()
            ends.append((int(line[9:12]) if line[9:12].isdigit() else 0, time.perf_counter() - start))
        except TimeoutError:
            ends.append((-1, time.perf_counter() - start))
        except (OSError, asyncio.IncompleteReadError):
            ends.append((0, time.perf_counter() - start))
        finally:
            writer.close()


async def slow_phase(port: int, pid: int, bodies: list[bytes], seconds: float, args) -> dict:
    rss, stop_at = [rss_mib(pid)], time.perf_counter() + seconds
    body_ends: list[tuple[int, float]] = []
    head_ends: list[tuple[int, float]] = []
    auth = f"X-API-Key: {args.api_key}\r\n" if args.api_key else ""
    head = f"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n"
    body_opening = (head + "Content-Length: 100\r\n\r\n{").encode()
    slow = [slow_connection(port, body_opening, stop_at, body_ends) for _ in range(args.slow_bodies)]
    slow += [slow_connection(port, head.encode(), stop_at, head_ends) for _ in range(args.slow_heads)]
    statuses, latencies = [], []

    async def legitimate() -> None:
        await asyncio.sleep(1.0)  # the slow connections are in
        conn, i = None, 0
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            try:
                conn = conn or await Conn.open(port)
                status, _, _ = await conn.request("POST", "/v1/predict", bodies[i % len(bodies)], auth)
            except (OSError, asyncio.IncompleteReadError) as exc:
                status, conn = f"{type(exc).__name__}", None
            statuses.append(status)
            latencies.append(time.perf_counter() - start)
            i += 1
            await asyncio.sleep(0.25)

    await asyncio.gather(*slow, legitimate(), rss_sampler(pid, stop_at, rss))
    rss.append(rss_mib(pid))

    def ended(ends: list[tuple[int, float]]) -> dict:
        codes = [str(code) for code, _ in ends]
        cut = np.array([t for code, t in ends if code >= 0])
        return {
            "connections": len(ends),
            "ended_by": {c: codes.count(c) for c in sorted(set(codes))},  # -1: still open at the end
            "cut_after_s": {"p50": round(float(np.median(cut)), 2), "max": round(float(cut.max()), 2)}
            if len(cut)
            else None,
        }

    lat = np.array(latencies)
    return {
        "slow_bodies": args.slow_bodies,
        "slow_heads": args.slow_heads,
        "seconds": seconds,
        "legitimate": {
            "requests": len(statuses),
            "status": {str(c): statuses.count(c) for c in sorted(set(statuses), key=str)},
            "ms": {"p50": ms(lat, 50), "max": ms(lat, 100)},
        },
        "slow_body_connections": ended(body_ends),
        "slow_head_connections": ended(head_ends),
        "server_rss_mib": {"start": round(rss[0], 1), "peak": round(max(rss), 1), "end": round(rss[-1], 1)},
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }


def checks(results: dict) -> dict[str, bool]:
    out = {}
    if "steady" in results:
        a = results["steady"]
        out["steady: 0 errors"] = a["errors"] == 0 and a["refused_503_429"] == 0
        out["steady: p99 <= 5 x p50"] = bool(
            a["admitted_ms"]["p99"] and a["admitted_ms"]["p99"] <= 5 * a["admitted_ms"]["p50"]
        )
    if "reloads" in results:
        b = results["reloads"]
        out["reloads: 0 failed requests"] = b["errors"] == 0 and b["refused_503_429"] == 0
        out["reloads: every reload 200"] = all(r["status"] == 200 for r in b["reloads"])
    if "slow" in results:
        legitimate = results["slow"]["legitimate"]
        out["slow: every legitimate prediction 200"] = set(legitimate["status"]) == {"200"}
    for name in ("flood", "storm"):
        if name in results:
            c = results[name]
            out[f"{name}: only 2xx or 503/429 with Retry-After"] = (
                c["errors"] == 0 and c["refused_without_retry_after"] == 0
            )
            out[f"{name}: some admitted"] = c["admitted_2xx"] > 0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--texts", type=Path, help="corpus whose texts the clients send (default: a few built-in ones)")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    ap.add_argument("--clients", type=int, default=100, help="clients in the steady and reload phases")
    ap.add_argument("--reloads", type=int, default=5)
    ap.add_argument("--flood-clients", type=int, default=1000)
    ap.add_argument("--slow-bodies", type=int, default=300, help="slow-body connections in the slow phase")
    ap.add_argument("--slow-heads", type=int, default=100, help="slow-head connections in the slow phase")
    ap.add_argument("--phases", default="steady,reloads,flood,storm")
    ap.add_argument("--max-queue", type=int, help="XTAG_MAX_QUEUE for the server (default: its own default)")
    ap.add_argument("--server-code", type=Path, default=ROOT, help="folder whose `xtag` package the server runs")
    ap.add_argument("--env", action="append", default=[], metavar="XTAG_NAME=VALUE", help="a server setting")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--api-key", help="sent as X-API-Key when the server requires one")
    ap.add_argument("--admin-key", help="the server's XTAG_ADMIN_KEY, sent as X-Admin-Key on reloads (which need it)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument(
        "--save", metavar="NAME", help="write bench/results/NAME.json (needs a service_load table builder to render)"
    )
    args = ap.parse_args()

    if args.texts:
        from xtag.corpus.files import load_corpus

        texts = load_corpus(args.texts, need_labels=False).texts[:5000]
    else:
        texts = FALLBACK_TEXTS
    bodies = [json.dumps({"text": t, "k": args.k}).encode() for t in texts]
    fds = raise_fd_limit()
    load_start = os.getloadavg()
    port = free_port()
    extra = dict(item.split("=", 1) for item in args.env)
    if args.admin_key:  # the reloads need the admin plane on, and as many as asked (no XTAG_RELOAD_INTERVAL_S)
        extra = {"XTAG_ADMIN_KEY": args.admin_key, "XTAG_RELOAD_INTERVAL_S": "0", **extra}
    server = start_server(args.bundle, port, args.max_queue, args.server_code, extra)
    results: dict = {
        "bundle": str(args.bundle),
        "texts": str(args.texts) if args.texts else "built-in",
        "cpus": os.cpu_count(),
        "fd_limit": fds,
        "server_code": str(args.server_code),
        "server_env": extra,
        "load_average_start": [round(x, 2) for x in load_start],
    }
    try:
        for name in args.phases.split(","):
            if name == "slow":
                results[name] = asyncio.run(slow_phase(port, server.pid, bodies, args.seconds, args))
                print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
                continue
            clients = args.flood_clients if name in ("flood", "storm") else args.clients
            reloads = args.reloads if name == "reloads" else 0
            results[name] = asyncio.run(
                phase(port, server.pid, bodies, clients, args.seconds, args, reloads, backoff=name != "storm")
            )
            print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(60)
    results["checks"] = checks(results)
    print(json.dumps(results, indent=1))
    for what, ok in results["checks"].items():
        print(f"{'ok  ' if ok else 'MISS'} {what}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.save:
        save_result(args.save, results)
    return 0 if all(results["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
