"""Server RSS around a burst of stalled request bodies: does the memory come back once they are gone?

Issue 47's defect 6: 300 connections that each sent most of a 2 MB body and then stalled left the server's RSS
about 500 MB higher after they had gone. This starts the server (xtag.service.server.serve, one worker, default
settings) on a tiny bundle built here (the model does not matter: the bodies never reach it), warms it up, then
opens --connections connections at once, each sending a head with Content-Length --body-bytes and all of the body
but its last byte. Once every byte is sent (or --send-s has passed) and the RSS is at its peak, the clients close
(the server drops the bodies, as it does when a body times out), and after --settle-s the RSS is read again.
With --before-code (a folder holding an older `xtag` package: main's tree from `git archive`, models/,
training/, evaluation/, service/, cluster/ and xtag/ as bench/guard_cost.py takes it) that code's server runs the
same burst first, in the same run, so the two are compared on the same machine state.

    .venv/bin/python -m bench.slow_bodies --before-code /tmp/h47-before/pkg --result-name slow_bodies

Target (the issue's): RSS after the burst within 10 % of RSS before it. Prints JSON; exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.helpers.load import Conn, raise_fd_limit, rss_mib, start_server
from bench.helpers.results import save_result
from bench.helpers.server import free_port

ROOT = Path(__file__).resolve().parents[1]

BOUND = 0.10  # RSS after within 10 % of RSS before
TOPICS = {
    "lang::python": "python interpreter script module pip package",
    "lang::c": "c compiler pointer header gcc library",
    "use::gaming": "game player level arcade puzzle fun",
    "works-with::image": "image photo picture pixel raster png",
    "use::networking": "network socket http server tcp proxy",
    "works-with::db": "database sql query table postgres index",
}


def tiny_bundle(folder: Path) -> Path:
    """An XR-Linear bundle of a few dozen documents (what the server holds besides the bodies stays small)."""
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run
    from xtag.training.run import train_run
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig

    names = list(TOPICS)
    rows = [
        {
            "id": f"d{i}",
            "text": f"{TOPICS[names[i % 6]]} {TOPICS[names[(i + 1) % 6]]} doc{i % 5}",
            "labels": [names[i % 6]],
        }
        for i in range(48)
    ]
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TrainConfig(corpus=corpus, xlinear=XLinearConfig(tree=TreeConfig(max_leaf_size=4), n_jobs=1))
    train_run(cfg, folder / "run", progress=False)
    export_run(folder / "run", folder / "bundle", "slow-bodies")
    return folder / "bundle"


async def stalled(port: int, body_bytes: int, sent: list[int], ready: asyncio.Event) -> None:
    """Sends a head and all but the last byte of the body, then waits for `ready` and closes."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    try:
        head = (
            "POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {body_bytes}\r\n\r\n"
        )
        writer.write(head.encode())
        piece = b'{"text": "' + b"a" * 65536
        left = body_bytes - 1
        while left > 0 and not ready.is_set():
            chunk = piece[: min(len(piece), left)]
            writer.write(chunk)
            await writer.drain()
            left -= len(chunk)
            sent[0] += len(chunk)
        await ready.wait()
    except OSError:
        pass
    finally:
        writer.close()


async def burst(port: int, pid: int, args) -> dict:
    conn = await Conn.open(port)
    for _ in range(20):  # warm-up: the first requests' one-time allocations are not the bodies'
        status, _, _ = await conn.request("POST", "/v1/predict", b'{"text": "python script", "k": 3}')
        assert status == 200, status
    conn.close()
    await asyncio.sleep(1.0)
    before = rss_mib(pid)
    sent, ready, peak = [0], asyncio.Event(), before
    clients = [asyncio.ensure_future(stalled(port, args.body_bytes, sent, ready)) for _ in range(args.connections)]
    start, total = time.perf_counter(), args.connections * (args.body_bytes - 1)
    while time.perf_counter() - start < args.send_s and sent[0] < total:
        await asyncio.sleep(0.2)
        peak = max(peak, rss_mib(pid))
    await asyncio.sleep(1.0)  # the server reads what is still in the sockets
    peak = max(peak, rss_mib(pid))
    sent_s = time.perf_counter() - start
    ready.set()
    await asyncio.gather(*clients)
    await asyncio.sleep(args.settle_s)
    after = rss_mib(pid)
    conn = await Conn.open(port)  # still serving, and what one more request does to the RSS
    status, _, _ = await conn.request("POST", "/v1/predict", b'{"text": "python script", "k": 3}')
    conn.close()
    return {
        "sent_mb": round(sent[0] / 1e6, 1),
        "send_s": round(sent_s, 1),
        "rss_mib": {"before": round(before, 1), "peak": round(peak, 1), "after": round(after, 1)},
        "after_over_before": round(after / before, 3),
        "status_after": status,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def run(bundle: Path, code: Path | None, args) -> dict:
    port = free_port()
    extra = {"XTAG_LOG_LEVEL": "critical"}
    proc = start_server(bundle, port, None, code or ROOT, extra)
    try:
        out = asyncio.run(burst(port, proc.pid, args))
    finally:
        proc.terminate()
        proc.wait(60)
    out["ok"] = out["after_over_before"] <= 1 + BOUND and out["status_after"] == 200
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--body-bytes", type=int, default=2_000_000)
    ap.add_argument("--send-s", type=float, default=60.0, help="longest the clients send before they stall")
    ap.add_argument("--settle-s", type=float, default=3.0, help="wait after the clients closed before reading RSS")
    ap.add_argument("--before-code", type=Path, help="also run this older `xtag` package's server, first")
    ap.add_argument("--result-name", help="write bench/results/NAME.json")
    args = ap.parse_args()
    raise_fd_limit()
    work = Path(tempfile.mkdtemp(prefix="slow_bodies_"))
    try:
        bundle = tiny_bundle(work)
        runs = {}
        if args.before_code is not None:
            runs["before"] = run(bundle, args.before_code.resolve(), args)
        runs["after"] = run(bundle, None, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"connections": args.connections, "body_bytes": args.body_bytes, "runs": runs}
    print(json.dumps(out, indent=1))
    if args.result_name:
        save_result(args.result_name, out)
    return 0 if runs["after"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
